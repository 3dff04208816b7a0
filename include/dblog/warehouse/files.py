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
    if column.null_count == len(column):   # most rows: no list to decode
        return pa.nulls(len(column), pa.list_(pa.string()))
    values = column.to_pylist()
    return pa.array([None if v is None else json.loads(v) for v in values], pa.list_(pa.string()))


def missing_count(column: pa.Array) -> int:
    """Rows listing at least one column whose value nothing proved."""
    lengths = pc.fill_null(pc.list_value_length(column), 0)
    return int(pc.sum(pc.greater(lengths, 0)).as_py() or 0)


def data_path(location: str, bucket: int, name: str) -> str:
    return f"{location}/data/{BUCKET}={bucket}/{name}.parquet"


class DataFiles:
    """The data files one Spark task writes: one open file per (bucket, tombstone), rolled over
    at ROWS_PER_FILE rows; `written` is one row per file (`WRITTEN`)."""

    def __init__(self, location: str, target: pa.Schema, prefix: str):
        self.location, self.target, self.prefix = location, target, f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.fs = filesystem(location)[0]
        self.open: dict[tuple[int, bool], list] = {}   # (bucket, tombstone) -> [uri, writer, rows, missing]
        self.done: list[list] = []

    def write(self, bucket: int, dead: bool, part: pa.Table) -> None:
        """Append `part` (exactly the target schema) to the bucket's open file."""
        entry = self.open.get((bucket, dead))
        if entry is None:
            uri = data_path(self.location, bucket, f"{self.prefix}-{len(self.done) + len(self.open)}"
                            + ("-t" if dead else ""))
            path = filesystem(uri)[1]
            if not atomic_puts(self.fs):   # an object store has no directories to make
                self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            entry = self.open[(bucket, dead)] = [uri, pq.ParquetWriter(path, self.target, filesystem=self.fs),
                                                 0, 0, bucket, dead]
        entry[1].write_table(part)
        entry[2] += part.num_rows
        entry[3] += 0 if dead else missing_count(part.column(MISSING))
        if entry[2] >= ROWS_PER_FILE:
            self._close(self.open.pop((bucket, dead)))

    def _close(self, entry: list) -> None:
        entry[1].close()
        self.done.append(entry)

    def written(self) -> pa.RecordBatch | None:
        """Closes the open files; their rows (`WRITTEN`), None when nothing was written."""
        for entry in self.open.values():
            self._close(entry)
        self.open = {}
        done = self.done
        if not done:
            return None
        return pa.RecordBatch.from_pydict(
            {"uri": [e[0] for e in done], "bucket": pa.array([e[4] for e in done], pa.int32()),
             "tombstone": [bool(e[5]) for e in done], "rows": pa.array([e[2] for e in done], pa.int64()),
             "missing": pa.array([e[3] for e in done], pa.int64())})


def bucket_writer(location: str, schema_ipc: bytes, merge_id: str) -> Callable[[Iterator[pa.RecordBatch]],
                                                                                Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs: rows with `_dblog_bucket`, the tombstone flag and the JSON
    `_dblog_missing` in; one row per written file out (`WRITTEN`)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        files = DataFiles(location, target, merge_id)
        for batch in batches:
            data = pa.Table.from_batches([batch])
            at = data.schema.get_field_index(MISSING)
            data = data.set_column(at, MISSING, rebuild_list(data.column(MISSING)))
            groups = data.group_by([BUCKET, TOMBSTONE], use_threads=False).aggregate([])
            for bucket, dead in zip(groups.column(BUCKET).to_pylist(), groups.column(TOMBSTONE).to_pylist()):
                part = data.filter(pc.and_(pc.equal(data[BUCKET], bucket), pc.equal(data[TOMBSTONE], dead)))
                files.write(bucket, dead, pa.Table.from_arrays(part.select(target.names).cast(target).columns,
                                                               schema=target))
        written = files.written()
        if written is not None:
            yield written

    return write
