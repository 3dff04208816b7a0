"""A small merge without Spark: a few log events into a table stored as one bucket, on the driver.

A Spark merge costs about a second whatever its size (a dozen jobs, some 1,800 calls into the
JVM), so a cycle merging dozens of small tables waits on Spark, not on data. A merge that
qualifies is applied here with pyarrow instead, by the same rule as `frame_rules.latest` without
the fill: per key the record with the highest position wins (a stored row on a tie), a key
update leaves a tombstone at its old key, tombstones are purged as the Spark path purges them;
the rows are written by the executors' writer (`warehouse.files.DataFiles`) and committed the
same way. It qualifies when:

* its input is log events only (no chunk: windows and first loads stay with Spark),
* every event carries every value (nothing for the fill rule to fill),
* the table does not exist yet (its first merge: created with the events' columns) or is stored
  as one bucket without position deletes (`delta`) that this merge will not split, of at most
  `DBLOG_MERGE_LOCAL_ROWS` rows or at most `DBLOG_MERGE_LOCAL_BUCKET_BYTES` of stored Parquet
  (the driver holds it decompressed, 5-10 times that for compressible columns, once per table
  merged at once; past 20,000 rows a probe table's merges went from 0.2 s here to 4-12 s through
  Spark on a busy machine, bench scenario 1b), and the events are at most `DBLOG_MERGE_LOCAL_ROWS`,
* the events' columns are the table's, each of the table's own type (a type change, even a
  widening, is Spark's: it evolves the table's schema), and no key column is a float.

Events that qualify but for the bucket (a bigger table, whose key types `bucket_bounds` orders)
are read here too, and merged in place on the driver by `local_delta` (`LocalEvents.whole_bucket`
False). Anything else returns None and takes the Spark path. `tests/spark/test_small_merge.py` holds both
paths to the same tables, metadata columns included.
"""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow

from ..model.staged_format import BEFORE, COMMIT_TS, OLD_KEY, OP, POSITION, TOMBSTONES, UNCHANGED, Op, key_columns
from ..stagedlog.staged_log import StagedLog
from ..storage import filesystem
from ..warehouse import types as T
from ..warehouse.adoption import field_id
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import DataFiles
from ..warehouse.merged_state import Bucket, TableState
from ..warehouse.types import BUCKET, MISSING
from .bucket_bounds import BucketBounds
from .rewrite import Rewritten

_POSITION, _OP, _ORIGIN, _DUMP, _MERGED_AT = "_dblog_position", "_dblog_op", "_dblog_origin", "_dblog_dump_id", \
    "_dblog_merged_at"


@dataclass
class LocalEvents:
    """A qualifying merge's new log events (position order, each once), the segments they were
    read from (a fallback reads the same ones with Spark), their commit times and key columns."""
    events: pa.Table
    segments: list[str]
    newest_commit_ts: float | None
    oldest_commit_ts: float | None
    key: list[str]
    whole_bucket: bool = True   # the table's one bucket is rewritten here; else its touched buckets change
                                # in place, also here (`local_delta`)


def local_events(staged: StagedLog, source: str, table: str, state: TableState | None, after: str | None,
                 upto: str, limit: int, bucket_rows: int, bucket_bytes: int = 0) -> LocalEvents | None:
    """The events of a merge that may run here (see the module doc), read with pyarrow; None: Spark."""
    if limit <= 0:
        return None
    bucket = state.buckets[0] if state is not None else Bucket(0, None)   # a first merge: an empty bucket
    # (A bucket with position deletes: only the in-place merge applies them.)
    whole = state is None or (len(state.buckets) == 1 and not bucket.deletes and
                              (bucket.rows + bucket.tombstone_rows <= limit or stored_bytes(bucket) <= bucket_bytes))
    if not whole and BucketBounds.of(state) is None:
        return None
    segments = staged.segments(source, table, high=upto, after=after)
    # (Events are read only to be merged here: a bulk load's are not read to be turned down.)
    if not segments or ((state is None or not whole) and _rows(staged, segments) > 2 * limit):
        return None
    try:
        parts = [staged.read_segment(p) for p in segments]
    except FileNotFoundError:   # compacted since listed: the Spark path lists and reads again
        return None
    if not all(p.schema.equals(parts[0].schema) for p in parts):
        return None   # the columns changed between segments: Spark merges the schemas (`read_files`)
    events = pa.concat_tables(parts)
    keep = pc.less_equal(events[POSITION], upto)
    if after is not None:
        keep = pc.and_(keep, pc.greater(events[POSITION], after))
    events = events.filter(keep)
    if not events.num_rows or events.num_rows > limit or \
            (whole and bucket.rows + bucket.tombstone_rows + 2 * events.num_rows > 2 * bucket_rows):
        return None
    key = key_columns(parts[0].schema)
    if not key or (state is not None and key != state.key) or _fills(events):
        return None
    if any(pa.types.is_floating(events.schema.field(k).type) for k in key):
        return None   # -0.0 and 0.0, NaN: Arrow's key matching and Python's differ; Spark's rule decides
    if not _same_columns(state, events):
        return None
    events = _dedupe(events)
    times = events[COMMIT_TS] if COMMIT_TS in events.column_names else None
    newest = pc.max(times).as_py() if times is not None else None
    oldest = pc.min(times).as_py() if times is not None else None
    return LocalEvents(events, segments, newest.timestamp() if newest else None,
                       oldest.timestamp() if oldest else None, key, whole)


