"""Merge a table with no key: its newest complete whole-table snapshot replaces the table's rows.

Without a key no row can be matched, so there is no merge rule to apply (`stagedlog.whole_tables`):
the snapshot's rows are written as the table's one bucket, on the driver, and every file the table
had is swapped for them in one commit, so a reader sees the old rows or the new, never a mixture.
The table's log events are not staged: it is as fresh as the dump that read it (the full-refresh
schedule, `dblog dump`, or the dump the capture asks for when the table is new or changed shape).
Soft deletes and change tables do not apply to it: without a key no row has a history.
"""
from __future__ import annotations

import datetime as dt
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DBLogError
from ..model.staged_format import data_columns
from ..spark.data_sources import conform, spark_schema
from ..stagedlog import whole_tables
from ..stagedlog.staged_log import StagedLog
from ..warehouse.commit import CommitError, WrittenFile, commit
from ..warehouse.files import DataFiles
from ..warehouse.merged_state import Bucket, TableState
from ..warehouse.tables import Warehouse, table_state
from ..warehouse.types import BUCKET, DELETED, META
from .merge_result import MergeResult


class WholeTableError(DBLogError, RuntimeError):
    """The table changed under the merge (another writer); re-running the merge converges."""


def merge_whole(staged: StagedLog, warehouse: Warehouse, result: MergeResult, state: TableState | None,
                upto: str | None, lease) -> TableState | None:
    """The table after taking its newest complete snapshot; None when there is none it should
    take: none staged, the one it holds, or one read before the keyed table's last merge (a
    table that gained a key keeps its last snapshot staged: its chunks are merged since)."""
    snap = whole_tables.newest(staged, result.source, result.table)
    if snap is None or (state is not None and (state.whole == snap.ident or (
            state.key and snap.read_at.timestamp() <= (state.merged_at or 0.0)))):
        return None
    with staged.fs.open_input_file(snap.parts[0]) as handle:   # (a dump stages part 0 even of an empty table)
        staged_schema = pq.ParquetFile(handle).schema_arrow
    names = set(data_columns(staged_schema.names))
    columns = [(f.name, f.dataType.simpleString()) for f in spark_schema(staged_schema).fields if f.name in names]
    try:
        pending = warehouse.begin(result.source, result.table, [], columns, state)
    except CommitError as exc:
        raise WholeTableError(f"{result.source}/{result.table}: {exc}") from exc
    if state is not None and state.key:   # a table that lost its key: its rows are matched by none now
        pending.tx.set_properties(**{"dblog.key": "[]"})  # type: ignore[attr-defined]
    target = pa.ipc.read_schema(pa.py_buffer(pending.schema_ipc))
    files = DataFiles(pending.location, target, uuid.uuid4().hex[:12])
    merged_at = dt.datetime.now(dt.UTC)
    for path in snap.parts:
        part = staged.read_chunk(path)
        if part.num_rows:
            files.write(0, False, _rows(part, target, snap.dump_id, merged_at))
    done = files.written()
    written = [WrittenFile(**r) for r in done.to_pylist()] if done is not None else []
    # The log and dumps merged so far stay merged: retention may drop the table's log up to here.
    new = TableState(result.source, result.table, [], columns, [Bucket(0, None, rows=snap.rows)],
                     log_upto=max(upto or "", state.log_upto or "" if state else "") or None,
                     chunks=dict(state.chunks) if state else {}, chunk_counts=dict(state.chunk_counts) if state else {},
                     whole=snap.ident, merged_at=time.time())
    lease.check()   # a merge whose lease lapsed must not commit (as `job._apply`)
    try:
        result.commit_seconds = commit(pending, written, {b.id for b in state.buckets} if state else {0},
                                       new.properties())
    except CommitError as exc:
        raise WholeTableError(f"{result.source}/{result.table}: {exc}") from exc
    result.committed_at, result.commits, result.snapshots_expired = time.time(), 1, pending.expired
    result.upto = new.log_upto
    result.chunks, result.chunk_rows, result.survivors = len(snap.parts), snap.rows, snap.rows
    result.dumps[snap.dump_id] = {"chunks": len(snap.parts), "rows": snap.rows, "dropped": 0}
    result.note = f"whole-table snapshot {snap.dump_id} ({snap.rows} rows, read at {snap.read_at:%H:%M:%S}) " \
                  "replaced the table"
    return table_state(pending.committed, result.source, result.table)


def _rows(part: pa.Table, target: pa.Schema, dump_id: str, merged_at: dt.datetime) -> pa.Table:
    """A snapshot part as warehouse rows: each a row a dump read (no position: none applies)."""
    n = part.num_rows
    meta = {"_dblog_op": pa.repeat(pa.scalar("r"), n), "_dblog_origin": pa.repeat(pa.scalar("dump"), n),
            "_dblog_dump_id": pa.repeat(pa.scalar(dump_id), n),
            "_dblog_merged_at": pa.repeat(pa.scalar(merged_at, pa.timestamp("us", tz="UTC")), n),
            BUCKET: pa.repeat(pa.scalar(0, pa.int32()), n)}
    values = pa.schema([f for f in target if f.name not in (*META, BUCKET, DELETED)])
    data = pa.Table.from_batches([conform(b, values) for b in part.to_batches()], schema=values)
    columns = {**{c: data[c] for c in data.column_names}, **meta}
    out = pa.schema([f for f in target if f.name != DELETED])   # (a soft-delete table's flag: `DataFiles`)
    loose = pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in out})
    return pa.Table.from_arrays(loose.cast(out).columns, schema=out)
