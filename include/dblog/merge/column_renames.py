"""A merge that reaches a column rename: the warehouse field renamed, its id and values kept.

The capture records each rename it reads (`dblog.coordination.column_renames`): events before
its position carry the column under the old name, events from it on under the new one. A merge
whose range holds renames (after the table's last merge, up to its own position)
- renames the stored field in its commit (Iceberg keeps the field id, so every stored row keeps
  its value under the new name, for every reader: no repair dump);
- reads its inputs' old names as the new one: a log event by its position (exact, whatever
  columns came and went between), a chunk by the name its file has (a chunk is read with one
  schema, so a file holds the old name or the new one).

When the old name is back in the table as another column (renamed, then added again), an
input's old name cannot be told apart: that rename is not followed (the new name is added as a
column of its own) and the merge asks for the table to be re-read, saying why. The same when the
warehouse already has the new name (a dump read it before the capture saw the rename).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..model.events import ColumnRename
from ..model.staged_format import POSITION, UNCHANGED


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

    def events(self, frame: DataFrame) -> DataFrame:
        """Log events with each renamed column under its new name, by position."""
        have = set(frame.columns)
        for new, chain in self.chains.items():
            olds = [(old, at) for old, at in chain if old in have]
            if not olds:
                continue
            value: Column | None = None
            for old, at in olds:
                value = (F.when if value is None else value.when)(F.col(POSITION) < F.lit(at), F.col(old))
            assert value is not None
            frame = frame.withColumn(new, value.otherwise(F.col(new)) if new in have else value)
            if UNCHANGED in have:   # the columns an event left out, under their new names too
                frame = frame.withColumn(UNCHANGED, F.transform(UNCHANGED, _renamer(olds, new)))
        return frame

    def chunks(self, frame: DataFrame) -> DataFrame:
        """Chunk rows with each renamed column under its new name, as their file named it."""
        have = set(frame.columns)
        for new, chain in self.chains.items():
            olds = [F.col(old) for old, _ in reversed(chain) if old in have and old != new]
            if olds:
                frame = frame.withColumn(new, F.coalesce(*([F.col(new)] if new in have else []), *olds))
        return frame


def rename_segment(events: pa.Table, last: str, chains: dict[str, list[tuple[str, str]]]) -> pa.Table:
    """A staged segment's events (its `last` position: one schema) with renamed columns under
    their new names (`Renaming.chains`)."""
    names = events.column_names
    for new, chain in chains.items():
        olds = [old for old, at in chain if last < at and old in names and old != new]
        if olds and new not in names:
            names = [new if n == olds[0] else n for n in names]
    return events.rename_columns(names) if names != events.column_names else events


def _renamer(olds: list[tuple[str, str]], new: str) -> Callable[[Column], Column]:
    def renamed(name: Column) -> Column:
        value: Column | None = None
        for old, at in olds:
            test = (name == F.lit(old)) & (F.col(POSITION) < F.lit(at))
            value = F.when(test, F.lit(new)) if value is None else value.when(test, F.lit(new))
        assert value is not None
        return value.otherwise(name)
    return renamed


def plan(renames: list[ColumnRename], stored: list[str], newest: set[str]) -> Renaming:
    """What `renames` (in log order, the merge's range's) do to a table storing `stored` columns
    whose newest input has the `newest` columns."""
    history: dict[str, list[tuple[str, str]]] = {}
    for r in sorted(renames, key=lambda r: r.position):
        history[r.new] = history.pop(r.old, []) + [(r.old, r.position)]
    out = Renaming()
    for new, chain in history.items():
        if new not in newest:
            continue   # renamed further past this merge's range, or dropped: nothing to follow
        back = [old for old, _ in chain if old != new and old in newest]
        taken = [old for old, _ in chain if old in stored and old != new]
        if back:
            out.conflicts.append(f"column {chain[0][0]} renamed {new} while a column named {', '.join(back)} "
                                 "is in the table again")
        elif new in stored and taken:
            out.conflicts.append(f"column {taken[-1]} renamed {new}, which the warehouse has already")
        else:
            out.chains[new] = chain
            if taken:
                out.stored[taken[-1]] = new
    return out
