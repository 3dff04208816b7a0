"""Rewrite the key-range buckets a merge's records touch, as new data files of the Iceberg table.

The records are counted per current bucket; buckets past twice `bucket_rows` are split at sampled
keys (the first piece keeps the bucket's id, each new piece gets a new one, so no other bucket
moves to another partition value); the touched buckets' rows are read back from their current
data files, merged with the records by the merge rule, and written by the executors
(`warehouse.files.bucket_writer`) under the table's location. Nothing is visible until the
driver commits the returned files.
"""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from ..model.staged_format import DUMP_ID
from ..settings import settings
from ..spark.data_sources import FIELD_ID, field_ids, read_files
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import TOMBSTONE, WRITTEN, bucket_writer
from ..warehouse.merged_state import Bucket, TableState
from ..warehouse.types import BUCKET, META, META_TYPES, MISSING
from . import bucket_merge as M
from . import delta
from .frame_rules import WINDOW


@dataclass
class Rewritten:
    buckets: list[Bucket]                       # the bucket list after the merge, in key order
    files: list[WrittenFile] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)   # ids of the buckets whose files are replaced
    written: int = 0                            # buckets written anew
    log_events: int = 0
    survivors: dict[str, int] = field(default_factory=dict)   # dump id -> chunk rows that survived
    survivors_total: int = 0
    without_spark: bool = False                 # written on the driver (a small merge or first load)
    # A delta merge (`delta`): bucket id -> its position delete file (None: nothing replaced);
    # those buckets keep their data files on main.
    deletes: dict[int, DataFile | None] = field(default_factory=dict)
    log_next: bool = False   # a first load adopted under writes (`adopt`): its events are merged next
    dropped: list = field(default_factory=list)   # files of buckets in `deletes` the commit removes (`local_delta`)


def rewrite(spark: SparkSession, base: TableState, pending: Pending, recs: DataFrame, upto: str, purge: bool,
            bucket_rows: int, fill_unchanged: bool, unique: bool = False) -> Rewritten:
    """Merge `recs` into the buckets they touch and write those buckets anew, or, for a few keys
    into big buckets, only the stored rows of their keys (`delta`) (`unique`: see
    `merge.merge_records`)."""
    key, columns = base.key, base.columns
    types = dict(columns)
    bounds = [b.lo for b in base.buckets]
    out = Rewritten(base.buckets)
    incoming = _count_incoming(recs, key, types, bounds, out)
    touched = set(incoming)
    # Sizes are estimated (an update counts twice), so a bucket may split a little early; never late.
    estimate = {b: base.buckets[b].rows + base.buckets[b].tombstone_rows + incoming.get(b, 0) for b in touched}
    oversized = M.oversized(estimate, bucket_rows)
    schema = _stored_schema(columns, pending)
    if not unique and delta.qualifies(base, incoming, settings().merge.delta_ratio, oversized, bucket_rows):
        recs = recs.persist()   # read for its keys, then merged: its inputs are composed once
        try:
            plan = delta.plan(base, sorted(touched), recs.select(*key).distinct().toArrow(),
                              {k: field_ids(pending.schema_ipc)[k] for k in key})
            stored = delta.stored_rows(spark, base, plan, schema)
            labels = [b.id for b in base.buckets]
            # A few Spark tasks a core, each writing its buckets' few rows (a task a bucket: 40 tiny tasks).
            tasks = min(len(touched), 2 * spark.sparkContext.defaultParallelism)
            out.files = _merged_files(pending, base, None if stored is None else M.align(stored, columns), recs, upto,
                                      purge, fill_unchanged, M.bucket_of(key, types, bounds), labels, tasks)
        finally:
            recs.unpersist()
        out.touched = {base.buckets[b].id for b in touched}
        metadata = pending.tx.table_metadata  # type: ignore[attr-defined]
        out.deletes = delta.delete_files(pending.location, metadata.default_spec_id, base, plan)
        out.buckets, out.written = delta.buckets_after(base, plan, out.files), len(touched)
        return out
    old = [df.file_path for b in sorted(touched) for df in base.buckets[b].files + base.buckets[b].tombstones]
    deleting = [df.file_path for b in sorted(touched) for df in base.buckets[b].deletes]
    existing = M.align(read_files(spark, old, schema, deleting), columns) if old else None
    keys = recs.select(*key) if existing is None else existing.select(*key).unionByName(recs.select(*key))
    splits = _split_points(keys.withColumn("_b", M.bucket_of(key, types, bounds)), key, types, oversized, bucket_rows)
    entries = M.with_splits(bounds, splits)   # (lower bound, bucket it was) per bucket
    labels, fresh = [], base.next_id()
    for _, was in entries:
        labels.append(base.buckets[was].id if was is not None else fresh)
        fresh += was is None
    pieces = sum(1 for _, was in entries if was is None or was in touched)
    out.files = _merged_files(pending, base, existing, recs, upto, purge, fill_unchanged,
                              M.bucket_of(key, types, [lo for lo, _ in entries]), labels, pieces, unique)
    out.touched = {base.buckets[b].id for b in touched}
    out.buckets = _new_buckets(base, entries, labels, touched, out)
    return out