def _rows(staged: StagedLog, segments: list[str]) -> int | float:
    """The segments' rows from their footers (inf when one is gone: compacted since listed)."""
    try:
        return sum(staged.segment_file(p).metadata.num_rows for p in segments)
    except FileNotFoundError:
        return float("inf")


def _same_columns(state: TableState | None, events: pa.Table) -> bool:
    """Whether the events have the table's columns and types (a first merge: its own)."""
    if state is None:
        return True
    if {c for c in events.column_names if not c.startswith("_")} != {c for c, _ in state.columns}:
        return False   # a column added or dropped: the Spark path evolves the table
    stored = schema_to_pyarrow(T.schema(state.columns))
    # A changed type: the Spark path widens the column or refuses the change.
    return all(_same(events.schema.field(c).type, stored.field(c).type) for c, _ in state.columns)


def stored_bytes(bucket: Bucket) -> int:
    """The size of the bucket's stored files, live rows and tombstones (Parquet, as written)."""
    return sum(f.file_size_in_bytes for f in [*bucket.files, *bucket.tombstones])


def _fills(events: pa.Table) -> bool:
    """Whether a non-delete event leaves values out (the fill rule's work)."""
    if UNCHANGED not in events.column_names:
        return False
    sizes = pc.fill_null(pc.list_value_length(events[UNCHANGED]), 0)
    live = pc.not_equal(events[OP], Op.DELETE)
    return bool(pc.any(pc.and_(live, pc.greater(sizes, 0))).as_py())


def _dedupe(events: pa.Table) -> pa.Table:
    """Position order, each position once (a crash re-stages events with their positions)."""
    events = events.sort_by(POSITION)
    positions = events[POSITION].to_pylist()
    keep = [i for i, p in enumerate(positions) if i == 0 or p != positions[i - 1]]
    return events.take(keep) if len(keep) != len(positions) else events


_LARGE = {(pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())}   # the Iceberg schema's Arrow types


def _same(staged: pa.DataType, stored: pa.DataType) -> bool:
    """Whether a staged column holds the stored column's type (Arrow's string or its large form)."""
    return staged == stored or (staged, stored) in _LARGE


def _stored_as(file: pa.DataType, table: pa.DataType) -> bool:
    """Whether a data file's column holds the table column's values as they are (an adopted
    chunk's SMALLINT column is int16 under an int one: `warehouse.adoption`)."""
    return _same(file, table) or (table == pa.int32() and file in (pa.int8(), pa.int16()))


def rewrite_locally(base: TableState, pending: Pending, local: LocalEvents, upto: str, purge: bool) -> Rewritten | None:
    """The merge of `local` into the table's one bucket, written; None when the stored types or
    files ask for the Spark path after all (nothing is written then). Only the stored rows at the
    events' keys leave Arrow: the others are written back as read."""
    target = target_schema(base, pending, local)
    if target is None:
        return None
    bucket = base.buckets[0]
    stored = _stored(bucket, target)
    if stored is None:
        return None
    key = base.key
    # (record, priority: a stored row, 0, wins a tie)
    offers = [(r, 1) for r in records(local.events, [c for c, _ in base.columns], key, dt.datetime.now(dt.UTC))]
    touched = {tuple(r[c] for c in key) for r, _ in offers}
    at = [_at_keys(part, key, touched) for part in stored]
    best: dict[tuple, tuple[str, int, dict]] = {}   # key -> (position, priority, row)
    for row, priority in [(r, 0) for part, hit in zip(stored, at) for r in part.filter(hit).to_pylist()] + offers:
        k = tuple(row[c] for c in key)
        current = best.get(k)
        if current is None or (row[_POSITION], -priority) > (current[0], -current[1]):
            best[k] = (row[_POSITION], priority, row)
    live, dead = (part.filter(pc.invert(hit)) for part, hit in zip(stored, at))
    if purge:
        dead = dead.filter(pc.greater(dead[_POSITION], upto))
    return _write(base, pending, target, (live, dead), [r for _, _, r in best.values()], upto,
                  purge and not pending.keep_new_tombstones, len(offers))


def target_schema(base: TableState, pending: Pending, local: LocalEvents) -> pa.Schema | None:
    """The table's Arrow schema, when the events' columns are stored as they are (None: Spark)."""
    target = pa.ipc.read_schema(pa.py_buffer(pending.schema_ipc))
    events = local.events
    if any(c not in target.names or not _same(events.schema.field(c).type, target.field(c).type)
           for c, _ in base.columns):
        return None
    return target


