"""The staged change log: Parquet files per source and table, each written atomically.

    {root}/{source}/log/{table}/...      segments of the change log
    {root}/{source}/shared/...           segments of several tables at once (`shared_segments`)
    {root}/{source}/chunks/{table}/...   dump chunks

What the files are named and hold is the staged row format (`staged`); this module writes and
lists them. A file appears complete or not at all (written to a temporary name, flushed, then
renamed; on an object store, one upload of the encoded file), so whatever a reader lists is
durable. The root may be any filesystem pyarrow writes (a path or a `file://`, `s3://`, `gs://`,
`hdfs://` URI; see `storage`). Re-staging after a crash can repeat events;
readers drop repeated positions, so duplicates are harmless.

`dblog maintain` (`staged_maintain`) removes old segments and finished dumps' chunks, and rewrites
runs of small segments as one (`write_compacted`); the replaced ones stay a while, and `segments`
leaves out any segment within another's position range, so readers read each event from one file.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .. import storage
from ..errors import DBLogError
from ..model.events import ChangeEvent
from ..model.schema import TableSchema
from ..model.staged_format import (
    COMMIT_TS,
    LOG_FIELDS,
    POSITION,
    ChunkFile,
    ChunkMeta,
    Op,
    SegmentFile,
    chunk_table,
    data_columns,
    hidden_segments,
    is_staged,
    key_columns,
    log_table,
    table_schema_of,
    temporary_name,
)
from . import shared_segments

# A segment keeps the statistics its readers use (position ranges; the newest commit time, a
# segment's age for retention) and no others: min/max of every column (before images, strings)
# was a sixth of the capture's Parquet write time, which runs beside the log reader.
SEGMENT_WRITE = {**storage.PARQUET_WRITE, "write_statistics": [POSITION, COMMIT_TS]}


def chunk_write(schema: pa.Schema) -> dict:
    """A chunk's Parquet options. Its metadata columns each hold a constant (or, in a key-list
    chunk, two values): a dictionary page and run-length indices, which zstd only spends time on,
    and whose statistics nothing reads but a warehouse form's `_dblog_*` (a data file's metrics).
    The table's columns keep both. A 20,000-row chunk of the bench table in the warehouse form:
    8.1 -> 7.1 ms of CPU to write, the same size (docs/performance.md).

    A key of one column has no repeated value in a chunk, so its dictionary is only ever given up
    on: it is written plainly (the bench table's chunk 6.1 -> 5.7 ms, its key column a third smaller)."""
    data = set(data_columns(schema.names))
    key = key_columns(schema)
    unique = key[0] if len(key) == 1 else None
    leaves = [(f.name, path) for f in schema for path in _leaves(f.name, f.type)]
    return {**storage.PARQUET_WRITE, "compression": {path: "zstd" if name in data else "none" for name, path in leaves},
            "write_statistics": [path for name, path in leaves if name in data or name.startswith("_dblog_")],
            "use_dictionary": [path for name, path in leaves if name != unique]}


def _leaves(path: str, t: pa.DataType):
    """The Parquet column paths of a field (what Parquet's per-column options name): a list's
    values are `path.list.element`, a struct's fields `path.name`, a map's `path.key_value.key`
    and `.value`."""
    if pa.types.is_struct(t):
        for f in t:
            yield from _leaves(f"{path}.{f.name}", f.type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaves(f"{path}.list.element", t.value_type)
    elif pa.types.is_map(t):
        yield from _leaves(f"{path}.key_value.key", t.key_type)
        yield from _leaves(f"{path}.key_value.value", t.item_type)
    else:
        yield path


def table_dir_name(table: str) -> str:
    """A table name as one path component: `%`, `/` and a leading `.` are %-escaped, so any name a
    database allows stays inside its directory (and ordinary names are unchanged)."""
    name = table.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
    return "%2E" + name[1:] if name.startswith(".") else name


class StagingError(DBLogError, RuntimeError):
    """The staged log cannot be written (read-only, full, unreachable): the environment, not the
    input. The message names the place and the fix; what was staged before stays valid."""


def table_from_dir(name: str) -> str:
    """The inverse of `table_dir_name`."""
    return unquote(name)


def hidden_paths(names: dict[str, SegmentFile]) -> set[str]:
    """The segments readers leave out (`staged.hidden_segments`), by path; a member of a shared
    segment is left out too beside a file of the same range (a compaction of it alone)."""
    hidden = hidden_segments(names.values())
    own = {name for path, name in names.items() if parse_member(path) is None}
    return {p for p, n in names.items() if n in hidden or (n in own and parse_member(p) is not None)}


def _first_position(path: str) -> str:
    try:
        return SegmentFile.parse(path).first
    except ValueError:   # not a segment: first, in the order given
        return ""


def member_ref(container: str, member: shared_segments.Member) -> str:
    """How readers name a table's segment inside a shared segment: the shared file, then what a
    segment of the table's own directory would be named (so `SegmentFile.parse` reads its range)."""
    return f"{container}#{table_dir_name(member.table).replace('#', '%23')}/{SegmentFile(member.first, member.last).name}"


def parse_member(ref: str) -> tuple[str, str] | None:
    """(shared file, table) of a member's name; None for a file of its own."""
    container, sep, rest = ref.rpartition("#")
    if not sep or not shared_segments.is_shared(container) or rest.count("/") != 1:
        return None
    return container, table_from_dir(rest.partition("/")[0])


@dataclass(frozen=True)
class StagedFile:
    """A staged file as a listing shows it: a log segment (`dump_id` None) or a dump's chunk."""
    path: str
    table: str
    size: int
    mtime: float                 # unix seconds it was written (an object store's upload time)
    dump_id: str | None = None


@dataclass(frozen=True)
class ChunkInfo:
    """A staged chunk file as its footer and first row tell (`StagedLog.chunk_infos`)."""
    path: str
    meta: ChunkMeta | None       # None: a chunk without rows
    rows: int
    schema: pa.Schema


@dataclass
class StagedLog:
    root: str

    def __post_init__(self) -> None:
        self.fs, self.base = storage.filesystem(self.root)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.direct = storage.atomic_puts(self.fs)
        self._members: dict[str, list[shared_segments.Member]] = {}   # shared file -> its members (files never change)

    # -- paths --------------------------------------------------------------------------------
    def log_dir(self, source: str, table: str) -> str:
        return f"{self.base}/{source}/log/{table_dir_name(table)}"

    def shared_dir(self, source: str) -> str:
        return f"{self.base}/{source}/{shared_segments.SHARED}"

    def chunk_dir(self, source: str, table: str, dump_id: str) -> str:
        return f"{self.base}/{source}/chunks/{table_dir_name(table)}/{dump_id}"

    # -- writing -------------------------------------------------------------------------------
    def write_segment(self, source: str, schema: TableSchema, events: Sequence[ChangeEvent]) -> str:
        """Stage events of one table, in log order (`staged_format.log_table`); returns the file path."""
        return self.write_log_table(source, schema.name, log_table(schema, events))

    def write_log_table(self, source: str, table: str, rows: pa.Table) -> str:
        """Stage a table's events already in the staged row format (`log_table`'s output)."""
        positions = rows.column(POSITION)
        name = SegmentFile(pc.min(positions).as_py(), pc.max(positions).as_py()).name
        path = f"{self.log_dir(source, table)}/{name}"
        self._atomic_write(path, rows, SEGMENT_WRITE)
        return path

    def write_shared(self, source: str, parts: dict[str, pa.Table]) -> dict[str, str]:
        """Stage several tables' events (each `log_table`'s output) as one shared segment; returns
        each table's member name (`member_ref`)."""
        container, index = shared_segments.encode(parts, SEGMENT_WRITE)
        path = f"{self.shared_dir(source)}/{SegmentFile(*shared_segments.span(container)).name}"
        self._atomic_write(path, container, shared_segments.CONTAINER_WRITE)
        self._members[path] = index
        return {m.table: member_ref(path, m) for m in index}

    def write_chunk(self, source: str, schema: TableSchema, meta: ChunkMeta, rows: list[tuple] | pa.Table,
                    ops: list[Op] | Op, shape: Callable[[pa.Table], pa.Table] | None = None) -> str:
        """Stage a chunk: its rows (tuples in schema column order, or a table: `staged.chunk_table`),
        an op per row (or one for all); `shape`: the chunk's table in the form it is written in
        (`warehouse.adoption.warehouse_form`)."""
        path = self.chunk_path(source, schema.name, meta.dump_id, meta.chunk)
        table = chunk_table(schema, meta, rows, ops)
        table = table if shape is None else shape(table)
        self._atomic_write(path, table, chunk_write(table.schema))
        return path

    def chunk_path(self, source: str, table: str, dump_id: str, number: int) -> str:
        return f"{self.chunk_dir(source, table, dump_id)}/{ChunkFile(dump_id, number).name}"

    def _put(self, path: str, table: pa.Table, options: dict = storage.PARQUET_WRITE) -> None:
        """One object in one upload, encoded in full first. An upload ended by an exception still
        completes (pyarrow has no abort), so what it left under `path` is deleted."""
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, **{"compression": "zstd", **options})
        data = buffer.getvalue()
        try:
            with self.fs.open_output_stream(path) as out:
                out.write(data)
        except BaseException:
            try:
                self.fs.delete_file(path)
            except OSError:
                pass
            raise

    def write_compacted(self, source: str, table: str, data: pa.Table) -> str:
        """Stage events of several segments as one (sorted, each position once: `dedupe_sorted`),
        named by its first and last position; returns the file path."""
        positions = data.column(POSITION)
        name = SegmentFile(pc.min(positions).as_py(), pc.max(positions).as_py()).name
        path = f"{self.log_dir(source, table)}/{name}"
        self._atomic_write(path, data, SEGMENT_WRITE)
        return path

    def delete(self, paths: list[str]) -> None:
        """Remove staged files (one already gone is no error), and, on a filesystem that has
        directories, the dump and table directories of chunks left empty (merges list those).
        A shared segment goes when all of its members are among `paths`; otherwise it stays
        whole (never rewritten: the retention plan removes members only a whole file at a time,
        `retention.plan`, and a member kept by a file that stays is hidden behind its table's
        compacted segment)."""
        shared: dict[str, set[str]] = {}
        for path in paths:
            if (member := parse_member(path)) is not None:
                shared.setdefault(member[0], set()).add(member[1])
        whole = []
        for container, tables in shared.items():
            index = self._members.get(container) or self._read_members(container)
            if index is not None and {m.table for m in index} <= tables:
                self._members.pop(container, None)
                whole.append(container)
        targets = [*whole, *(p for p in paths if parse_member(p) is None)]
        if whole:   # in log order (a shared file at its first position): cut short, each table's log stays one stretch
            targets.sort(key=_first_position)
        for path in targets:
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass
        if self.direct:
            return
        dumps = {p.rsplit("/", 1)[0] for p in paths if p.startswith(f"{self.base}/") and "/chunks/" in p[len(self.base):]}
        for directory in [*dumps, *{d.rsplit("/", 1)[0] for d in dumps}]:
            try:
                if not self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
                    self.fs.delete_dir(directory)
            except OSError:  # a chunk staged meanwhile, or gone already
                pass

    def _atomic_write(self, path: str, table: pa.Table, options: dict = storage.PARQUET_WRITE) -> None:
        directory = path.rsplit("/", 1)[0]
        tmp = f"{directory}/{temporary_name()}"
        try:
            if not self.direct:  # an object store has no directories to make
                self.fs.create_dir(directory, recursive=True)
            if self.local:
                with open(tmp, "wb") as f:
                    pq.write_table(table, f, **{"compression": "zstd", **options})
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                dir_fd = os.open(directory, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            elif self.direct:
                self._put(path, table, options)
            else:
                with self.fs.open_output_stream(tmp) as out:
                    pq.write_table(table, out, **{"compression": "zstd", **options})
                self.fs.move(tmp, path)
        except OSError as exc:  # read-only, disk full, quota, a store that refuses: say so, not a traceback
            try:  # a half-written temporary file would only take space (readers never list it)
                self.fs.delete_file(tmp)
            except OSError:
                pass
            # pyarrow's own errors spell the path again; their "[errno N] reason" is what tells.
            detail = re.search(r"\[errno \d+\] (.+?)\.?$", str(exc).strip())
            reason = detail.group(1) if detail else exc.strerror or str(exc).strip() or type(exc).__name__
            raise StagingError(f"cannot write the staged log at {directory}: {reason}. Fix: make {self.base} "
                               "writable by this user and free space on its disk (DBLOG_STAGING names "
                               "it); what was staged before is intact.") from exc

    # -- reading -------------------------------------------------------------------------------
    def _files(self, directory: str, recursive: bool = False) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True, recursive=recursive))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File and is_staged(i.base_name))

    def tables(self, source: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{source}/log", allow_not_found=True))
        own = {table_from_dir(i.base_name) for i in infos if i.type == pafs.FileType.Directory}
        return sorted(own | self.shared_members(source).keys())

    def shared_members(self, source: str) -> dict[str, list[str]]:
        """Per table, its segments inside shared segments (`member_ref` names): one listing, and
        each shared file's footer read once by this object."""
        paths = self._files(self.shared_dir(source))
        listed, prefix = set(paths), f"{self.shared_dir(source)}/"
        for gone in [p for p in list(self._members) if p.startswith(prefix) and p not in listed]:
            self._members.pop(gone, None)   # removed by maintenance: a long-running reader forgets it
        unknown = [p for p in paths if p not in self._members]
        if unknown:
            with ThreadPoolExecutor(8) as pool:   # a GET each on an object store
                for path, index in zip(unknown, pool.map(self._read_members, unknown)):
                    if index is not None:
                        self._members[path] = index
        out: dict[str, list[str]] = {}
        for path in paths:
            for member in self._members.get(path, ()):
                out.setdefault(member.table, []).append(member_ref(path, member))
        return out

    def _read_members(self, path: str) -> list[shared_segments.Member] | None:
        try:
            return shared_segments.members(self.fs, path)
        except FileNotFoundError:   # removed since listed
            return None

    def segments(self, source: str, table: str, low: str | None = None, high: str | None = None,
                 after: str | None = None) -> list[str]:
        """Segments that may hold positions in [low, high], or in (after, high] (pruned by their
        names): files of the table's own, and its members of shared segments. A segment within
        another's range is left out (`staged.hidden_segments`): a compaction's inputs stay a while
        for readers that listed them before it."""
        own = self._files(self.log_dir(source, table))
        names = {path: SegmentFile.parse(path) for path in [*own, *self.shared_members(source).get(table, ())]}
        hidden = hidden_paths(names)
        out = []
        for path, name in names.items():
            if path not in hidden and (low is None or name.last >= low) and (after is None or name.last > after) \
                    and (high is None or name.first <= high):
                out.append(path)
        return sorted(out, key=lambda p: (names[p].first, names[p].last))   # own files and members in log order

    def last_schema(self, source: str, table: str) -> TableSchema | None:
        """The schema the table was last staged with: its newest segment's, else its newest dump's
        last chunk's; None when nothing of it is staged."""
        try:
            found = self.segments(source, table)
            if found:
                return table_schema_of(self.segment_file(found[-1]).schema_arrow)
            dumps = self.chunk_dumps(source, table)
            chunks = self.chunk_files(source, table, dumps[-1]) if dumps else []
            return table_schema_of(pq.read_schema(chunks[-1], filesystem=self.fs)) if chunks else None
        except FileNotFoundError:   # removed since listed: no baseline, as for a table never staged
            return None

    def read_log(self, source: str, table: str, low: str | None = None, high: str | None = None) -> pa.Table:
        """The table's staged events with low <= position <= high, sorted, each position once."""
        try:
            parts = [self.read_segment(p) for p in self.segments(source, table, low, high)]
        except FileNotFoundError:  # removed since listed (`dblog maintain`): what replaced it is listed now
            parts = [self.read_segment(p) for p in self.segments(source, table, low, high)]
        if not parts:
            return pa.schema(LOG_FIELDS).empty_table()
        events = pa.concat_tables(parts, promote_options="permissive")  # columns added over time
        if low is not None:
            events = events.filter(pc.greater_equal(events[POSITION], low))
        if high is not None:
            events = events.filter(pc.less_equal(events[POSITION], high))
        return dedupe_sorted(events, POSITION)

    def segment_file(self, path: str) -> pq.ParquetFile:
        """A segment (its own file, or a member of a shared one) opened for its footer and rows;
        FileNotFoundError when it is gone."""
        member = parse_member(path)
        if member is not None:
            return shared_segments.member_file(self.fs, *member)
        return pq.ParquetFile(path, filesystem=self.fs)

    def read_segment(self, path: str) -> pa.Table:
        """A segment's events, whichever file holds them."""
        if parse_member(path) is None:
            return pq.read_table(path, filesystem=self.fs)
        return self.segment_file(path).read()

    def chunk_dumps(self, source: str, table: str) -> list[str]:
        """The ids of the dumps that staged chunks of `table` (one listing of directory names)."""
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{source}/chunks/{table_dir_name(table)}",
                                                        allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def chunk_files(self, source: str, table: str, dump_id: str | None = None) -> list[str]:
        if dump_id is not None:
            return self._files(self.chunk_dir(source, table, dump_id))
        return self._files(f"{self.base}/{source}/chunks/{table_dir_name(table)}", recursive=True)

    def staged_chunk(self, source: str, table: str, dump_id: str, number: int) -> pa.Table | None:
        """Chunk `number` of a dump's table; None when no such file is staged."""
        path = self.chunk_path(source, table, dump_id, number)
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        return self.read_chunk(path)

    def read_chunk(self, path: str) -> pa.Table:
        return pq.read_table(path, filesystem=self.fs)

    def chunk_infos(self, paths: list[str]) -> list[ChunkInfo]:
        """What each chunk file says of itself, in order: its footer (a GET or two each on an
        object store, 8 at once), or, for a file staged before footers carried `ChunkMeta`, its
        metadata columns' first value as well."""
        wanted = {f"_{f.name}" for f in fields(ChunkMeta)}

        def read(path: str) -> ChunkInfo:
            with self.fs.open_input_file(path) as handle:
                f = pq.ParquetFile(handle)
                schema = f.schema_arrow
                if f.metadata.num_rows == 0:
                    return ChunkInfo(path, None, 0, schema)
                meta = ChunkMeta.of_footer(schema)
                if meta is None:
                    first = f.read_row_group(0, columns=[n for n in schema.names if n in wanted]).slice(0, 1)
                    meta = ChunkMeta.of(first)
                return ChunkInfo(path, meta, f.metadata.num_rows, schema)
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(read, paths))

    def inventory(self, source: str) -> list[StagedFile]:
        """Every staged file of the source, with its size and age: one recursive listing (and the
        footer of each shared segment this object has not read yet). A shared segment is listed
        as its members, each a segment of its table, of its file's age."""
        prefix = f"{self.base}/{source}/"
        infos = self.fs.get_file_info(pafs.FileSelector(prefix.rstrip("/"), allow_not_found=True, recursive=True))
        out: list[StagedFile] = []
        for i in infos:
            parts = i.path[len(prefix):].split("/")
            if i.type != pafs.FileType.File or not is_staged(i.base_name) or len(parts) < 2:
                continue
            mtime = (i.mtime_ns or 0) / 1e9
            if parts[0] == shared_segments.SHARED and len(parts) == 2:
                index = self._members.get(i.path) or self._read_members(i.path) or []
                self._members[i.path] = index
                out.extend(StagedFile(member_ref(i.path, m), m.table, m.size, mtime) for m in index)
            elif parts[0] == "log" and len(parts) == 3:
                out.append(StagedFile(i.path, table_from_dir(parts[1]), i.size or 0, mtime))
            elif parts[0] == "chunks" and len(parts) == 4:
                out.append(StagedFile(i.path, table_from_dir(parts[1]), i.size or 0, mtime, parts[2]))
        return sorted(out, key=lambda f: f.path)

    def chunk_tables(self, source: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{source}/chunks", allow_not_found=True))
        return sorted(table_from_dir(i.base_name) for i in infos if i.type == pafs.FileType.Directory)


def dedupe_sorted(table: pa.Table, column: str) -> pa.Table:
    """Sort by `column` and keep the first row of each value (re-staged duplicates are equal)."""
    if table.num_rows == 0:
        return table
    table = table.sort_by(column)
    col = table[column].combine_chunks()
    if table.num_rows > 1:
        same = pc.equal(col.slice(1), col.slice(0, len(col) - 1))
        keep = pa.concat_arrays([pa.array([True]), pc.invert(same)])
        table = table.filter(keep)
    return table
