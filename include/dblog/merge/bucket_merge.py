"""The warehouse merge as pure DataFrame functions: key-range buckets and the merge rule.

Warehouse rows are the table's columns plus the metadata columns in `META`. A merge turns the
rows of the buckets it touches back into records (`as_records`), adds the new records and keeps
per key the one with the highest position (`rules.latest`, the one merge rule).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, _parse_datatype_string

from ..model.staged_format import DUMP_ID, OP, POSITION, TOMBSTONES, UNCHANGED
from ..warehouse.types import MISSING
from .frame_rules import latest

META = ("_dblog_position", "_dblog_op", "_dblog_origin", "_dblog_dump_id", "_dblog_merged_at", MISSING)
_RECORD = (POSITION, OP, "_origin", DUMP_ID, "_merged_at", "_missing")



@functools.lru_cache(maxsize=1024)
def spark_type(ddl: str) -> DataType:
    """A type's Spark form from its DDL string (`bigint`, `decimal(10,2)`, a struct): a parse is a
    call into the JVM, some 2 ms, asked for per column of every merge."""
    return _parse_datatype_string(ddl)

def is_tombstone() -> Column:
    return F.col("_dblog_op").isin(*TOMBSTONES)


def _literal(value: str, spark_type: str) -> Column:
    # Bounds are kept as Spark's own string form of each key value, so they cast back exactly.
    return F.unhex(F.lit(value)) if spark_type == "binary" else F.lit(value).cast(spark_type)


def key_strings(key: list[str], types: dict[str, str]) -> list[Column]:
    """Key values in the form bucket bounds are stored in."""
    return [(F.hex(F.col(k)) if types[k] == "binary" else F.col(k).cast("string")).alias(f"_s_{k}") for k in key]


def _key_value(key: list[str]) -> Column:
    return F.col(key[0]) if len(key) == 1 else F.struct(*[F.col(k) for k in key])


def _bound(bound: list[str] | None, key: list[str], types: dict[str, str]) -> Column:
    if bound is None:
        raise ValueError("bucket 0 has no lower bound to compare with")  # bucket_search never asks
    values = [_literal(v, types[k]).alias(k) for v, k in zip(bound, key)]
    return values[0] if len(key) == 1 else F.struct(*values)


def bucket_of(key: list[str], types: dict[str, str], bounds: list[list[str] | None]) -> Column:
    """Index of the key-range bucket a row falls in; `bounds[i]` is bucket i's inclusive lower
    bound (None for bucket 0). A balanced tree of comparisons: log2(buckets) per row."""
    value = _key_value(key)
    return bucket_search(len(bounds), lambda i: value < _bound(bounds[i], key, types),
                         lambda below, left, right: F.when(below, left).otherwise(right), F.lit)


def bucket_search(count: int, below: Callable[[int], Any], choose: Callable[[Any, Any, Any], Any],
                  leaf: Callable[[int], Any]) -> Any:
    """The balanced tree of comparisons over buckets 0..count-1 that `bucket_of` builds:
    `below(i)` is "the key lies below bucket i's lower bound" (never asked for bucket 0, which has
    none), `choose(cond, a, b)` is a where cond holds else b, `leaf(i)` is bucket i. Each bound is
    compared once in the tree; a key on a bound falls in that bound's bucket."""
    if count < 1:
        raise ValueError("a table has at least one bucket")

    def tree(lo: int, hi: int) -> Any:
        if lo == hi:
            return leaf(lo)
        mid = (lo + hi + 1) // 2
        return choose(below(mid), tree(lo, mid - 1), tree(mid, hi))

    return tree(0, count - 1)


def oversized(estimate: dict[int, int], bucket_rows: int) -> dict[int, int]:
    """The buckets to split, with their estimated rows: those past twice `bucket_rows` (a bucket
    splits when it doubles, so a table growing a row at a time does not split on every merge)."""
    return {b: n for b, n in estimate.items() if n > 2 * bucket_rows}


