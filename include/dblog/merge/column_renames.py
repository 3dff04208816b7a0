"""A merge that reaches a column rename: the warehouse field renamed, its id and values kept.

The capture records each rename it reads (`dblog.coordination.column_renames`): events before
its position carry the column under the old name, events from it on under the new one. The
merge whose range first holds a rename (after the table's last merge, up to its own position)
renames the stored field in its commit, even with no row to merge: Iceberg keeps the field id,
so every stored row keeps its value under the new name, for every reader, and no repair dump
runs. Every merge whose inputs reach back before a rename reads their old names as the new one:
a log event by its position (exact, whatever columns came and went between), a chunk by the name
its file has (a chunk is read with one schema, so a file holds the old name or the new one).
An old value whose type the new column does not take is null (`try_cast`): the type change that
came with the rename re-reads the rows.

A rename that cannot be told apart is not followed, and the table is re-read, said in the
merge's log and note: the old name is back in the table as another column (an input read after
the rename has it), or the warehouse already has the new name (a dump read it before the capture
placed the rename).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..model.events import ColumnRename
from ..model.staged_format import BEFORE, OLD_KEY, POSITION, UNCHANGED

# An input's position and column names: a staged file read after that position (see `job.Seen`).
Input = tuple[str, set[str]]


@dataclass
class Renaming:
    """What the merge's renames do: `stored`, warehouse column -> its new name (an Iceberg
    rename); `chains`, new name -> the names it had before, each with the position it ended at,
    oldest first; `conflicts`, why a rename is not followed (the table is re-read)."""
    stored: dict[str, str] = field(default_factory=dict)
    chains: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.chains or self.conflicts)

    def key(self, key: list[str]) -> list[str]:
        """A stored key's columns under their new names."""
        return [self.stored.get(k, k) for k in key]

    def current(self, names: set[str]) -> set[str]:
        """An input's column names as the table names them now (an old input's renamed ones new)."""
        final = {old: new for new, chain in self.chains.items() for old, _ in chain}
        return {final.get(n, n) for n in names}

    def events(self, frame: DataFrame, types: dict[str, str]) -> DataFrame:
        """Log events with each renamed column under its new name (`types`: the warehouse's), by
        position; in the old key and the before image of key updates too."""
        have = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        for new, chain in self.chains.items():
            olds = [(old, at) for old, at in chain if old in have]
            if not olds:
                continue
            value: Column | None = None
            for old, at in olds:
                taken = _as(F.col(old), have[old], types.get(new))
                value = (F.when if value is None else value.when)(F.col(POSITION) < F.lit(at), taken)
            assert value is not None
            frame = frame.withColumn(new, value.otherwise(F.col(new)) if new in have else value)
            if UNCHANGED in have:   # the columns an event left out, under their new names too
                frame = frame.withColumn(UNCHANGED, F.transform(UNCHANGED, _renamer(olds, new)))
        for struct in (OLD_KEY, BEFORE):
            if struct in have:
                frame = frame.withColumn(struct, self._struct(frame, struct, types))
        return frame

    def _struct(self, frame: DataFrame, name: str, types: dict[str, str]) -> Column:
        """A struct column (the old key, the before image) with renamed fields under the new name:
        an event's struct holds the old field or the new one, never both (its file's schema)."""
        inner = frame.schema[name].dataType
        assert isinstance(inner, StructType)
        final = {old: new for new, chain in self.chains.items() for old, _ in chain}
        groups: dict[str, list[str]] = {}
        for f in inner.fieldNames():
            groups.setdefault(final.get(f, f), []).append(f)
        out = []
        kinds = {f.name: f.dataType.simpleString() for f in inner.fields}
        for target, sources in groups.items():
            cols = [F.col(name).getField(f) if f == target else _as(F.col(name).getField(f), kinds[f], types.get(target))
                    for f in sorted(sources, key=lambda f: f != target)]
            out.append((F.coalesce(*cols) if len(cols) > 1 else cols[0]).alias(target))
        return F.when(F.col(name).isNull(), F.lit(None)).otherwise(F.struct(*out))

    def chunks(self, frame: DataFrame, types: dict[str, str]) -> DataFrame:
        """Chunk rows with each renamed column under its new name, as their file named it."""
        have = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        for new, chain in self.chains.items():
            olds = [_as(F.col(old), have[old], types.get(new)) for old, _ in reversed(chain) if old in have and old != new]
            if olds:
                frame = frame.withColumn(new, F.coalesce(*([F.col(new)] if new in have else []), *olds))
        return frame


