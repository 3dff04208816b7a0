"""A merge of a few keys into big buckets, by position deletes instead of a rewrite.

A rewrite costs what the touched buckets hold: 1,000 keys scattered over a 10M-row table touch
every one of its 250,000-row buckets and rewrote all of it (3.2x a plain rewrite). When the
buckets a merge touches hold at least `DBLOG_MERGE_DELTA_RATIO` times the records it brings,
the merge instead

1. finds the stored rows of the records' keys: the key columns of the touched buckets' data files
   are read (by field id, rows already deleted left out) and joined with the records' keys, on
   the driver with pyarrow;
2. reads those rows whole (`dblog_parquet`'s `rows` option) with every tombstone of the touched
   buckets, and merges them with the records by the merge rule, as a rewrite does;
3. writes the winners as a new data file per bucket, the tombstones as the bucket's new tombstone
   files (the branch is rewritten: it holds few rows), and one position delete file per bucket
   naming the stored rows the winners replace (`warehouse.deletes`).

The bucket's data files stay; every Iceberg reader hides the deleted rows, and dblog's own
readers of a bucket's files apply them. A bucket with `MAX_DELETES` delete files (one per merge
that changed it in place) or `MAX_FILES` data files, or whose rows deleted in place pass a
`DBLOG_MERGE_DELTA_RATIO`-th of its rows, is rewritten by its next merge (and maintenance compacts
it sooner), so neither piles up (the driver's in-place merges, `local_delta`, keep one of each). The data files' bound is the looser: a
first load adopted as its chunk files (`merge.adopt`) leaves a file per chunk in each bucket (13
at the defaults), and a bound of 8 made the first scattered merge after it rewrite the whole
table (10M rows, 29,500 events from 30 s of 1,000 row changes/s: 44.5 s, against 18.3 s in place,
and 17.6 s in place on buckets of one file each; docs/performance.md).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyspark.sql import DataFrame, SparkSession

from ..spark.data_sources import names_by_field_id, read_files, read_with_source
from ..storage import filesystem
from ..warehouse import deletes
from ..warehouse.files import missing_count
from ..warehouse.merged_state import Bucket, TableState
from ..warehouse.types import MISSING

MAX_DELETES = 8          # delete files of a bucket (merges that changed it in place) before the next rewrites it
MAX_FILES = 32           # data files of a bucket before its next merge rewrites it (see the module doc)
# A merge's records past which it rewrites: the replaced rows' positions travel in a plan, and the
# in-place merge's cost grows with them. 10M rows after an adopted load, random changes: 89,600
# records 24.5 s in place against 40.7 s rewritten; 239,400 records 40.2 s against 44.1 s
# (bench/events_after_load.py, docs/performance.md); the bound was 50,000.
MAX_RECORDS = 250_000
DELTA = "delta-"   # a bucket's delta file's name starts so: the rows the driver's in-place merges wrote (`local_delta`)


@dataclass
class Delta:
    """A delta merge's plan: per touched bucket index, the positions of its stored rows the records
    replace (data file URI -> positions) and how many of them listed unproven values."""
    touched: list[int]
    replaced: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    replaced_missing: dict[int, int] = field(default_factory=dict)
    # The highest `_dblog_position` of a replaced row, where a file's footer did not prove them all
    # older than the plan's `newer_than` (None: proved, or not asked).
    newest_replaced: str | None = None
    gone: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)   # per bucket: what its delete files name

    def rows(self, bucket: int) -> int:
        return sum(len(p) for p in self.replaced.get(bucket, {}).values())


def qualifies(base: TableState, incoming: dict[int, int], ratio: int, oversized: dict[int, int],
              bucket_rows: int) -> bool:
    """Whether the records (`incoming`: per bucket index) are few enough against what the buckets
    they touch hold for a delta merge to pay (see the module doc): at most a `ratio`-th of their rows
    and `MAX_RECORDS`, into buckets of at least a quarter of `bucket_rows` on average (smaller
    ones cost little to rewrite), none to be split, none holding `MAX_FILES` data files or
    `MAX_DELETES` delete files, or rows deleted in place (readers would skip more and more of what
    they read) or a delta file (each driver's merge reads and rewrites it) past a `ratio`-th of its
    rows: its next merge rewrites it; and no float key column."""
    types = dict(base.columns)
    if ratio <= 0 or oversized or not incoming or any(types[k] in ("float", "double") for k in base.key):
        return False   # (a float key: Arrow's join tells -0.0 from 0.0, Spark's merge does not)
    touched = [base.buckets[b] for b in incoming]
    if any(len(b.files) >= MAX_FILES or len(b.deletes) >= MAX_DELETES
           or max(deleted_rows(b), delta_rows(b)) * ratio > b.rows for b in touched):
        return False
    stored, records = sum(b.rows for b in touched), sum(incoming.values())
    return records <= MAX_RECORDS and records * ratio <= stored and 4 * stored >= len(touched) * bucket_rows


def deleted_rows(bucket: Bucket) -> int:
    """The bucket's stored rows its position delete files name (each row is named once)."""
    return sum(d.record_count for d in bucket.deletes)


def is_delta(uri: str) -> bool:
    """Whether a data file is a bucket's delta file (its name: `local_delta` writes one a bucket)."""
    return uri.rsplit("/", 1)[-1].startswith(DELTA)


def delta_rows(bucket: Bucket) -> int:
    """The rows of the bucket's delta file(s), as their manifests count them."""
    return sum(f.record_count for f in bucket.files if is_delta(f.file_path))


def plan(base: TableState, touched: list[int], keys: pa.Table, key_ids: dict[str, int],
         newer_than: tuple[int, str] | None = None) -> Delta:
    """The stored rows of `keys` (the records' distinct keys) in the touched buckets. `newer_than`
    (the position column's field id, a position): also find `Delta.newest_replaced`."""
    out = Delta(sorted(touched))
    out.gone = {b: deletes.positions(d.file_path for d in base.buckets[b].deletes) for b in out.touched}
    files = [(b, f, out.gone[b].get(f.file_path)) for b in out.touched for f in base.buckets[b].files]
    with ThreadPoolExecutor(4) as pool:   # (a file each: the files of every touched bucket at once)
        found = list(pool.map(lambda job: _matches(job[1].file_path, job[2], keys, key_ids, newer_than), files))
    for b in out.touched:
        out.replaced[b], out.replaced_missing[b] = {}, 0
    for (b, f, _), (positions, missing, newest) in zip(files, found):
        if len(positions):
            out.replaced[b][f.file_path] = positions
        out.replaced_missing[b] += missing
        if newest is not None and (out.newest_replaced is None or newest > out.newest_replaced):
            out.newest_replaced = newest
    return out


def _matches(uri: str, gone: np.ndarray | None, keys: pa.Table, key_ids: dict[str, int],
             newer_than: tuple[int, str] | None = None) -> tuple[np.ndarray, int, str | None]:
    """(positions of the file's live rows whose key is in `keys`, how many of them list unproven
    values, the highest position among them unless the footer proves it below `newer_than`'s)."""
    fs, path = filesystem(uri)
    f = pq.ParquetFile(path, filesystem=fs)
    by_id = names_by_field_id(f.schema_arrow)
    names = list(keys.column_names)
    listing = [MISSING] if MISSING in f.schema_arrow.names else []
    position = [] if newer_than is None or _older(f, by_id.get(newer_than[0]), newer_than[1]) \
        else [by_id[newer_than[0]]]
    stored = f.read(columns=[by_id[key_ids[k]] for k in names] + listing + position)
    lookup = pa.table({k: stored.column(i) for i, k in enumerate(names)})
    lookup = lookup.append_column("_pos", pa.array(np.arange(stored.num_rows, dtype=np.int64)))
    live = deletes.kept(stored.num_rows, gone)
    if live is not None:
        lookup = lookup.filter(live)
    # Stored keys as the records' types: a key column widened in place (int -> bigint) keeps its
    # narrower type in older files, and the records' wider values must not be cast down.
    lookup = lookup.cast(pa.schema([*(keys.schema.field(k) for k in names), lookup.schema.field("_pos")]))
    hit = lookup.join(keys, keys=names, join_type="left semi")
    positions = np.sort(hit["_pos"].to_numpy())
    if not len(positions):
        return positions, 0, None
    at = pa.array(positions)
    newest = pc.max(stored.column(position[0]).take(at)).as_py() if position else None
    return positions, missing_count(stored.column(MISSING).take(at)) if listing else 0, newest


def _older(f: pq.ParquetFile, column: str | None, than: str) -> bool:
    """Whether the footer's statistics show every value of `column` below `than`."""
    if column is None:   # (a file written before the column: its rows read it as null)
        return True
    leaves = f.metadata.schema
    index = next((i for i in range(len(leaves)) if leaves.column(i).path == column), None)
    if index is None:
        return False
    for g in range(f.metadata.num_row_groups):
        stats = f.metadata.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max or stats.max >= than:
            return False
    return True


def stored_rows(spark: SparkSession, base: TableState, delta: Delta, schema) -> DataFrame | None:
    """The replaced rows and every tombstone of the touched buckets, as the table's stored schema."""
    rows = {uri: positions.tolist() for b in delta.touched for uri, positions in delta.replaced.get(b, {}).items()}
    tombstones = [f.file_path for b in delta.touched for f in base.buckets[b].tombstones]
    parts = ([read_with_source(spark, list(rows), schema, rows=rows)] if rows else []) + \
        ([read_files(spark, tombstones, schema)] if tombstones else [])
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])


