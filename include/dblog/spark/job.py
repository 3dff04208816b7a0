"""Merge one source table's staged change log and dump chunks into its warehouse table.

Under the table's ZooKeeper merge lock (merges of one table are serialized, other tables merge
in parallel), up to the capture's checkpoint position P (every event <= P is staged):

1. chunks not merged yet that are ready (`dblog.rules.chunk_ready`: both watermarks staged, the
   high one <= P, invariant 7) are reconciled against the staged log
   (`spark.rules.window_survivors`: Algorithm 1 steps 5-7);
2. log events after the last merge (<= P) and the survivors become records (`records.merge_input`;
   rows dropped in a window only fill values: `records.fill_records`);
3. the key-range buckets those records fall in are read back and merged with them
   (`merge.merge_records`: per key the highest position wins);
4. the touched buckets are written anew (split when they grew too big) and a new version is
   published (`warehouse.layout`), with what was merged recorded in its manifest.

Tombstones are dropped once no dump of the table can still stage a chunk older than them.
After the commit, each dump whose chunks were merged gets its running totals for the table
(chunks merged, their rows, rows dropped in windows) at `state.dump_merged_path`, written under
the table's merge lock (fenced), so a dump run can report its own chunks whichever merge took them.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
import re
import uuid
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import state as paths
from ..dump import dumping
from ..reconcile import watermark_positions
from ..settings import settings
from ..sources.base import WATERMARK_TABLE
from ..staged import DUMP_ID, POSITION, ChunkFile, data_columns, key_columns
from ..staging import StagedLog
from ..state import StateStore
from ..warehouse.layout import TOMBSTONES, Bucket, Manifest, Warehouse, missing_keys, missing_rows
from . import merge as M
from .. import repair
from ..events import RepairNeed
from .records import chunk_windows, merge_input, with_windows
from .rules import WINDOW

log = logging.getLogger("dblog.merge")


class MergeError(RuntimeError):
    """A merge cannot proceed; the message names the problem and the fix."""


@dataclass
class MergeResult:
    source: str
    table: str
    version: int | None = None
    upto: str | None = None
    log_events: int = 0
    chunks: int = 0
    chunk_rows: int = 0
    survivors: int = 0
    buckets_written: int = 0
    buckets: int = 0
    rows: int = 0
    tombstones: int = 0
    seconds: float = 0.0
    note: str = ""
    dumps: dict[str, dict[str, int]] = field(default_factory=dict)  # dump id -> chunks, rows, dropped merged now
    newest_commit_ts: float | None = None   # unix time of the newest log event merged now (freshness)
    missing_rows: int = 0                   # warehouse rows with a value nothing proved yet (see rules.latest)
    repairs_requested: int = 0              # keys this merge asked to re-read (values it could not prove)
    waiting: dict | None = None             # repairs of this table not landed yet (repair.waiting)

    @property
    def dropped(self) -> int:
        """Chunk rows dropped in their watermark window (a newer change came through the log)."""
        return self.chunk_rows - self.survivors


@dataclass
class MergeInputs:
    records: DataFrame | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    ready: dict[str, set[int]] = field(default_factory=dict)   # dump id -> chunk numbers merged now
    fill_unchanged: bool = False


def _read(spark: SparkSession, staged: StagedLog, files: list[str]) -> DataFrame:
    uris = files if staged.local else [f"{staged.root.split('://', 1)[0]}://{p}" for p in files]
    return spark.read.option("mergeSchema", "true").parquet(*uris)


def _data_columns(df: DataFrame) -> list[tuple[str, str]]:
    names = set(data_columns(df.columns))
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields if f.name in names]


def _widens(old: str, new: str) -> bool:
    return old == new or (old, new) in {("tinyint", "smallint"), ("tinyint", "int"), ("smallint", "int"),
                                        ("tinyint", "bigint"), ("smallint", "bigint"), ("int", "bigint"),
                                        ("float", "double")}


def _columns(manifest: Manifest | None, found: list[tuple[str, str]], table: str) -> list[tuple[str, str]]:
    """Warehouse columns: the existing ones (a dropped source column stays, null from then on),
    then columns new in the source. A type the warehouse cannot widen to is an error."""
    columns: list[tuple[str, str]] = [(c[0], c[1]) for c in manifest.columns] if manifest else []
    known = dict(columns)
    for name, spark_type in found:
        if name not in known:
            columns.append((name, spark_type))
            known[name] = spark_type
        elif not _widens(known[name], spark_type) and not _widens(spark_type, known[name]):
            raise MergeError(f"{table}.{name} changed type from {known[name]} to {spark_type} in the source; "
                             f"the warehouse cannot widen it. Remove the warehouse table's directory and run "
                             f"a full dump of {table} to rebuild it with the new type")
        elif not _widens(spark_type, known[name]):
            columns[[c for c, _ in columns].index(name)] = (name, spark_type)
            known[name] = spark_type
    return columns


def _pending_chunks(staged: StagedLog, source: str, table: str, manifest: Manifest | None) -> dict[ChunkFile, str]:
    pending = {}
    for path in staged.chunk_files(source, table):
        name = ChunkFile.parse(path)
        if manifest is None or not manifest.chunk_merged(name.dump_id, name.number):
            pending[name] = path
    return pending


def _ready_chunks(spark: SparkSession, staged: StagedLog, source: str, pending: dict[ChunkFile, str],
                  upto: str, out: MergeInputs, result: MergeResult) -> tuple[DataFrame | None, str | None]:
    """The rows of pending chunks that are ready by `upto`, with their windows, and the lowest LW."""
    chunks = _read(spark, staged, list(pending.values()))
    windows = chunk_windows(chunks, watermark_positions(staged, source))
    ready = [w for w in windows if w.ready(upto) and ChunkFile(w.dump_id, w.chunk) in pending]
    for w in ready:
        out.ready.setdefault(w.dump_id, set()).add(w.chunk)
        result.chunk_rows += w.rows
        _dump_totals(result, w.dump_id)["rows"] += w.rows
    seen = {ChunkFile(w.dump_id, w.chunk) for w in windows}
    for name, path in pending.items():  # a chunk without rows has nothing to wait for
        if name not in seen and pq.read_metadata(path, filesystem=staged.fs).num_rows == 0:
            out.ready.setdefault(name.dump_id, set()).add(name.number)
    result.chunks = sum(len(v) for v in out.ready.values())
    for dump_id, numbers in out.ready.items():
        _dump_totals(result, dump_id)["chunks"] = len(numbers)
    lows = [w.low for w in ready if w.low is not None]  # every ready window has both positions
    if not lows:
        return None, None
    return with_windows(chunks, ready), min(lows)


def _dump_totals(result: MergeResult, dump_id: str) -> dict[str, int]:
    return result.dumps.setdefault(dump_id, {"chunks": 0, "rows": 0, "dropped": 0})


def merge_inputs(spark: SparkSession, staged: StagedLog, source: str, table: str, manifest: Manifest | None,
                 upto: str, result: MergeResult) -> MergeInputs:
    """The records to merge: log events after the last merge and reconciled chunk rows, <= upto."""
    out = MergeInputs()
    done_upto = manifest.log_upto if manifest else None
    pending = _pending_chunks(staged, source, table, manifest)
    chunks = None
    low = done_upto  # None: nothing merged yet, every staged event is new
    if pending:
        chunks, chunk_low = _ready_chunks(spark, staged, source, pending, upto, out, result)
        if chunk_low is not None and low is not None:
            low = min(low, chunk_low)  # the windows may reach back before the last merge
    # Without chunk windows to cover, only segments with events after the last merge matter.
    segments = staged.segments(source, table, low, upto) if chunks is not None else \
        staged.segments(source, table, high=upto, after=done_upto)
    events = None
    if segments:
        events = _read(spark, staged, segments).where(F.col(POSITION) <= upto)
        if low is not None:
            events = events.where(F.col(POSITION) >= low)
        events = events.dropDuplicates([POSITION])  # re-staged after a crash
    if events is None and chunks is None:
        return out
    sample = segments[0] if segments else next(iter(pending.values()))
    out.key = key_columns(pq.read_schema(sample, filesystem=staged.fs))
    out.columns = _columns(manifest, (_data_columns(events) if events is not None else []) +
                           (_data_columns(chunks) if chunks is not None else []), table)
    composed = merge_input(None if events is None else M.align(events, out.columns),
                           None if chunks is None else M.align(chunks, out.columns),
                           out.key, [c for c, _ in out.columns], after=done_upto)
    out.records, out.fill_unchanged = composed.records, composed.fill_unchanged
    if composed.newest_commit_ts is not None:
        result.newest_commit_ts = composed.newest_commit_ts
    return out


def merge_table(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, source: str,
                table: str, *, bucket_rows: int | None = None, lock_timeout: float | None = None) -> MergeResult:
    """Merge what the capture and the dumps staged for `table`, up to the capture's checkpoint
    (`bucket_rows`, `lock_timeout`: default the settings')."""
    tuned = settings().merge
    bucket_rows = tuned.bucket_rows if bucket_rows is None else bucket_rows
    lock_timeout = tuned.lock_timeout_seconds if lock_timeout is None else lock_timeout
    if bucket_rows < 1:
        raise MergeError(f"bucket rows must be >= 1, got {bucket_rows}")
    started = time.monotonic()
    result = MergeResult(source, table)
    try:
        lease = store.lease(paths.merge_lock(source, table), f"{socket.gethostname()}:{os.getpid()}", lock_timeout)
    except paths.LeaseTimeout as exc:
        raise MergeError(f"another merge of {source}/{table} holds its lock for more than {lock_timeout:.0f}s; "
                         "wait for it, or check `dblog status` for a stuck worker") from exc
    try:
        warehouse.clean(source, table)
        _merge(spark, store, staged, warehouse, result, bucket_rows, lease)
        _ask_repairs(store, warehouse, result)
    finally:
        lease.release()
    result.seconds = time.monotonic() - started
    log.debug("%s/%s: %s", source, table, result)  # callers print their own summary
    return result


def _merge(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, result: MergeResult,
           bucket_rows: int, lease) -> None:
    source, table = result.source, result.table
    purge = not dumping(store, source, table)   # decided before chunks are listed: see module doc
    upto = paths.checkpoint_position(store, source)
    manifest = warehouse.manifest(source, table)
    if manifest is not None:
        result.version, result.buckets, result.rows = manifest.version, len(manifest.buckets), manifest.rows
        result.tombstones = sum(b.tombstone_rows for b in manifest.buckets)
        if manifest.log_upto is not None and (upto is None or upto < manifest.log_upto):
            upto = manifest.log_upto
    if upto is None:
        result.note = "nothing staged yet: start the capture first"
        return
    result.upto = upto
    inputs = merge_inputs(spark, staged, source, table, manifest, upto, result)
    if inputs.records is None and not inputs.ready:
        result.note = "up to date"
        return
    if manifest is not None and inputs.key and manifest.key != inputs.key:
        raise MergeError(f"the primary key of {table} changed from {manifest.key} to {inputs.key}; remove the "
                         f"warehouse table's directory and run a full dump of {table} to rebuild it")
    key = inputs.key or (manifest.key if manifest else [])
    columns = inputs.columns or ([(c[0], c[1]) for c in manifest.columns] if manifest else [])
    base = manifest or Manifest(source, table, key, [list(c) for c in columns], [Bucket(None)])
    version_dir = warehouse.version_path(source, table)
    new_files: dict[str, str] = {}
    buckets = base.buckets
    if inputs.records is not None:
        buckets, new_files = _rewrite(spark, warehouse, base, inputs.records, key, columns, upto, purge,
                                      bucket_rows, inputs.fill_unchanged, version_dir, result)
    if manifest is None and not any(b.files for b in buckets):
        result.note = "nothing to merge yet"
        return
    new = Manifest(source, table, key, [list(c) for c in columns], buckets,
                   log_upto=max(upto, manifest.log_upto or "") if manifest else upto,
                   chunks=dict(base.chunks), version=base.version)
    for dump_id, numbers in inputs.ready.items():
        new.add_chunks(dump_id, numbers)
    warehouse.commit(new, new_files, version_dir)
    _record_dumps(store, lease, result)
    warehouse.clean(source, table)  # the scratch output, versions past their keep time
    result.version, result.buckets, result.rows = new.version, len(new.buckets), new.rows
    result.tombstones = sum(b.tombstone_rows for b in new.buckets)


def _ask_repairs(store: StateStore, warehouse: Warehouse, result: MergeResult) -> None:
    """Rows whose values nothing proved (rules.latest) get their keys re-read by a repair dump,
    unless a repair already covers them; the result reports what still waits."""
    manifest = warehouse.manifest(result.source, result.table)
    result.missing_rows = manifest.missing_rows if manifest else 0
    if manifest is not None and result.missing_rows:
        whole, covered = repair.covered(store, result.source, result.table)
        found: dict[tuple, list[str]] = {}
        if not whole:
            buckets = [i for i, b in enumerate(manifest.buckets) if b.missing_rows]
            for path in warehouse.files(result.source, result.table, manifest, buckets=buckets):
                found.update(missing_keys(path, manifest.key))
        keys = [k for k in found if repair.key_id(k) not in covered]
        if keys:
            columns = sorted({c for k in keys for c in found[k]})
            result.repairs_requested = len(keys)
            repair.request(store, result.source, [RepairNeed(
                result.table, f"values the log left out and nothing older proves ({', '.join(columns)})",
                result.upto, tuple(keys))])
    result.waiting = repair.waiting(store, result.source).get(result.table)


def _record_dumps(store: StateStore, lease, result: MergeResult) -> None:
    """Add what this merge took of each dump to the dump's totals for the table (after the commit:
    a crash in between under-counts, it never counts a chunk twice). Dumps no longer registered
    in ZooKeeper are left alone."""
    for dump_id, merged in result.dumps.items():
        if store.get(paths.dump_path(result.source, dump_id)) is None:
            continue
        path = paths.dump_merged_path(result.source, dump_id, result.table)
        totals = store.get(path) or {"chunks": 0, "rows": 0, "dropped": 0}
        store.fenced_put(lease, path, {k: int(totals.get(k, 0)) + merged[k] for k in ("chunks", "rows", "dropped")})


# Per (bucket, tombstone flag) the files a merge wrote: (stored name, rows, rows with missing values).
Written = dict[tuple[int, int], list[tuple[str, int, int]]]


def _rewrite(spark: SparkSession, warehouse: Warehouse, base: Manifest, recs: DataFrame, key: list[str],
             columns: list[tuple[str, str]], upto: str, purge: bool, bucket_rows: int, fill_unchanged: bool,
             version_dir: str | None, result: MergeResult) -> tuple[list[Bucket], dict[str, str]]:
    """Merge `recs` into the buckets they touch; returns the new bucket list and its new files."""
    types, names = dict(columns), [c for c, _ in columns]
    bounds = [b.lo for b in base.buckets]
    incoming = _count_incoming(recs, key, types, bounds, result)
    if [tuple(c) for c in base.columns] != list(columns) or version_dir is None:
        touched = set(range(len(bounds)))  # new columns: every file gets the same schema
    else:
        touched = set(incoming)
    old_files = warehouse.files(base.source, base.table, base, tombstones=True, buckets=sorted(touched)) \
        if version_dir else []
    existing = M.align(spark.read.option("mergeSchema", "true").parquet(*old_files), columns) if old_files else None
    # Sizes are estimated (an update counts twice), so a bucket may split a little early; never late.
    estimate = {b: base.buckets[b].rows + base.buckets[b].tombstone_rows + incoming.get(b, 0) for b in touched}
    oversized = M.oversized(estimate, bucket_rows)
    keys = recs.select(*key) if existing is None else existing.select(*key).unionByName(recs.select(*key))
    splits = _split_points(keys.withColumn("_b", M.bucket_of(key, types, bounds)), key, types, oversized, bucket_rows)
    entries = M.with_splits(bounds, splits)   # (lower bound, bucket it was) per bucket
    pieces = sum(1 for _, old in entries if old is None or old in touched)
    merged = M.merge_records(existing, recs, key, names, dt.datetime.now(dt.timezone.utc), fill_unchanged,
                             M.bucket_of(key, types, [lo for lo, _ in entries]), max(1, pieces))
    if purge:
        merged = merged.where(~(M.is_tombstone() & (F.col("_dblog_position") <= upto)))
    scratch = warehouse.scratch(base.source, base.table)
    merged.withColumn("_t", M.is_tombstone().cast("int")).write.partitionBy("_b", "_t").parquet(scratch)
    # Only a fill leaves values unproven (rules.latest), and stored rows keep theirs.
    written, new_files = _written_files(scratch, count_unproven=fill_unchanged or bool(base.missing_rows))
    buckets = _new_buckets(base, entries, touched, written, result)
    if not any(b.files for b in buckets):  # every row deleted: an empty file keeps the table readable
        empty = warehouse.scratch(base.source, base.table)
        merged.drop("_b").limit(0).coalesce(1).write.parquet(empty)
        name = next(f for f in os.listdir(empty) if f.endswith(".parquet") and not f.startswith((".", "_")))
        stored = f"b-{uuid.uuid4().hex}.parquet"
        new_files[stored] = os.path.join(empty, name)
        buckets[0].files.append(stored)
    buckets[0].lo = None  # the first bucket always starts below every key
    return buckets, new_files


def _count_incoming(recs: DataFrame, key: list[str], types: dict[str, str], bounds: list[list[str] | None],
                    result: MergeResult) -> dict[int, int]:
    """Records per current bucket. Counts the log events and chunk survivors into `result`, and
    per dump the chunk rows its windows dropped."""
    incoming: dict[int, int] = {}
    survivors: dict[str, int] = {}
    for r in recs.groupBy(M.bucket_of(key, types, bounds).alias("_b"), "_origin", DUMP_ID).count().collect():
        incoming[r["_b"]] = incoming.get(r["_b"], 0) + r["count"]
        if r["_origin"] == "dump":
            result.survivors += r["count"]
            survivors[r[DUMP_ID]] = survivors.get(r[DUMP_ID], 0) + r["count"]
        elif r["_origin"] != WINDOW:
            result.log_events += r["count"]
    for dump_id, totals in result.dumps.items():
        totals["dropped"] = totals["rows"] - survivors.get(dump_id, 0)
    return incoming


def _written_files(scratch: str, count_unproven: bool) -> tuple[Written, dict[str, str]]:
    """The parquet files Spark wrote under `scratch` (partitioned by bucket `_b` and tombstone `_t`),
    and their stored names mapped to their scratch paths. Tombstone files count no unproven rows."""
    written: Written = {}
    new_files: dict[str, str] = {}
    for dirpath, _, files in os.walk(scratch):
        found = re.search(r"_b=(\d+)/_t=(\d)$", dirpath)
        if found is None:
            continue
        b, t = int(found.group(1)), int(found.group(2))
        for name in files:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                stored = f"{'t' if t else 'b'}-{uuid.uuid4().hex}.parquet"
                path = os.path.join(dirpath, name)
                new_files[f"{TOMBSTONES}/{stored}" if t else stored] = path
                unproven = missing_rows(path) if count_unproven and not t else 0
                written.setdefault((b, t), []).append((stored, pq.read_metadata(path).num_rows, unproven))
    return written, new_files


def _new_buckets(base: Manifest, entries: list[tuple[list[str] | None, int | None]], touched: set[int],
                 written: Written, result: MergeResult) -> list[Bucket]:
    """The bucket list after the merge: untouched buckets as they were, rewritten ones from their
    new files (dropped when nothing is left in them); never empty."""
    buckets: list[Bucket] = []
    for j, (lo, old) in enumerate(entries):
        if old is not None and old not in touched:
            buckets.append(Bucket(**vars(base.buckets[old])))
            continue
        live, dead = written.get((j, 0), []), written.get((j, 1), [])
        bucket = Bucket(lo, [f for f, _, _ in live], [f for f, _, _ in dead], sum(n for _, n, _ in live),
                        sum(n for _, n, _ in dead), sum(m for _, _, m in live))
        if bucket.files or bucket.tombstones:
            buckets.append(bucket)
            result.buckets_written += 1
    return buckets or [Bucket(None)]


def _split_points(keys: DataFrame, key: list[str], types: dict[str, str], oversized: dict[int, int],
                  bucket_rows: int) -> dict[int, list[list[str]]]:
    """New lower bounds inside each oversized bucket, from a sorted sample of its keys (`keys`
    with their current bucket `_b`)."""
    if not oversized:
        return {}
    fractions = {b: M.sample_fraction(n, bucket_rows) for b, n in oversized.items()}
    strings = M.key_strings(key, types)
    rows = (keys.where(F.col("_b").isin(*oversized)).sampleBy("_b", fractions, seed=7)
            .select("_b", *key, *strings).orderBy("_b", *key).collect())
    samples: dict[int, list[list[str]]] = {}
    for r in rows:
        samples.setdefault(r["_b"], []).append([r[f"_s_{k}"] for k in key])
    return {b: M.split_points(samples.get(b, []), n, bucket_rows) for b, n in oversized.items()}


def staged_tables(staged: StagedLog, source: str) -> list[str]:
    """Every table with a staged log or staged chunks, the watermark table aside."""
    return sorted((set(staged.tables(source)) | set(staged.chunk_tables(source))) - {WATERMARK_TABLE})


def merge_source(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, source: str,
                 tables: list[str] | None = None, **options) -> list[MergeResult]:
    if not staged.local:
        # Spark reads the staged files itself, and this installation has no S3 connector for it.
        raise MergeError(f"the Spark merge reads the staged log from a path (local disk or a shared mount), "
                         f"not from {staged.root}: capture, dumps, export and verify work on an object store, "
                         "the merge does not yet. Set DBLOG_STAGING to a path to merge")
    return [merge_table(spark, store, staged, warehouse, source, t, **options)
            for t in (tables or staged_tables(staged, source))]
