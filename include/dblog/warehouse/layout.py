"""Warehouse tables on a POSIX filesystem: immutable versions behind an atomically swapped link.

    {root}/{source}/{table}/current -> versions/v0000000007      <- what users read
    {root}/{source}/{table}/versions/v0000000007/
        _manifest.json                 buckets, schema, what has been merged (hidden from Spark)
        b-<uuid>.parquet ...           live rows, one or more files per key-range bucket
        _tombstones/t-<uuid>.parquet   deleted keys with their position (hidden from Spark)

A merge rewrites only the buckets its keys fall in; the other buckets' files are hard links
to the previous version's. The new version is complete on disk before `current` moves, so a
reader (or a merge killed with -9) sees the old version or the new one, never a mixture.
Spark ignores names starting with `_` or `.`, so `spark.read.parquet(".../current")` reads
exactly the live rows. Old versions stay for `keep_s` seconds for readers still using them.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..settings import settings
from ..staging import table_dir_name, table_from_dir

MANIFEST = "_manifest.json"
TOMBSTONES = "_tombstones"
FORMAT = 1
# A live row's columns whose value nothing proved yet (null meanwhile; a repair re-reads the row).
MISSING = "_dblog_missing"


def missing_rows(path: str) -> int:
    """Rows of a warehouse file that list columns in MISSING."""
    schema = pq.read_schema(path)
    if MISSING not in schema.names:
        return 0
    lengths = pc.list_value_length(pq.read_table(path, columns=[MISSING]).column(MISSING))
    return int(pc.sum(pc.fill_null(pc.greater(lengths, 0), False)).as_py() or 0)


def missing_keys(path: str, key: list[str]) -> list[tuple[tuple, list[str]]]:
    """(key, columns) of each row of a warehouse file with values nothing proved yet."""
    if MISSING not in pq.read_schema(path).names:
        return []
    data = pq.read_table(path, columns=[*key, MISSING]).to_pylist()
    return [(tuple(r[k] for k in key), r[MISSING]) for r in data if r[MISSING]]


@dataclass
class Bucket:
    lo: list[str] | None          # inclusive lower key bound (Spark's string form per key column)
    files: list[str] = field(default_factory=list)
    tombstones: list[str] = field(default_factory=list)
    rows: int = 0
    tombstone_rows: int = 0
    missing_rows: int = 0         # live rows with a value nothing proved yet (`_dblog_missing`), awaiting repair


@dataclass
class Manifest:
    source: str
    table: str
    key: list[str]
    columns: list[list[str]]                       # [name, Spark type], in warehouse order
    buckets: list[Bucket] = field(default_factory=list)
    log_upto: str | None = None                    # every staged event <= this is merged
    chunks: dict[str, list[list[int]]] = field(default_factory=dict)  # dump id -> merged ranges
    version: int = 0
    merged_at: float | None = None
    format: int = FORMAT

    @classmethod
    def from_json(cls, data: dict) -> "Manifest":
        if data.get("format") != FORMAT:
            raise ValueError(f"warehouse manifest format {data.get('format')} is not {FORMAT}; "
                             "this dblog is older or newer than the one that wrote the table")
        data = dict(data, buckets=[Bucket(**b) for b in data["buckets"]])
        return cls(**data)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.buckets)

    @property
    def missing_rows(self) -> int:
        return sum(b.missing_rows for b in self.buckets)

    def chunk_merged(self, dump_id: str, chunk: int) -> bool:
        return any(lo <= chunk <= hi for lo, hi in self.chunks.get(dump_id, []))

    def add_chunks(self, dump_id: str, numbers: set[int]) -> None:
        merged = {n for lo, hi in self.chunks.get(dump_id, []) for n in range(lo, hi + 1)} | numbers
        self.chunks[dump_id] = to_ranges(merged)


def to_ranges(numbers: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Warehouse:
    def __init__(self, root: str, keep_s: float | None = None):
        if "://" in root and not root.startswith("file://"):
            raise ValueError(f"warehouse root {root!r}: the warehouse needs a POSIX filesystem path "
                             "(local disk or a shared mount such as NFS), for links and atomic renames")
        self.root = os.path.abspath(root.removeprefix("file://"))
        self.keep_s = settings().warehouse.keep_seconds if keep_s is None else keep_s

    def table_dir(self, source: str, table: str) -> str:
        return os.path.join(self.root, source, table_dir_name(table))

    def current_path(self, source: str, table: str) -> str:
        """The path users read (`spark.read.parquet(...)`); a link that moves on every merge."""
        return os.path.join(self.table_dir(source, table), "current")

    def version_path(self, source: str, table: str) -> str | None:
        """The current version's directory, resolved: stable for a long-running reader."""
        link = self.current_path(source, table)
        return os.path.realpath(link) if os.path.islink(link) else None

    def tables(self, source: str) -> list[str]:
        base = os.path.join(self.root, source)
        if not os.path.isdir(base):
            return []
        return sorted(table_from_dir(t) for t in os.listdir(base) if os.path.islink(os.path.join(base, t, "current")))

    def manifest(self, source: str, table: str) -> Manifest | None:
        version = self.version_path(source, table)
        if version is None:
            return None
        with open(os.path.join(version, MANIFEST)) as f:
            return Manifest.from_json(json.load(f))

    def table_summary(self, source: str, table: str) -> dict | None:
        """What a status page shows of the current version, from its manifest alone (no data file
        is opened). None when the table has no version yet."""
        manifest = self.manifest(source, table)
        if manifest is None:
            return None
        return {"table": table, "version": manifest.version, "merged_at": manifest.merged_at,
                "rows": manifest.rows, "tombstones": sum(b.tombstone_rows for b in manifest.buckets),
                "buckets": len(manifest.buckets), "log_upto": manifest.log_upto,
                "missing_rows": manifest.missing_rows}

    def files(self, source: str, table: str, manifest: Manifest, tombstones: bool = False,
              buckets: list[int] | None = None) -> list[str]:
        """Paths of the current version's files (of `buckets` only, when given)."""
        version = self.version_path(source, table)
        if version is None:
            raise FileNotFoundError(f"{source}.{table} has no current version in {self.root}")
        chosen = manifest.buckets if buckets is None else [manifest.buckets[i] for i in buckets]
        out = [os.path.join(version, f) for b in chosen for f in b.files]
        if tombstones:
            out += [os.path.join(version, TOMBSTONES, f) for b in chosen for f in b.tombstones]
        return out

    def keys(self, source: str, table: str) -> list[tuple]:
        """The keys of the current version's live rows (empty before the first merge)."""
        manifest = self.manifest(source, table)
        if manifest is None:
            return []
        out: list[tuple] = []
        for f in self.files(source, table, manifest):
            data = pq.read_table(f, columns=manifest.key)
            out.extend(zip(*(data.column(k).to_pylist() for k in manifest.key)))
        return out

    def read(self, source: str, table: str, columns: list[str]) -> pa.Table | None:
        """The live rows of the current version (pyarrow, no Spark); columns the warehouse does
        not have are null. None when the table has no version yet."""
        manifest = self.manifest(source, table)
        if manifest is None:
            return None
        parts = [pq.read_table(f) for f in self.files(source, table, manifest)]
        data = pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
        for c in columns:
            if c not in data.column_names:
                data = data.append_column(c, pa.nulls(data.num_rows))
        return data.select(columns)

    # -- writing a version ----------------------------------------------------------------------
    def scratch(self, source: str, table: str) -> str:
        """A fresh directory for a merge's Spark output (removed by `commit` or `clean`)."""
        path = os.path.join(self.table_dir(source, table), f".spark-{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def commit(self, manifest: Manifest, new_files: dict[str, str], carried_from: str | None) -> str:
        """Publish a version: `new_files` (name in version -> file to move in) plus hard links of
        every other file the manifest names, from the previous version. Returns the version dir."""
        table_dir = self.table_dir(manifest.source, manifest.table)
        versions = os.path.join(table_dir, "versions")
        os.makedirs(versions, exist_ok=True)
        existing = [int(v[1:]) for v in os.listdir(versions) if v.startswith("v")]
        manifest.version = max(existing + [manifest.version]) + 1
        manifest.merged_at = time.time()
        tmp = os.path.join(versions, f".tmp-{uuid.uuid4().hex}")
        os.makedirs(os.path.join(tmp, TOMBSTONES))
        for name, src in new_files.items():
            _fsync(src)
            os.replace(src, os.path.join(tmp, name))
        for b in manifest.buckets:
            for name in b.files + [f"{TOMBSTONES}/{t}" for t in b.tombstones]:
                if name not in new_files:
                    if carried_from is None:
                        raise ValueError(f"{name} is neither new nor in a previous version")
                    os.link(os.path.join(carried_from, name), os.path.join(tmp, name))
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(asdict(manifest), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync(os.path.join(tmp, TOMBSTONES))
        _fsync(tmp)
        final = os.path.join(versions, f"v{manifest.version:010d}")
        os.rename(tmp, final)
        _fsync(versions)
        link = os.path.join(table_dir, f".current-{uuid.uuid4().hex}")
        os.symlink(os.path.relpath(final, table_dir), link)
        os.replace(link, os.path.join(table_dir, "current"))  # the commit point
        _fsync(table_dir)
        return final

    def clean(self, source: str, table: str) -> None:
        """Remove what crashed merges left and versions older than `keep_s` (never the current one
        or its predecessor). Call only under the table's merge lock."""
        table_dir = self.table_dir(source, table)
        if not os.path.isdir(table_dir):
            return
        for name in os.listdir(table_dir):
            if name.startswith((".spark-", ".current-")):
                path = os.path.join(table_dir, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        versions = os.path.join(table_dir, "versions")
        current = self.version_path(source, table)
        names = sorted(os.listdir(versions)) if os.path.isdir(versions) else []
        published = [os.path.join(versions, n) for n in names if n.startswith("v")]
        now = time.time()
        for name in names:
            if name.startswith(".tmp-"):
                shutil.rmtree(os.path.join(versions, name), ignore_errors=True)
        for path, successor in zip(published, published[1:] + [None]):
            if current is None or path == current:
                continue
            if path > current:  # published, but the link never moved to it
                shutil.rmtree(path, ignore_errors=True)
            elif successor is not None and successor <= current and now - os.stat(successor).st_mtime > self.keep_s:
                shutil.rmtree(path, ignore_errors=True)  # superseded long enough ago
