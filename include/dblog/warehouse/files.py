"""Executor side of a merge: write a partition's rows as Parquet data files of the table.

Runs inside Spark's Python workers (`mapInArrow`), so it needs neither Iceberg's nor an S3 jar:
pyarrow writes through `storage.filesystem` to any store. Every column carries its Iceberg field
id (the list element's too: without it DuckDB reads `_dblog_missing` elements as NULL). The list
column crosses from the JVM as JSON text, which is several times faster than Spark's conversion
of an array column, and is rebuilt here.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..storage import atomic_puts, filesystem
from .types import BUCKET, MISSING

TOMBSTONE = "_t"            # routing column: the row is a tombstone (goes to the tombstone branch)
WRITTEN = "uri string, bucket int, tombstone boolean, rows long, missing long"   # one row per file
ROWS_PER_FILE = 1_000_000


def rebuild_list(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`_dblog_missing` from its JSON transport form (null stays null)."""
    values = column.to_pylist()
    if all(v is None for v in values):
        return pa.nulls(len(values), pa.list_(pa.string()))
    return pa.array([None if v is None else json.loads(v) for v in values], pa.list_(pa.string()))


def missing_count(column: pa.Array) -> int:
    """Rows listing at least one column whose value nothing proved."""
    lengths = pc.fill_null(pc.list_value_length(column), 0)
    return int(pc.sum(pc.greater(lengths, 0)).as_py() or 0)


def data_path(location: str, bucket: int, name: str) -> str:
    return f"{location}/data/{BUCKET}={bucket}/{name}.parquet"


def bucket_writer(location: str, schema_ipc: bytes, merge_id: str) -> Callable[[Iterator[pa.RecordBatch]],
                                                                                Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs: rows with `_dblog_bucket`, the tombstone flag and the JSON
    `_dblog_missing` in; one row per written file out (`WRITTEN`)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        fs, _ = filesystem(location)
        task = uuid.uuid4().hex[:8]
        open_files: dict[tuple[int, bool], list] = {}   # (bucket, tombstone) -> [uri, writer, rows, missing]
        done: list[list] = []

        def close(entry: list) -> None:
            entry[1].close()
            done.append(entry)

        for batch in batches:
            data = pa.Table.from_batches([batch])
            at = data.schema.get_field_index(MISSING)
            data = data.set_column(at, MISSING, rebuild_list(data.column(MISSING)))
            groups = data.group_by([BUCKET, TOMBSTONE], use_threads=False).aggregate([])
            for bucket, dead in zip(groups.column(BUCKET).to_pylist(), groups.column(TOMBSTONE).to_pylist()):
                part = data.filter(pc.and_(pc.equal(data[BUCKET], bucket), pc.equal(data[TOMBSTONE], dead)))
                part = pa.Table.from_arrays(part.select(target.names).cast(target).columns, schema=target)
                entry = open_files.get((bucket, dead))
                if entry is None:
                    uri = data_path(location, bucket, f"{merge_id}-{task}-{len(done) + len(open_files)}"
                                    + ("-t" if dead else ""))
                    path = filesystem(uri)[1]
                    if not atomic_puts(fs):   # an object store has no directories to make
                        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                    writer = pq.ParquetWriter(path, target, filesystem=fs)
                    entry = open_files[(bucket, dead)] = [uri, writer, 0, 0, bucket, dead]
                entry[1].write_table(part)
                entry[2] += part.num_rows
                entry[3] += 0 if dead else missing_count(part.column(MISSING))
                if entry[2] >= ROWS_PER_FILE:
                    close(open_files.pop((bucket, dead)))
        for entry in open_files.values():
            close(entry)
        if done:
            yield pa.RecordBatch.from_pydict(
                {"uri": [e[0] for e in done], "bucket": pa.array([e[4] for e in done], pa.int32()),
                 "tombstone": [bool(e[5]) for e in done], "rows": pa.array([e[2] for e in done], pa.int64()),
                 "missing": pa.array([e[3] for e in done], pa.int64())})

    return write
