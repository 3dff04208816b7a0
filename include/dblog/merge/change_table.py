"""The change table: an append-only Iceberg table of every change merged into a warehouse table.

For the tables `DBLOG_CHANGE_TABLES` names, `("{source}__changes", table)` holds one row per change,
oldest position first within each append:

    the row's columns    the row after the change (a delete's: the row before it, as far as the
                         source logged it); columns the table gained later are null before them
    _op                  c, u, d; r: a row a dump read that the merge took as the table's row (one
                         a newer change replaced in the same merge is not listed: the change is;
                         a key-list dump's absent key is a d); a primary-key update is a d at the
                         old key (with the row's values before it) and a u at the new one
    _position            the change's source position (`dblog.model.positions` order)
    _commit_ts, _txid    the source transaction's commit time and id (null for dump rows)
    _unchanged           columns the event did not carry (PostgreSQL's unchanged TOAST values)
    _merged_at           when the merge that took it ran
    _merged_day          its day (UTC): the table's identity partition (readers prune on it, and
                         retention drops whole days)

It is written by the merge that committed the warehouse table, right after that commit and never
before it. Each of its snapshots records how far it reaches (`dblog.upto`: the log position;
`dblog.merged_at`: the warehouse commit whose dump rows it took), so a change table that missed a
merge (a crash between the two commits) takes what it missed on the next: the log events from the
staged log (kept for `DBLOG_LOG_RETENTION_SECONDS`), the dump rows from the warehouse table's
`_dblog_merged_at` (file statistics prune the untouched files). Rows older than the staged log's
retention are deleted by `dblog maintain` (`change_tables.expire_days`).
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, GreaterThan
from pyiceberg.io.pyarrow import schema_to_pyarrow

from ..model.events import ColumnRename
from ..model.staged_format import BEFORE, COMMIT_TS, OLD_KEY, OP, POSITION, TOMBSTONES, TXID, Op
from ..spark.data_sources import conform
from ..stagedlog.staged_log import StagedLog
from ..warehouse import change_tables as CT
from ..warehouse import types as T
from ..warehouse.catalog import BRANCH
from ..warehouse.commit import thin_history
from ..warehouse.tables import Warehouse
from . import column_renames

log = logging.getLogger("dblog.merge")


@dataclass(frozen=True)
class ChangeRange:
    """What one append added: the change table's snapshot before it (None: it was empty) and after."""
    after: int | None
    upto: int
    rows: int


def ensure(warehouse: Warehouse, source: str, table: str, columns: list[tuple[str, str]], after: str | None,
           started: dt.datetime) -> None:
    """Before a merge commits the warehouse table: its change table, created empty if need be,
    reaching where the table is now (`after`, its log position; `started`, the merge's start):
    so a merge that dies after its commit leaves the change table behind, never without a start."""
    if CT.load(warehouse, source, table) is None:
        CT.create(warehouse, source, table, columns, CT.Reach(after, started))


def record(warehouse: Warehouse, staged: StagedLog, source: str, table: str, committed, upto: str,
           took_chunks: bool, renames: list[ColumnRename]) -> ChangeRange | None:
    """Append to the change table what the warehouse table `committed` (up to `upto`) took since
    the change table's reach: the merge that just committed, and whatever an earlier one took that
    the change table missed. `took_chunks`: the merge took dump rows; `renames`: the table's
    column renames (the change table follows those after its reach, as the table did). None:
    nothing new."""
    changes = CT.load(warehouse, source, table)
    reach = CT.reach(changes) if changes is not None else None
    if changes is None or reach is None:
        return None   # (`ensure` runs before every commit: a table made by hand, or the setting just set)
    now_columns = T.data_columns(committed.schema())
    renaming = column_renames.plan([r for r in renames if (reach.upto is None or r.position > reach.upto)
                                    and r.position <= upto],
                                   [c for c, _ in CT.data_columns(changes)], [], reach.upto)
    columns = _union(changes, now_columns, renaming.stored)
    now = dt.datetime.now(dt.UTC)
    target = schema_to_pyarrow(CT.schema(columns), include_field_ids=False)
    behind = reach.upto is None or reach.upto < upto
    found = [p for p in (_log_rows(staged, source, table, reach.upto, upto, target, now, renaming.chains)
                         if behind else None,
                         _dump_rows(committed, reach.taken, target, now) if took_chunks or behind else None)
             if p is not None]
    if not found:
        return None
    rows = pa.concat_tables(found).sort_by([(POSITION, "ascending"), (OP, "ascending")])
    before = changes.current_snapshot().snapshot_id if changes.current_snapshot() else None
    with changes.transaction() as tx:
        if renaming.stored or dict(CT.data_columns(changes)) != dict(columns):
            T.evolve(tx, CT.schema(CT.data_columns(changes)), columns, renaming.stored)
        final = schema_to_pyarrow(tx.table_metadata.schema(), include_field_ids=False)
        tx.append(_fit(rows, final), snapshot_properties=CT.Reach(upto, now).properties())
        # By age only: a downstream job reads the snapshot range an asset event named.
        thin_history(tx, by_count=False)
    changes = changes.refresh()
    log.info("%s/%s: %d change(s) appended to its change table (snapshot %s)", source, table, rows.num_rows,
             changes.current_snapshot().snapshot_id)
    return ChangeRange(before, changes.current_snapshot().snapshot_id, rows.num_rows)