def _merged_files(pending: Pending, base: TableState, existing: DataFrame | None, recs: DataFrame, upto: str,
                  purge: bool, fill_unchanged: bool, bucket: Column, labels: list[int], pieces: int,
                  unique: bool = False) -> list[WrittenFile]:
    """`recs` merged into the `existing` rows by the merge rule, bucket by bucket (`bucket`: the
    index into `labels`, the bucket ids), written by the executors as the buckets' new files."""
    now = dt.datetime.now(dt.UTC)
    merged = M.merge_records(existing, recs, base.key, [c for c, _ in base.columns], now, fill_unchanged, bucket,
                             max(1, pieces), unique)
    if purge:
        gone = M.is_tombstone() & (F.col("_dblog_position") <= upto)
        if pending.keep_new_tombstones:
            gone = gone & (F.col("_dblog_merged_at") < F.lit(now).cast("timestamp"))
        merged = merged.where(~gone)
    rows = (merged.withColumn(BUCKET, F.element_at(F.array(*[F.lit(x) for x in labels]), F.col("_b") + 1))
            .withColumn(MISSING, F.to_json(MISSING))   # crosses to Python as text: see warehouse.files
            .withColumn(TOMBSTONE, F.coalesce(M.is_tombstone(), F.lit(False))).drop("_b"))
    writer = bucket_writer(pending.location, pending.schema_ipc, uuid.uuid4().hex[:12])
    return [WrittenFile(**r.asDict()) for r in rows.mapInArrow(writer, WRITTEN).collect()]


def _stored_schema(columns: list[tuple[str, str]], pending: Pending) -> StructType:
    """The Spark schema of the table's data files (every column the table has now), each column
    with its Iceberg field id: files are read by id (`spark.session`), so a column replaced by a
    type change reads as null in files written before, and a renamed one keeps its values."""
    ids = field_ids(pending.schema_ipc)
    every = [*columns, *zip(META, META_TYPES), (BUCKET, "int")]
    return StructType([StructField(name, M.spark_type(t), True, {FIELD_ID: ids[name]}) for name, t in every])


def _count_incoming(recs: DataFrame, key: list[str], types: dict[str, str], bounds: list[list[str] | None],
                    out: Rewritten) -> dict[int, int]:
    """Records per current bucket (index); counts the log events and the chunk survivors per dump."""
    incoming: dict[int, int] = {}
    for r in recs.groupBy(M.bucket_of(key, types, bounds).alias("_b"), "_origin", DUMP_ID).count().collect():
        incoming[r["_b"]] = incoming.get(r["_b"], 0) + r["count"]
        if r["_origin"] == "dump":
            out.survivors_total += r["count"]
            out.survivors[r[DUMP_ID]] = out.survivors.get(r[DUMP_ID], 0) + r["count"]
        elif r["_origin"] != WINDOW:
            out.log_events += r["count"]
    return incoming


def _new_buckets(base: TableState, entries: list[tuple[list[str] | None, int | None]], labels: list[int],
                 touched: set[int], out: Rewritten) -> list[Bucket]:
    """Untouched buckets as they were, rewritten ones from their new files (dropped when nothing is
    left in them: the bucket before takes their range); never empty, the first has no lower bound."""
    buckets: list[Bucket] = []
    for (lo, was), label in zip(entries, labels):
        if was is not None and was not in touched:
            kept = base.buckets[was]
            buckets.append(Bucket(kept.id, lo, kept.rows, kept.tombstone_rows, kept.missing_rows))
            continue
        live = [f for f in out.files if f.bucket == label and not f.tombstone]
        dead = [f for f in out.files if f.bucket == label and f.tombstone]
        if live or dead:
            buckets.append(Bucket(label, lo, sum(f.rows for f in live), sum(f.rows for f in dead),
                                  sum(f.missing for f in live)))
            out.written += 1
    buckets = buckets or [Bucket(labels[0], None)]
    buckets[0].lo = None
    return buckets


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
