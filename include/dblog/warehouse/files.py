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
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..model.staged_format import TOMBSTONES
from ..storage import PARQUET_WRITE, atomic_puts, filesystem
from .types import BUCKET, DELETED, MISSING

TOMBSTONE = "_t"            # routing column: the row is a tombstone (goes to the tombstone branch)
WRITTEN = "uri string, bucket int, tombstone boolean, rows long, missing long"   # one row per file
ROWS_PER_FILE = 1_000_000
ROW_GROUP_BYTES = 128 << 20  # Arrow bytes a task buffers before writing a row group early


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


def flag_deleted(part: pa.Table, target: pa.Schema) -> pa.Table:
    """`part` as `target` with `_dblog_deleted` set from each row's op (a tombstone is a deleted row)."""
    flag = pc.is_in(part["_dblog_op"], value_set=pa.array([str(op) for op in TOMBSTONES]))
    columns = {n: part[n] for n in part.column_names if n != DELETED}
    columns[DELETED] = flag
    loose = pa.Table.from_arrays([columns[f.name] for f in target], names=target.names)
    return pa.Table.from_arrays(loose.cast(target).columns, schema=target)


def data_path(location: str, bucket: int, name: str) -> str:
    return f"{location}/data/{BUCKET}={bucket}/{name}.parquet"


@dataclass
class _OpenFile:
    uri: str
    writer: pq.ParquetWriter
    bucket: int
    tombstone: bool
    rows: int = 0            # written and buffered
    missing: int = 0
    parts: list[pa.Table] = field(default_factory=list)   # buffered, not yet a row group
    buffered: int = 0        # their Arrow bytes


class DataFiles:
    """The data files one Spark task writes: one open file per (bucket, tombstone), rolled over
    at ROWS_PER_FILE rows; `written` is one row per file (`WRITTEN`).

    Parts are buffered and written as one row group per file where memory allows: a part is a
    chunk or an Arrow batch's share of a bucket (20,000 rows, often far fewer), and a row group
    each made files a third larger and slower to write and gave readers dozens of row groups to
    plan per file (docs/performance.md). When the task's buffers pass ROW_GROUP_BYTES, the
    largest is written as a row group of its own.

    A soft-delete table (its schema has `_dblog_deleted`) keeps its deleted rows on main, flagged:
    every row goes to a main file, the flag computed here from `_dblog_op`."""

    def __init__(self, location: str, target: pa.Schema, prefix: str):
        self.location, self.target, self.prefix = location, target, f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.soft = DELETED in target.names
        self.fs = filesystem(location)[0]
        self.open: dict[tuple[int, bool], _OpenFile] = {}
        self.done: list[_OpenFile] = []
        self.buffered = 0

    def write(self, bucket: int, dead: bool, part: pa.Table) -> None:
        """Append `part` (the target schema; `_dblog_deleted` may be left out) to the bucket's open file."""
        if self.soft:
            part, dead = flag_deleted(part, self.target), False
        entry = self.open.get((bucket, dead)) or self._open(bucket, dead)
        entry.parts.append(part)
        entry.buffered += part.nbytes
        self.buffered += part.nbytes
        entry.rows += part.num_rows
        entry.missing += 0 if dead else missing_count(part.column(MISSING))
        if entry.rows >= ROWS_PER_FILE:
            self._close(self.open.pop((bucket, dead)))
        elif self.buffered >= ROW_GROUP_BYTES:
            self._flush(max(self.open.values(), key=lambda e: e.buffered))

    def _open(self, bucket: int, dead: bool) -> _OpenFile:
        uri = data_path(self.location, bucket, f"{self.prefix}-{len(self.done) + len(self.open)}" + ("-t" if dead else ""))
        path = filesystem(uri)[1]
        if not atomic_puts(self.fs):   # an object store has no directories to make
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        writer = pq.ParquetWriter(path, self.target, filesystem=self.fs, **PARQUET_WRITE)
        entry = self.open[(bucket, dead)] = _OpenFile(uri, writer, bucket, dead)
        return entry

    def _flush(self, entry: _OpenFile) -> None:
        if entry.parts:
            group = pa.concat_tables(entry.parts)
            entry.writer.write_table(group, row_group_size=group.num_rows)
            self.buffered -= entry.buffered
            entry.parts, entry.buffered = [], 0

    def _close(self, entry: _OpenFile) -> None:
        self._flush(entry)
        entry.writer.close()
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
            {"uri": [e.uri for e in done], "bucket": pa.array([e.bucket for e in done], pa.int32()),
             "tombstone": [e.tombstone for e in done], "rows": pa.array([e.rows for e in done], pa.int64()),
             "missing": pa.array([e.missing for e in done], pa.int64())})


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
                files.write(bucket, dead, as_target(part, target))
        written = files.written()
        if written is not None:
            yield written

    return write


def as_target(part: pa.Table, target: pa.Schema) -> pa.Table:
    """A batch's rows as the target schema (`_dblog_deleted` the writer derives: see DataFiles)."""
    if DELETED in target.names and DELETED not in part.column_names:
        return part.select([n for n in target.names if n != DELETED])
    return pa.Table.from_arrays(part.select(target.names).cast(target).columns, schema=target)