SAMPLES_PER_PIECE = 64


def sample_fraction(rows: int, bucket_rows: int) -> float:
    """The share of an oversized bucket's `rows` keys to sample for its split points: about
    SAMPLES_PER_PIECE keys per piece of `bucket_rows`, all of them for a small bucket."""
    return min(1.0, SAMPLES_PER_PIECE * -(-rows // bucket_rows) / rows)


def with_splits(bounds: list[list[str] | None],
                splits: dict[int, list[list[str]]]) -> list[tuple[list[str] | None, int | None]]:
    """The bucket list after splits, in key order: per bucket its lower bound and the index of the
    bucket it was (None for a piece cut off the bucket before it at a split point)."""
    entries: list[tuple[list[str] | None, int | None]] = []
    for i, lo in enumerate(bounds):
        entries += [(lo, i)] + [(p, None) for p in splits.get(i, [])]
    return entries


def split_points(samples: list[list[str]], rows: int, bucket_rows: int) -> list[list[str]]:
    """Lower bounds that cut a bucket of `rows` rows into pieces of about `bucket_rows`, taken
    from a sorted sample of its keys."""
    pieces = math.ceil(rows / bucket_rows)
    if pieces < 2 or not samples:
        return []
    points: list[list[str]] = []
    for j in range(1, pieces):
        candidate = samples[min(len(samples) - 1, round(j * len(samples) / pieces))]
        if candidate != samples[0] and (not points or candidate != points[-1]):
            points.append(candidate)
    return points


def align(df: DataFrame, columns: list[tuple[str, str]]) -> DataFrame:
    """`df` with exactly the warehouse's data columns (missing ones null), metadata kept."""
    have = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    # A column whose type was converted in the source: older values that cannot be read as the new
    # type are null (its repair re-reads every row); Spark's ANSI cast would fail the merge.
    data = [(F.lit(None).cast(t) if c not in have else F.col(c) if have[c] == t
             else F.col(c).try_cast(t)).alias(c) for c, t in columns]
    return df.select(*data, *[c for c in df.columns if c.startswith("_")])


def as_records(rows: DataFrame) -> DataFrame:
    """Warehouse rows as merge records; on equal positions they win over new ones (`_prio` 0)."""
    renamed = [F.col(m).alias(r) for m, r in zip(META, _RECORD) if m != MISSING]
    data = [c for c in rows.columns if not c.startswith("_")]
    # Values a row lacks stay listed (rules.latest keeps them unknown until a newer record replaces the row).
    missing = F.col(MISSING) if MISSING in rows.columns else F.lit(None)
    return rows.select(*data, *renamed, missing.cast("array<string>").alias(UNCHANGED), F.lit(0).alias("_prio"))


def merge_records(existing: DataFrame | None, records: DataFrame, key: list[str], columns: list[str],
                  merged_at: datetime, fill_unchanged: bool, bucket: Column, buckets: int,
                  unique: bool = False) -> DataFrame:
    """Warehouse rows (with their bucket `_b`) after applying `records` to `existing` warehouse
    rows by the merge rule. One shuffle, by bucket, serves the merge and the per-bucket write.
    `unique`: one record per key and nothing stored (see `rules.latest`)."""
    if unique and existing is not None:
        raise ValueError("records are unique per key only when nothing is stored")
    incoming = records.withColumn("_merged_at", F.lit(merged_at).cast("timestamp")).withColumn("_prio", F.lit(1))
    both = incoming if existing is None else as_records(existing).unionByName(incoming)
    # Kept for unique records too: it is what gives each bucket about one file.
    both = both.withColumn("_b", bucket).repartition(buckets, "_b")
    state = latest(both, key, columns, carry=("_merged_at",), fill_unchanged=fill_unchanged, within=("_b",),
                   unique=unique)
    return state.select(*columns, *[F.col(r).alias(m) for r, m in zip(_RECORD, META)], "_b")
