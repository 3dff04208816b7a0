"""A table's first load: staged chunks written straight into key-range buckets, no shuffle.

When nothing is stored yet, no event of the table was staged and the ready chunks are one dump's
disjoint key ranges (`rules.disjoint_chunks`; `job.MergeInputs.unique`), every chunk row survives
its window (no event touched it) and is the only record of its key: the merge rule has nothing
to decide, and nothing needs to be shuffled, counted or sampled. Consecutive chunks (chunk order
is key order) are grouped into buckets of about `bucket_rows`; one Spark task per bucket reads
its chunk files with pyarrow (`chunk_loader`), stamps each row as `records.dump_records` does (its window's HW
position, its op, origin `dump`, its dump id) and writes the bucket's data files
(`warehouse.files.DataFiles`). Values take the Spark types the merge reads them as
(`sources.conform`, as `read_files` does on an object store), then the table's types.

A first load of one bucket of at most `DBLOG_MERGE_LOCAL_ROWS` rows (most tables of a database
with hundreds) runs the same loader on the driver instead: a Spark job costs more than such a
table's rows do, and a bucket has no neighbour whose order to check.

Each bucket's lower bound is its lowest key. Chunks follow the source's key order, which for
strings is the column's collation, while buckets follow Spark's order: when a bucket's highest
key is not below the next one's lowest, the files are deleted and the merge takes the general
path (`rewrite`).
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from ..settings import settings
from ..storage import filesystem
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import WRITTEN
from ..warehouse.merged_state import Bucket, TableState
from . import bucket_merge as M
from .chunk_loader import bucket_loader
from .rewrite import Rewritten

log = logging.getLogger("dblog.merge")


@dataclass(frozen=True)
class LoadChunk:
    """A ready chunk of a first load: its file (a URI executors can open), its window's HW
    position (its rows' position), its rows, its dump."""
    uri: str
    high: str
    rows: int
    dump_id: str
    schema: pa.Schema | None = None   # its file's (footer): a chunk in the warehouse form is adopted (`adopt`)
    low: str | None = None            # its window's LW position


def group(rows: list[int], bucket_rows: int) -> list[list[int]]:
    """Indices of consecutive chunks (their `rows`, in key order) grouped into buckets of about
    `bucket_rows` rows: a chunk starts a new bucket when adding it would pass `bucket_rows`."""
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(rows):
        if not groups or (total + n > bucket_rows and total > 0):
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


def first_load(spark: SparkSession, base: TableState, pending: Pending, chunks: list[LoadChunk], purge: bool,
               bucket_rows: int) -> Rewritten | None:
    """Write `chunks` (in key order) as the table's buckets; None when they do not follow Spark's
    key order (nothing is left behind: the caller merges the general way)."""
    key, types = base.key, dict(base.columns)
    chunks = [c for c in chunks if c.rows]
    groups = [[chunks[i] for i in g] for g in group([c.rows for c in chunks], bucket_rows)]
    labels = [base.buckets[0].id] + list(range(base.next_id(), base.next_id() + len(groups) - 1))
    tasks = [(label, json.dumps([(c.uri, c.high) for c in g])) for label, g in zip(labels, groups)]
    spark_types = StructType([StructField(c, M.spark_type(t), True) for c, t in base.columns])
    loader = bucket_loader(pending.location, pending.schema_ipc, to_arrow_schema(spark_types, timezone="UTC")
                           .serialize().to_pybytes(), key, purge, uuid.uuid4().hex[:12])
    if len(tasks) == 1 and sum(c.rows for c in chunks) <= settings().merge.local_rows:
        return _one_bucket(base, chunks, labels[0], loader(iter([pa.RecordBatch.from_pylist(
            [{"bucket": label, "files": spec} for label, spec in tasks])])))
    # Bounds by key position (`_lo_0`, `_hi_0`, ...): a key column may have any name.
    bounds = {f"_{end}_{i}": types[k] for end in ("lo", "hi") for i, k in enumerate(key)}
    lows = [f"_lo_{i}" for i in range(len(key))]
    written_schema = M.spark_type(WRITTEN)
    assert isinstance(written_schema, StructType)
    schema = StructType([*written_schema.fields, *[StructField(n, M.spark_type(t)) for n, t in bounds.items()]])
    # A few Spark tasks a core, each writing its buckets one after another: a task per bucket cost
    # ~60 ms each (10M rows, 40 buckets: 5.4 s in 40 tasks, 3.5 s in 4; docs/performance.md).
    slices = max(1, min(len(tasks), 2 * spark.sparkContext.defaultParallelism))
    tasks_df = spark.createDataFrame(spark.sparkContext.parallelize(tasks, slices), "bucket int, files string")
    written = (tasks_df.mapInArrow(loader, schema)
               .select(*written_schema.names, *[_comparable(n, t) for n, t in bounds.items()],
                       *M.key_strings(lows, bounds)).collect())
    files = [WrittenFile(r["uri"], r["bucket"], r["tombstone"], r["rows"], r["missing"]) for r in written]
    ends = {r["bucket"]: ([r[f"_o_lo_{i}"] for i in range(len(key))], [r[f"_o_hi_{i}"] for i in range(len(key))],
                          [r[f"_s_{n}"] for n in lows]) for r in written}
    present = [label for label in labels if label in ends]
    if any(ends[a][1] >= ends[b][0] for a, b in zip(present, present[1:])):
        log.warning("%s/%s: the source's key order is not Spark's (a string key's collation?): the first load "
                    "takes the general merge", base.source, base.table)
        _delete(files)
        return None
    out = loaded(base, chunks, files, written=len(present))
    out.buckets = [bucket_entry(label, None if i == 0 else ends[label][2], [f for f in files if f.bucket == label])
                   for i, label in enumerate(present)] or [Bucket(labels[0], None)]
    return out


def _one_bucket(base: TableState, chunks: list[LoadChunk], label: int, written) -> Rewritten:
    """A one-bucket first load the driver wrote: its files, its survivors."""
    files = [WrittenFile(r["uri"], r["bucket"], r["tombstone"], r["rows"], r["missing"])
             for batch in written for r in batch.to_pylist()]
    out = loaded(base, chunks, files, written=1 if files else 0)
    out.without_spark = True
    out.buckets = [bucket_entry(label, None, files)]
    return out


def bucket_entry(label: int, lo: list | None, files: list[WrittenFile]) -> Bucket:
    """A written bucket's entry: its rows, tombstones and unproven values, from its files."""
    live, dead = [f for f in files if not f.tombstone], [f for f in files if f.tombstone]
    return Bucket(label, lo, sum(f.rows for f in live), sum(f.rows for f in dead), sum(f.missing for f in live))


def loaded(base: TableState, chunks: list[LoadChunk], files: list[WrittenFile], written: int) -> Rewritten:
    out = Rewritten([], files, touched={b.id for b in base.buckets}, written=written,
                    survivors_total=sum(c.rows for c in chunks))
    for c in chunks:
        out.survivors[c.dump_id] = out.survivors.get(c.dump_id, 0) + c.rows
    return out


def _comparable(name: str, spark_type: str):
    """A bound as the driver compares it: an instant as microseconds (Spark hands a timestamp to
    Python as a local wall time, which repeats in a daylight-saving fold)."""
    column = F.col(name)
    return (F.unix_micros(column) if spark_type == "timestamp" else column).alias(f"_o{name}")


def _delete(files: list[WrittenFile]) -> None:
    for f in files:
        fs, path = filesystem(f.uri)
        fs.delete_file(path)
