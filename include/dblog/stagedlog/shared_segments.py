"""Shared segments: the small tables of one capture flush in one file.

A flush that stages events of many tables (a source of hundreds of tables with writes spread over
dozens of them) would write a file per table: on an object store a PUT each, on a disk a file and
a directory sync each, and listings that grow with them. When a flush has more small tables
(`DBLOG_CAPTURE_SHARED_SEGMENT_ROWS` events or fewer) than `DBLOG_CAPTURE_SHARED_SEGMENT_TABLES`,
the capture writes those into one shared segment:

    {root}/{source}/shared/{first}_{last}.parquet

a Parquet file with one row group per table (columns `table`, `first`, `last`, `data`), where
`data` holds the table's segment exactly as it would have been written alone (the staged row
format, as the bytes of its own Parquet file), and whose footer lists the members (`MEMBERS`).
To readers a member is one more segment of its table (`StagedLog.segments` names it
`{shared file}#{table dir}/{first}_{last}.parquet`), read like any other (`StagedLog.read_segment`,
Spark's `dblog_parquet` source). `dblog maintain` compacts members into their tables' own
segments, which hide them; a shared file is never rewritten, and goes whole once every member of
it may go (`retention.plan` keeps a table's segments that would leave part of one behind).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..model.staged_format import POSITION, SUFFIX

SHARED = "shared"                   # the directory beside `log` and `chunks`
MEMBERS = b"dblog.members"          # footer key: JSON list of [table, first, last, bytes]
# One row group per member, so a reader fetches its table's bytes only; `data` is compressed already.
CONTAINER_WRITE = {"row_group_size": 1, "use_dictionary": False, "write_statistics": False}


@dataclass(frozen=True)
class Member:
    table: str
    first: str
    last: str
    size: int            # bytes of its segment


def encode(parts: dict[str, pa.Table], segment_write: dict) -> tuple[pa.Table, list[Member]]:
    """The shared segment of these tables' events (each in the staged row format), and its members."""
    members, data = [], []
    for table in sorted(parts):
        out = pa.BufferOutputStream()
        pq.write_table(parts[table], out, compression="zstd", **segment_write)
        blob = out.getvalue()
        positions = parts[table].column(POSITION)
        members.append(Member(table, pc.min(positions).as_py(), pc.max(positions).as_py(), blob.size))
        data.append(blob.to_pybytes())
    return _container(members, data), members


def _container(members: list[Member], data: list[bytes]) -> pa.Table:
    index = json.dumps([[m.table, m.first, m.last, m.size] for m in members]).encode()
    return pa.table({"table": [m.table for m in members], "first": [m.first for m in members],
                     "last": [m.last for m in members], "data": pa.array(data, pa.binary())}
                    ).replace_schema_metadata({MEMBERS: index})


def span(container: pa.Table) -> tuple[str, str]:
    """The first and last position a shared segment holds (its name)."""
    return pc.min(container["first"]).as_py(), pc.max(container["last"]).as_py()


def members(fs: pafs.FileSystem, path: str) -> list[Member]:
    """A shared segment's members, from its footer."""
    meta = pq.read_schema(path, filesystem=fs).metadata or {}
    return [Member(*entry) for entry in json.loads(meta.get(MEMBERS, b"[]"))]


def member_file(fs: pafs.FileSystem, path: str, table: str) -> pq.ParquetFile:
    """The segment of `table` a shared segment holds; FileNotFoundError when it holds none (any
    more: maintenance rewrote it without)."""
    with fs.open_input_file(path) as handle:
        f = pq.ParquetFile(handle)
        names = [m[0] for m in json.loads((f.schema_arrow.metadata or {}).get(MEMBERS, b"[]"))]
        if table not in names:
            raise FileNotFoundError(f"{path} holds no segment of {table}")
        blob = f.read_row_group(names.index(table), columns=["data"]).column(0)[0].as_buffer()
    return pq.ParquetFile(pa.BufferReader(blob))


def is_shared(path: str) -> bool:
    return f"/{SHARED}/" in path and path.endswith(SUFFIX)