def delete_files(location: str, spec_id: int, base: TableState, delta: Delta) -> dict[int, DataFile | None]:
    """Per touched bucket id, its position delete file (None: no stored row replaced)."""
    replacing = [b for b in delta.touched if delta.rows(b)]
    with ThreadPoolExecutor(8) as pool:   # (a PUT each on an object store)
        written = dict(zip(replacing, pool.map(
            lambda b: deletes.write(location, spec_id, base.buckets[b].id, delta.replaced[b]), replacing)))
    return {base.buckets[b].id: written.get(b) for b in delta.touched}


def buckets_after(base: TableState, delta: Delta, written: list, dropped: dict[int, tuple[int, int]] | None = None) \
        -> list[Bucket]:
    """The bucket list after a delta merge: the touched buckets' rows less those replaced (and, per
    bucket, the live rows and rows listing unproven values of files the merge `dropped`: a delta
    file rewritten, `local_delta`), plus the written ones; their tombstones are the written ones
    (the branch is rewritten)."""
    out = []
    touched = set(delta.touched)
    for i, b in enumerate(base.buckets):
        if i not in touched:
            out.append(Bucket(b.id, b.lo, b.rows, b.tombstone_rows, b.missing_rows))
            continue
        live = [f for f in written if f.bucket == b.id and not f.tombstone]
        dead = [f for f in written if f.bucket == b.id and f.tombstone]
        rows, missing = (dropped or {}).get(i, (0, 0))
        out.append(Bucket(b.id, b.lo, b.rows - rows - delta.rows(i) + sum(f.rows for f in live),
                          sum(f.rows for f in dead),
                          b.missing_rows - missing - delta.replaced_missing.get(i, 0) + sum(f.missing for f in live)))
    return out