def records(events: pa.Table, data: list[str], key: list[str], merged_at: dt.datetime) -> list[dict]:
    """The events as the warehouse rows they offer, in position order: a key update first offers
    a tombstone at its old key (`merge_inputs.log_records`)."""
    out = []
    for e in events.select([*data, POSITION, OP, *[c for c in (UNCHANGED, OLD_KEY, BEFORE) if c in events.column_names]]) \
            .to_pylist():
        if e.get(OLD_KEY) is not None:
            was = e.get(BEFORE) or {}
            old = {c: (e[OLD_KEY][c] if c in key else was.get(c)) for c in data}
            out.append(_record(old, e[POSITION], Op.DELETE, None, merged_at))
        dead = e[OP] in TOMBSTONES
        out.append(_record({c: e[c] for c in data}, e[POSITION], e[OP], None if dead else e.get(UNCHANGED), merged_at))
    return out


def _record(values: dict, position: str, op: str, missing, merged_at: dt.datetime) -> dict:
    return {**values, _POSITION: position, _OP: op, _ORIGIN: "log", _DUMP: None, _MERGED_AT: merged_at,
            MISSING: missing}


def _at_keys(table: pa.Table, key: list[str], keys: set[tuple]) -> pa.Array:
    """Which of the table's rows hold one of `keys`."""
    mask = None
    for i, c in enumerate(key):
        found = pc.is_in(table[c], value_set=pa.array({k[i] for k in keys}, table.schema.field(c).type))
        mask = found if mask is None else pc.and_(mask, found)
    assert mask is not None
    if len(key) > 1:   # each column's values matched: a superset of the rows holding a whole key
        candidates = pc.indices_nonzero(mask)
        rows = table.select(key).take(candidates).to_pylist()
        exact = {i for i, r in zip(candidates.to_pylist(), rows) if tuple(r[c] for c in key) in keys}
        hit = np.zeros(table.num_rows, dtype=bool)   # (a bucket may hold hundreds of thousands of rows)
        hit[list(exact)] = True
        mask = pa.array(hit)
    return pc.fill_null(mask, False)


def _stored(bucket: Bucket, target: pa.Schema) -> tuple[pa.Table, pa.Table] | None:
    """The bucket's stored live rows and tombstones, of the table's Arrow schema; None: see `stored_rows`."""
    live, dead = stored_rows(bucket.files, target), stored_rows(bucket.tombstones, target)
    return None if live is None or dead is None else (live, dead)


def stored_rows(files: list, target: pa.Schema) -> pa.Table | None:
    """The rows of data files, of the table's Arrow schema; None when a file's columns are not the
    table's (an older schema: the Spark path reads it as the table's). A file's columns the table
    does not have (an adopted chunk's staged ones) are left out."""
    parts = []
    ids = [field_id(f) for f in target]
    for f in files:
        fs, path = filesystem(f.file_path)
        stored = pq.read_table(path, filesystem=fs)
        by_id = {field_id(c): c.name for c in stored.schema}
        # (By field id: a column replaced since has another.)
        if [by_id.get(i) for i in ids] != target.names or any(
                not _stored_as(stored.schema.field(c).type, target.field(c).type) for c in target.names):
            return None
        parts.append(stored.select(target.names).cast(target))
    return pa.concat_tables(parts or [target.empty_table()])


def _write(base: TableState, pending: Pending, target: pa.Schema, kept: tuple[pa.Table, pa.Table], rows: list[dict],
           upto: str, purge: bool, records: int) -> Rewritten:
    """Write the bucket: the stored rows `kept` as they were (live, tombstones) and the winners
    `rows` at the events' keys."""
    bucket = base.buckets[0]
    files = DataFiles(pending.location, target, uuid.uuid4().hex[:12])
    for r in rows:
        r[BUCKET] = bucket.id
    live = [r for r in rows if r[_OP] not in TOMBSTONES]
    dead = [r for r in rows if r[_OP] in TOMBSTONES and not (purge and r[_POSITION] <= upto)]
    for is_dead, stored, part in ((False, kept[0], live), (True, kept[1], dead)):
        whole = pa.concat_tables([stored, pa.Table.from_pylist(part, schema=target)])
        if whole.num_rows:
            files.write(bucket.id, is_dead, whole)
    written = files.written()
    out = Rewritten(base.buckets, touched={bucket.id}, log_events=records)
    out.files = [WrittenFile(**r) for r in written.to_pylist()] if written is not None else []
    alive = [f for f in out.files if not f.tombstone]
    gone = [f for f in out.files if f.tombstone]
    if out.files:
        out.buckets = [Bucket(bucket.id, None, sum(f.rows for f in alive), sum(f.rows for f in gone),
                              sum(f.missing for f in alive))]
        out.written = 1
    else:
        out.buckets = [Bucket(bucket.id, None)]
    return out