def _union(changes, columns: list[tuple[str, str]], renamed: dict[str, str]) -> list[tuple[str, str]]:
    """The change table's data columns after this append: every column it ever had (older changes
    hold them; a `renamed` one under its new name) and the warehouse table's, whose types win: a
    widened type is widened in place, any other type change replaces the column (`types.evolve`;
    older changes keep the old values in the snapshots before it)."""
    union = {renamed.get(c, c): t for c, t in CT.data_columns(changes)} if changes is not None else {}
    union.update(columns)
    return list(union.items())


def _fit(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    batches = [conform(b, schema) for b in rows.to_batches()]
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def _log_rows(staged: StagedLog, source: str, table: str, since: str | None, upto: str, target: pa.Schema,
              now: dt.datetime, renamed: dict[str, list[tuple[str, str]]]) -> pa.Table | None:
    """The staged events after `since` up to `upto`, a key update also as a d at its old key. Each
    segment is read and fitted to the change table apart: a column whose type was converted
    differs between segments (as the merge's own reads, a value the new type cannot hold is null)."""
    parts = []
    for path in staged.segments(source, table, high=upto, after=since):
        try:
            events = staged.read_segment(path)
        except FileNotFoundError:   # compacted since listed: read what replaced it
            return _log_rows(staged, source, table, since, upto, target, now, renamed)
        keep = pc.less_equal(events[POSITION], upto)
        if since is not None:
            keep = pc.and_(keep, pc.greater(events[POSITION], since))
        events = column_renames.rename_segment(events.filter(keep), renamed)
        if events.num_rows:
            parts += [_as_target(events, target, now), *_old_keys(events, target, now)]
    if not parts:
        return None
    return _once(pa.concat_tables(parts))


def _old_keys(events: pa.Table, target: pa.Schema, now: dt.datetime) -> list[pa.Table]:
    """A d at the old key of each primary-key update, with the row's values before it."""
    if OLD_KEY not in events.column_names:
        return []
    moved = events.filter(pc.is_valid(events[OLD_KEY]))
    if not moved.num_rows:
        return []
    old = moved[OLD_KEY].combine_chunks()
    was = moved[BEFORE].combine_chunks() if BEFORE in moved.column_names else None
    values = {f.name: was.field(f.name) for f in was.type} if was is not None else {}
    keyed = {**values, **{f.name: old.field(f.name) for f in old.type}}
    gone = pa.table({**keyed, POSITION: moved[POSITION], OP: pa.repeat(pa.scalar(str(Op.DELETE)), moved.num_rows),
                     COMMIT_TS: moved[COMMIT_TS], TXID: moved[TXID]})
    return [_as_target(gone, target, now)]


def _once(rows: pa.Table) -> pa.Table:
    """Each (position, op) once: an event re-staged after a crash sits in two segments."""
    rows = rows.sort_by([(POSITION, "ascending"), (OP, "ascending")])
    seen = list(zip(rows[POSITION].to_pylist(), rows[OP].to_pylist()))
    keep = [i for i, p in enumerate(seen) if i == 0 or p != seen[i - 1]]
    return rows.take(keep) if len(keep) != len(seen) else rows


def _dump_rows(committed, taken: dt.datetime | None, target: pa.Schema, now: dt.datetime) -> pa.Table | None:
    """The rows the warehouse table took from dumps after `taken` (their `_dblog_merged_at`):
    live ones on main as r; a dump's absent keys (tombstones, on the tombstone branch unless the
    table keeps soft deletes on main) as d."""
    where = EqualTo("_dblog_origin", "dump")  # type: ignore[call-arg,arg-type]
    if taken is not None:
        where = And(where, GreaterThan("_dblog_merged_at", taken.isoformat()))  # type: ignore[assignment,call-arg,arg-type]
    refs = ["main"] + ([BRANCH] if committed.snapshot_by_name(BRANCH) is not None else [])
    found = pa.concat_tables([committed.scan(row_filter=where).use_ref(ref).to_arrow() for ref in refs],
                             promote_options="permissive")
    if not found.num_rows:
        return None
    op = pc.if_else(pc.is_in(found["_dblog_op"], pa.array([str(o) for o in TOMBSTONES])), str(Op.DELETE), str(Op.READ))
    found = found.append_column(OP, op).append_column(POSITION, found["_dblog_position"])
    return _as_target(found, target, now)


def _as_target(rows: pa.Table, target: pa.Schema, now: dt.datetime) -> pa.Table:
    """`rows` with exactly the change table's columns (missing ones null), stamped `_merged_at`."""
    n = rows.num_rows
    stamped = rows.drop_columns([c for c in (CT.MERGED_AT, CT.DAY) if c in rows.column_names])
    stamped = stamped.append_column(CT.MERGED_AT, pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), n))
    return _fit(stamped.append_column(CT.DAY, pa.repeat(pa.scalar(now.date(), pa.date32()), n)), target)