def _as(value: Column, have: str, target: str | None) -> Column:
    """An old column's value as the new column's type: null where it cannot be one (through text:
    a TRY cast Spark refuses outright, DATE to BIGINT say, must not fail the merge; the type change
    that came with the rename re-reads the rows)."""
    return value if target is None or have == target else value.cast("string").try_cast(target)


def rename_segment(events: pa.Table, chains: dict[str, list[tuple[str, str]]]) -> pa.Table:
    """A staged segment's events with renamed columns under their new names, row by row: a row
    before a rename's position takes the old column's value (a compacted segment may hold both
    names, and a name added again after the rename is another column)."""
    for new, chain in chains.items():
        olds = [(old, at) for old, at in chain if old != new and old in events.column_names]
        if not olds:
            continue
        target = events[new].type if new in events.column_names else events[olds[-1][0]].type
        value = events[new] if new in events.column_names else pa.nulls(events.num_rows, target)
        for old, at in olds:   # (the old name keeps only what it holds after: a column added again)
            take = pc.and_(pc.less(events[POSITION], at), pc.is_valid(events[old]))
            value = pc.if_else(take, _arrow_as(events[old], target), value)
            events = events.set_column(events.column_names.index(old), old,
                                       pc.if_else(take, pa.nulls(events.num_rows, events[old].type), events[old]))
        names = events.column_names
        events = events.set_column(names.index(new), new, value) if new in names else events.append_column(new, value)
    return events


def _arrow_as(values, target: pa.DataType):
    """`values` as `target`, null where a value cannot be one."""
    if values.type == target:
        return values
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(values), target)


def _renamer(olds: list[tuple[str, str]], new: str) -> Callable[[Column], Column]:
    def renamed(name: Column) -> Column:
        value: Column | None = None
        for old, at in olds:
            test = (name == F.lit(old)) & (F.col(POSITION) < F.lit(at))
            value = F.when(test, F.lit(new)) if value is None else value.when(test, F.lit(new))
        assert value is not None
        return value.otherwise(name)
    return renamed


def plan(renames: list[ColumnRename], stored: list[str], inputs: list[Input], after: str | None) -> Renaming:
    """What `renames` (those after the merge's earliest input, up to its position) do to a table
    storing `stored` columns, whose merged range starts `after` (renames up to it were decided by
    an earlier merge: they only map inputs), with `inputs`."""
    history: dict[str, list[tuple[str, str]]] = {}
    for r in sorted(renames, key=lambda r: r.position):
        history[r.new] = history.pop(r.old, []) + [(r.old, r.position)]
    out = Renaming()
    for new, chain in history.items():
        fresh = any(after is None or at > after for _, at in chain)
        olds = [old for old, _ in chain if old != new]
        back = [old for old, at in chain if old != new and any(p >= at and old in names for p, names in inputs)]
        taken = [old for old in olds if old in stored]
        if back:
            why = f"column {chain[0][0]} renamed {new} while a column named {', '.join(back)} is in the table again"
        elif new in stored and (taken or fresh and new not in {o for o, _ in chain}):
            why = f"column {(taken or olds)[-1]} renamed {new}, which the warehouse has already"
        else:
            out.chains[new] = chain
            if taken and fresh:
                out.stored[taken[-1]] = new
            continue
        if fresh:
            out.conflicts.append(why)
    return out
