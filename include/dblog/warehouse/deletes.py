"""Iceberg v2 position deletes: how a merge that changes a few rows of big buckets leaves their
data files in place (`merge.delta`).

A position-delete file names rows of data files by (file path, row position); every Iceberg
reader (Spark's, pyiceberg, DuckDB, Trino) hides them. dblog writes one per bucket a merge
deletes rows from, covering that bucket's data files only (partition = the bucket, path bounds
set), and its own readers of a bucket's files apply them (`positions`, `kept`).
Maintenance compacts a bucket with delete files into one data file and drops them.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from ..storage import atomic_puts, filesystem
from .files import data_path

PATH_ID, POS_ID = 2147483546, 2147483545   # the spec's reserved field ids
SCHEMA = pa.schema([pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(PATH_ID)}),
                    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID)})])


def is_delete(data_file: DataFile) -> bool:
    return data_file.content == DataFileContent.POSITION_DELETES


def write(location: str, spec_id: int, bucket: int, rows: Mapping[str, Iterable[int]]) -> DataFile:
    """One position-delete file of `bucket`: per data file path (as its manifest entry names it),
    the row positions it deletes. Rows are sorted by path, then position, as the spec requires."""
    paths = sorted(rows)
    columns: tuple[list[str], list[np.ndarray]] = ([], [])
    for p in paths:
        positions = np.unique(np.fromiter(rows[p], dtype=np.int64))
        columns[0].extend([p] * len(positions))
        columns[1].append(positions)
    table = pa.Table.from_arrays([pa.array(columns[0], pa.string()), pa.array(np.concatenate(columns[1]))],
                                 schema=SCHEMA)
    uri = data_path(location, bucket, f"deletes-{uuid.uuid4().hex}")
    fs, path = filesystem(uri)
    if not atomic_puts(fs):   # a local disk: the bucket's directory may not exist yet
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, path, filesystem=fs, compression="zstd")
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=uri, file_format=FileFormat.PARQUET,
        partition=Record(bucket), record_count=table.num_rows, file_size_in_bytes=fs.get_file_info(path).size,
        # Path bounds: a reader opens the file only for the data files it can name.
        lower_bounds={PATH_ID: paths[0].encode()}, upper_bounds={PATH_ID: paths[-1].encode()},
        sort_order_id=None, spec_id=spec_id, equality_ids=None, key_metadata=None)


def positions(delete_files: Iterable[str]) -> dict[str, np.ndarray]:
    """Per data file path, the sorted row positions the delete files (URIs) delete."""
    files = list(delete_files)
    if not files:
        return {}

    def read(uri: str) -> pa.Table:
        fs, path = filesystem(uri)
        return pq.read_table(path, filesystem=fs, columns=["file_path", "pos"])
    with ThreadPoolExecutor(8) as pool:   # a GET each on an object store
        table = pa.concat_tables(list(pool.map(read, files)))
    out: dict[str, np.ndarray] = {}
    for p in pc.unique(table["file_path"]).to_pylist():
        out[p] = np.unique(table.filter(pc.equal(table["file_path"], p))["pos"].to_numpy())
    return out


def kept(rows: int, deleted: np.ndarray | None, offset: int = 0) -> pa.Array | None:
    """The mask of rows `offset`..`offset + rows` of a data file that no delete names (None: all)."""
    if deleted is None or not len(deleted):
        return None
    lo, hi = np.searchsorted(deleted, [offset, offset + rows])
    if lo == hi:
        return None
    mask = np.ones(rows, dtype=bool)
    mask[deleted[lo:hi] - offset] = False
    return pa.array(mask)

