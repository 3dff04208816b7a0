"""Executor side of a first load (`first_load`): a bucket's chunk files become its data files.

Runs in Spark's Python workers (`mapInArrow`); imports stay light, as each worker pays them.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..model.staged_format import DUMP_ID, OP, TOMBSTONES
from ..spark.data_sources import conform
from ..storage import filesystem
from ..warehouse.files import DataFiles, as_target
from ..warehouse.types import BUCKET, META


def bucket_loader(location: str, schema_ipc: bytes, spark_ipc: bytes, key: list[str], purge: bool,
                  merge_id: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs over (bucket, JSON [[chunk uri, HW position], ...]): writes
    each bucket, one row per written file out (`WRITTEN`, then the bucket's lowest and highest key)."""
    merged_at = dt.datetime.now(dt.UTC)

    def load(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        values = pa.ipc.read_schema(pa.py_buffer(spark_ipc))
        wanted = {*values.names, OP, DUMP_ID}
        for batch in batches:
            for bucket, spec in zip(batch.column("bucket").to_pylist(), batch.column("files").to_pylist()):
                files, keys = DataFiles(location, target, merge_id), []
                for uri, high in json.loads(spec):
                    fs, path = filesystem(uri)
                    with fs.open_input_file(path) as handle:
                        f = pq.ParquetFile(handle)
                        staged = f.read([n for n in f.schema_arrow.names if n in wanted])
                    rows = _warehouse_rows(staged, values, high, merged_at, bucket)
                    keys.append(rows.select(key))
                    # Every row's position is its window's HW, at or before the merge's position:
                    # with `purge`, a tombstone is dropped here as `rewrite` drops it.
                    dead = pc.is_in(staged[OP], pa.array(list(TOMBSTONES)))
                    parts = [(False, rows)] if not pc.any(dead).as_py() else \
                        [(False, rows.filter(pc.invert(dead))), (True, rows.filter(dead))]
                    for tomb, part in parts:
                        if part.num_rows and not (tomb and purge):
                            files.write(bucket, tomb, as_target(part, target))
                written = files.written()
                if written is not None:
                    yield _with_bounds(written, pa.concat_tables(keys), key, values)

    return load


def _warehouse_rows(staged: pa.Table, values: pa.Schema, high: str, merged_at: dt.datetime,
                    bucket: int) -> pa.Table:
    """A chunk file's rows as warehouse rows: its data in the merge's Spark types, then the
    metadata `records.dump_records` gives a survivor (position HW, origin dump)."""
    n = staged.num_rows
    data = pa.Table.from_batches([conform(b, values) for b in staged.to_batches()], schema=values)
    meta = [pa.repeat(pa.scalar(high, pa.string()), n), staged[OP], pa.repeat(pa.scalar("dump"), n), staged[DUMP_ID],
            pa.repeat(pa.scalar(merged_at, pa.timestamp("us", tz="UTC")), n), pa.nulls(n, pa.list_(pa.string()))]
    return pa.Table.from_arrays([*data.columns, *meta, pa.repeat(pa.scalar(bucket, pa.int32()), n)],
                                names=[*values.names, *META, BUCKET])


def _with_bounds(written: pa.RecordBatch, keys: pa.Table, key: list[str], values: pa.Schema) -> pa.RecordBatch:
    """`written` with the lowest and highest key (Spark's order: bytes for strings) on each row."""
    order = pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in key])
    lo, hi = keys.take([order[0].as_py()]), keys.take([order[-1].as_py()])
    n = written.num_rows
    ends = [pa.repeat(lo.column(k)[0], n).cast(values.field(k).type) for k in key] + \
        [pa.repeat(hi.column(k)[0], n).cast(values.field(k).type) for k in key]
    return pa.RecordBatch.from_arrays([*written.columns, *ends],
                                      names=[*written.schema.names, *[f"_lo_{i}" for i in range(len(key))],
                                             *[f"_hi_{i}" for i in range(len(key))]])
