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
5. per touched bucket: its delta file (named `delta-…`, the live rows the driver's in-place
   merges wrote) rewritten with the new live records in place of those they replace, its
   tombstone files rewritten (the kept tombstones, purged as the Spark path purges them, and the
   new ones), and its one position delete file rewritten with what its delete files named (less
   the old delta file's rows) and the rows replaced now; committed as the Spark path's, the old
   delta and delete files removed in the same commit.

So a bucket changed by merge after merge (a continuous merge of a busy table) keeps one delta file
and one delete file, however many merges changed it, until the rows deleted in place or its delta
file pass a `DBLOG_MERGE_DELTA_RATIO`-th of its rows and its next merge rewrites it
(`delta.qualifies`); the Spark path adds a file of each per merge, and rewrote every bucket after
`delta.MAX_DELETES`. (A delta or tombstone file of an older schema sends the bucket's merges to
Spark until it is rewritten; events read for a merge that then takes Spark are read again there.)

Anything else returns None and takes Spark. `tests/spark/test_delta_merge.py` holds this, the
Spark delta merge and a rewrite to the same rows on every reader.
"""
from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..model.staged_format import TOMBSTONES
from ..spark.data_sources import field_ids
from ..warehouse import deletes
from ..warehouse.columns import BUCKET, META, MISSING
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import DataFiles, missing_count
from ..warehouse.merged_state import Bucket, TableState
from . import bucket_merge as M
from . import delta
from .bucket_bounds import BucketBounds
from .delta import DELTA, is_delta
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
        r[BUCKET] = b = bounds.bucket(k)   # (the index here; `_write` sets the bucket's id)
        incoming[b] = incoming.get(b, 0) + 1
    estimate = {b: base.buckets[b].rows + base.buckets[b].tombstone_rows + n for b, n in incoming.items()}
    if not delta.qualifies(base, incoming, ratio, M.oversized(estimate, bucket_rows), bucket_rows):
        return None
    oldest = min(r[POSITION] for r in latest.values())
    keys = pa.Table.from_pylist([dict(zip(key, k)) for k in latest],
                                schema=pa.schema([local.events.schema.field(c) for c in key]))
    ids = field_ids(pending.schema_ipc)
    # A touched bucket's delta file is rewritten below, so only its other files are searched here.
    searched = replace(base, buckets=[replace(bk, files=[f for f in bk.files if not is_delta(f.file_path)])
                                      if b in incoming else bk for b, bk in enumerate(base.buckets)])
    plan = delta.plan(searched, sorted(incoming), keys, {c: ids[c] for c in key}, newer_than=(ids[POSITION], oldest))
    if plan.newest_replaced is not None and plan.newest_replaced >= oldest:
        return None
    kept: dict[int, _Kept] = {}
    for b in plan.touched:
        found = _kept(base.buckets[b], plan.gone[b], target, key, keys, oldest, upto if purge else None)
        if found is None:
            return None
        kept[b] = found
    return _write(base, pending, target, plan, latest, kept, upto,
                  purge and not pending.keep_new_tombstones, len(offered))


@dataclass
class _Kept:
    """What a touched bucket keeps of its delta file and tombstones, and what its files become."""
    delta: pa.Table           # the delta file's live rows no record replaces
    delta_live: int           # ... its live rows before (and how many of them list unproven values)
    delta_missing: int
    dead: pa.Table            # the tombstones no record replaces (purged as the Spark path purges)
    dropped: list             # the files the commit removes: the delta file, the delete files
    deleted: dict[str, np.ndarray]   # what the delete files named, less the delta file's rows


def _kept(bucket: Bucket, gone: dict[str, np.ndarray], target: pa.Schema, key: list[str], keys: pa.Table,
          oldest: str, purge_upto: str | None) -> _Kept | None:
    """None when a stored row or tombstone at a record's key is as new as the oldest record (the
    Spark path weighs it), or a file's columns are not the table's."""
    deltas = [f for f in bucket.files if is_delta(f.file_path)]
    parts = []
    for f in deltas:
        rows = stored_rows([f], target)
        if rows is None:
            return None
        live = deletes.kept(rows.num_rows, gone.get(f.file_path))
        parts.append(rows if live is None else rows.filter(live))
    out = []
    for rows in (pa.concat_tables(parts or [target.empty_table()]), stored_rows(bucket.tombstones, target)):
        if rows is None:
            return None
        at = _at(rows, key, keys)
        if len(at) and pc.max(rows[POSITION].take(at)).as_py() >= oldest:
            return None
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[at.to_numpy()] = False   # (replaced by this merge's records)
        out.append((rows, rows.filter(pa.array(keep))))
    (before, delta_rows), (_, dead) = out
    if purge_upto is not None:
        dead = dead.filter(pc.greater(dead[POSITION], purge_upto))
    uris = {f.file_path for f in deltas}
    return _Kept(delta_rows, before.num_rows, missing_count(before[MISSING]), dead, [*deltas, *bucket.deletes],
                 {uri: p for uri, p in gone.items() if uri not in uris})


def _at(table: pa.Table, key: list[str], keys: pa.Table) -> pa.Array:
    """Indices of the table's rows at one of `keys` (of the records' key types)."""
    if not table.num_rows:
        return pa.array([], pa.int64())
    found = table.select(key).cast(keys.schema)
    found = found.append_column("_i", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return found.join(keys, keys=key, join_type="left semi")["_i"].combine_chunks()


def _write(base: TableState, pending: Pending, target: pa.Schema, plan: delta.Delta, latest: dict[tuple, dict],
           kept: dict[int, _Kept], upto: str, purge: bool, events: int) -> Rewritten:
    """Per touched bucket: its delta file with the live records, its tombstones anew, one delete file."""
    files = DataFiles(pending.location, target, f"{DELTA}{uuid.uuid4().hex[:12]}")
    new: dict[tuple[int, bool], list[dict]] = {}   # (bucket index, tombstone) -> records
    for r in latest.values():
        b = r[BUCKET]
        r[BUCKET] = base.buckets[b].id
        gone = r[OP] in TOMBSTONES
        if not (gone and purge and r[POSITION] <= upto):
            new.setdefault((b, gone), []).append(r)
    for b in plan.touched:
        for gone, stored in ((False, kept[b].delta), (True, kept[b].dead)):
            part = pa.concat_tables([stored, pa.Table.from_pylist(new.get((b, gone), []), schema=target)])
            if part.num_rows:
                files.write(base.buckets[b].id, gone, part)
    written = files.written()
    out = Rewritten(base.buckets, touched={base.buckets[b].id for b in plan.touched}, log_events=events,
                    without_spark=True)
    out.files = [WrittenFile(**r) for r in written.to_pylist()] if written is not None else []
    spec_id = pending.tx.table_metadata.default_spec_id  # type: ignore[attr-defined]
    with ThreadPoolExecutor(8) as pool:   # (a PUT each on an object store)
        out.deletes = dict(zip([base.buckets[b].id for b in plan.touched], pool.map(
            lambda b: _delete_file(pending.location, spec_id, base.buckets[b].id, kept[b].deleted,
                                   plan.replaced.get(b, {})), plan.touched)))
    out.dropped = [f for b in plan.touched for f in kept[b].dropped]
    dropped = {b: (k.delta_live, k.delta_missing) for b, k in kept.items()}
    out.buckets, out.written = delta.buckets_after(base, plan, out.files, dropped), len(plan.touched)
    return out


def _delete_file(location: str, spec_id: int, bucket: int, before: dict[str, np.ndarray],
                 now: dict[str, np.ndarray]):
    """The bucket's one delete file: what its delete files named and what this merge replaces."""
    every = {uri: np.concatenate([before.get(uri, np.empty(0, np.int64)), now.get(uri, np.empty(0, np.int64))])
             for uri in {*before, *now}}
    every = {uri: p for uri, p in every.items() if len(p)}
    return deletes.write(location, spec_id, bucket, every) if every else None
