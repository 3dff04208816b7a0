"""An in-place merge (`delta`) on the driver: a few log events into big buckets, without Spark.

Through Spark, 1,000 changed keys into a 10M-row table cost some 3-4 s whatever they hold: a
dozen jobs to count, plan, read the replaced rows, merge and write a few thousand rows. When the
events qualify for `small_merge` (log events only, each carrying every value, the table's columns
and types) but the table is more than one small bucket, they are merged here instead:

1. the events become records as `small_merge` makes them, the highest position per key winning;
2. each record's bucket comes from the bucket bounds (`bucket_bounds`), and `delta.qualifies`
   decides as it does for Spark;
3. `delta.plan` finds the stored rows of the keys (their key columns read, on the driver there
   too); the touched buckets' tombstones are read whole (few rows);
4. a record replaces its key's stored row or tombstone. Records carry every value, so a stored
   row is never read whole: only its position matters, and it is read only where a file's footer
   does not show every position older than the records'. A stored row or tombstone as new as a
   record (an adopted first load's rows, whose events merge in a second pass) sends the merge to
   Spark, whose merge rule weighs it;
5. per touched bucket: a data file of the live records, its tombstone files rewritten (the kept
   tombstones, purged as the Spark path purges them, and the new ones), and a position delete
   file of the replaced rows; committed as the Spark path's.

Anything else returns None and takes Spark. `tests/spark/test_delta_merge.py` holds this, the
Spark delta merge and a rewrite to the same rows on every reader.
"""
from __future__ import annotations

import datetime as dt
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..model.staged_format import TOMBSTONES
from ..spark.data_sources import field_ids
from ..warehouse.columns import BUCKET, META
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import DataFiles
from ..warehouse.merged_state import TableState
from . import bucket_merge as M
from . import delta
from .bucket_bounds import BucketBounds
from .rewrite import Rewritten
from .small_merge import LocalEvents, records, stored_rows, target_schema

POSITION, OP = META[0], META[1]   # a warehouse row's


def delta_locally(base: TableState, pending: Pending, local: LocalEvents, upto: str, purge: bool, ratio: int,
                  bucket_rows: int) -> Rewritten | None:
    """The events of `local` merged into the buckets they touch, in place; None: the Spark path
    (nothing is written then)."""
    target, bounds = target_schema(base, pending, local), BucketBounds.of(base)
    if target is None or bounds is None:
        return None
    key = base.key
    offered = records(local.events, [c for c, _ in base.columns], key, dt.datetime.now(dt.UTC))
    latest: dict[tuple, dict] = {}   # key -> its record of the highest position (records come in position order)
    incoming: dict[int, int] = {}
    for r in offered:
        k = tuple(r[c] for c in key)
        latest[k] = r
        b = bounds.bucket(k)
        incoming[b] = incoming.get(b, 0) + 1
    estimate = {b: base.buckets[b].rows + base.buckets[b].tombstone_rows + n for b, n in incoming.items()}
    if not delta.qualifies(base, incoming, ratio, M.oversized(estimate, bucket_rows), bucket_rows):
        return None
    oldest = min(r[POSITION] for r in latest.values())
    keys = pa.Table.from_pylist([dict(zip(key, k)) for k in latest],
                                schema=pa.schema([local.events.schema.field(c) for c in key]))
    ids = field_ids(pending.schema_ipc)
    plan = delta.plan(base, sorted(incoming), keys, {c: ids[c] for c in key}, newer_than=(ids[POSITION], oldest))
    if plan.newest_replaced is not None and plan.newest_replaced >= oldest:
        return None
    dead = {}
    for b in plan.touched:
        stored = stored_rows(base.buckets[b].tombstones, target)
        if stored is None:
            return None
        at = _at(stored, key, keys)
        if len(at) and pc.max(stored[POSITION].take(at)).as_py() >= oldest:
            return None
        keep = np.ones(stored.num_rows, dtype=bool)
        keep[at.to_numpy()] = False   # (replaced by this merge's records)
        kept = stored.filter(pa.array(keep))
        dead[b] = kept.filter(pc.greater(kept[POSITION], upto)) if purge else kept
    return _write(base, pending, target, plan, bounds, latest, dead, upto,
                  purge and not pending.keep_new_tombstones, len(offered))


def _at(table: pa.Table, key: list[str], keys: pa.Table) -> pa.Array:
    """Indices of the table's rows at one of `keys` (of the records' key types)."""
    if not table.num_rows:
        return pa.array([], pa.int64())
    found = table.select(key).cast(keys.schema)
    found = found.append_column("_i", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return found.join(keys, keys=key, join_type="left semi")["_i"].combine_chunks()


def _write(base: TableState, pending: Pending, target: pa.Schema, plan: delta.Delta, bounds: BucketBounds,
           latest: dict[tuple, dict], dead: dict[int, pa.Table], upto: str, purge: bool, events: int) -> Rewritten:
    """Per touched bucket: its live records as a new data file, its tombstones anew, its delete file."""
    files = DataFiles(pending.location, target, uuid.uuid4().hex[:12])
    new: dict[tuple[int, bool], list[dict]] = {}   # (bucket index, tombstone) -> records
    for k, r in latest.items():
        b = bounds.bucket(k)
        r[BUCKET] = base.buckets[b].id
        gone = r[OP] in TOMBSTONES
        if not (gone and purge and r[POSITION] <= upto):
            new.setdefault((b, gone), []).append(r)
    for b in plan.touched:
        for gone in (False, True):
            part = pa.Table.from_pylist(new.get((b, gone), []), schema=target)
            if gone:
                part = pa.concat_tables([dead[b], part])
            if part.num_rows:
                files.write(base.buckets[b].id, gone, part)
    written = files.written()
    out = Rewritten(base.buckets, touched={base.buckets[b].id for b in plan.touched}, log_events=events,
                    without_spark=True)
    out.files = [WrittenFile(**r) for r in written.to_pylist()] if written is not None else []
    metadata = pending.tx.table_metadata  # type: ignore[attr-defined]
    out.deletes = delta.delete_files(pending.location, metadata.default_spec_id, base, plan)
    out.buckets, out.written = delta.buckets_after(base, plan, out.files), len(plan.touched)
    return out
