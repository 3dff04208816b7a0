"""Table maintenance (`dblog maintain`, DAG `dblog_maintenance`): per table, under its merge lease.

1. Expire snapshots older than the keep window (pyiceberg), never a branch head nor the snapshot
   whose `dblog.*` summary records what was merged.
2. Compact a bucket holding more than `compact_min_files` files on main (or tombstone files on the
   branch), or position delete files (`deletes`), into one file sorted by the key, committed with the same `dblog.*` state: rows and
   state are unchanged, readers see one snapshot more.
3. Sweep: pyiceberg deletes no file on expiry, and a killed merge leaves files no snapshot
   references. Every file under the table's location that the table no longer reaches and that
   is older than the grace is deleted (a running merge's files are young and unreferenced; a first
   load's adopted chunk files are touched when linked, `adoption.copy_in`).

A table's change table (`change_tables`) loses the days older than the staged log's retention,
then is expired and swept the same way.

The merge lease serializes maintenance with merges of the same table: the sweep never sees a
merge's files between their write and its commit, and a compaction never races a merge's commit.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import schema_to_pyarrow

from ..coordination import store as paths
from ..errors import DBLogError
from ..settings import settings
from ..storage import PARQUET_WRITE, atomic_puts, filesystem
from . import change_tables, deletes, history
from .catalog import BRANCH
from .commit import Pending, WrittenFile, data_files, overwrite
from .files import data_path
from .types import BUCKET

MAIN = "main"


class MaintenanceError(DBLogError, RuntimeError):
    """Maintenance of a table could not run or refused to change it (the reason says which)."""


@dataclass
class MaintenanceReport:
    source: str
    table: str
    snapshots_expired: int = 0
    buckets_compacted: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    seconds: float = 0.0
    dry_run: bool = False

    def line(self) -> str:
        """What `dblog maintain` and the task log print for the table."""
        expire, compact, remove = ("would expire", "compact", "remove") if self.dry_run else \
            ("expired", "compacted", "removed")
        return (f"{self.source} {self.table}: {expire} {self.snapshots_expired} snapshot(s), {compact} "
                f"{self.buckets_compacted} bucket(s), {remove} {self.files_removed} file(s) "
                f"({self.bytes_removed:,} bytes), {self.seconds:.1f}s" + (" (dry run)" if self.dry_run else ""))


@contextmanager
def merge_lease(store, source: str, table: str, timeout: float | None = None) -> Iterator[None]:
    """Hold the table's merge lease (the one `spark.job.merge_table` takes) for the block."""
    timeout = settings().merge.lock_timeout_seconds if timeout is None else timeout
    try:
        lease = store.lease(paths.merge_lock(source, table), f"{socket.gethostname()}:{os.getpid()}", timeout)
    except paths.LeaseTimeout as exc:
        raise MaintenanceError(f"a merge of {source}/{table} holds its lock for more than {timeout:.0f}s; "
                               "run the maintenance again once it finished") from exc
    try:
        yield
    finally:
        lease.release()


def maintain_source(store, warehouse, source: str, tables: list[str] | None = None,
                    lock_timeout: float | None = None, on_table: Callable[[int, int], None] | None = None,
                    **opts) -> list[MaintenanceReport]:
    """`maintain` each table of the source (default: every warehouse table), each under its lease;
    `on_table(tables done, of)` after each."""
    available = warehouse.tables(source)
    unknown = sorted(set(tables or []) - set(available))
    if unknown:
        raise MaintenanceError(f"{source} has no warehouse table {', '.join(unknown)} (it has "
                               f"{', '.join(available) or 'none yet'})")
    reports: list[MaintenanceReport] = []
    chosen = available if tables is None else tables
    for table in chosen:
        with merge_lease(store, source, table, lock_timeout):
            reports.append(maintain(warehouse, source, table, **opts))
        if on_table is not None:
            on_table(len(reports), len(chosen))
    return reports


def maintain(warehouse, source: str, table: str, *, keep_seconds: float | None = None,
             orphan_grace_seconds: float | None = None, compact_min_files: int | None = None,
             dry_run: bool = False) -> MaintenanceReport:
    """Expire, compact and sweep one table (None options: `settings().warehouse`). The
    caller holds the table's merge lease (`maintain_source` takes it). `dry_run`: count, change nothing."""
    tuned = settings().warehouse
    keep = tuned.keep_seconds if keep_seconds is None else keep_seconds
    grace = tuned.orphan_grace_seconds if orphan_grace_seconds is None else orphan_grace_seconds
    min_files = tuned.compact_min_files if compact_min_files is None else compact_min_files
    started = time.monotonic()
    t = warehouse.load(source, table)
    if t is None:
        raise MaintenanceError(f"{source} has no warehouse table {table}")
    report = MaintenanceReport(source, table, dry_run=dry_run)
    expired = expire(t, keep, dry_run)
    report.snapshots_expired = len(expired)
    report.buckets_compacted = compact(t, min_files, dry_run)
    t = warehouse.load(source, table)
    # A dry run expired nothing: leave out what the expiry would have removed.
    report.files_removed, report.bytes_removed = sweep(t, grace, dry_run, expired if dry_run else set())
    _maintain_changes(warehouse, source, table, report, keep, grace)
    report.seconds = time.monotonic() - started
    return report


def _maintain_changes(warehouse, source: str, table: str, report: MaintenanceReport, keep: float,
                      grace: float) -> None:
    """The table's change table, if it has one: days older than the staged log's retention
    deleted, then its snapshots expired and its files swept as the table's (counted with them)."""
    changes = change_tables.load(warehouse, source, table)
    if changes is None:
        return
    if not report.dry_run:
        retention = settings().retention.window_seconds
        change_tables.expire_days(changes, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=retention))
        changes = change_tables.load(warehouse, source, table)
    expired = expire(changes, keep, report.dry_run)
    report.snapshots_expired += len(expired)
    files, size = sweep(change_tables.load(warehouse, source, table), grace, report.dry_run,
                        expired if report.dry_run else set())
    report.files_removed, report.bytes_removed = report.files_removed + files, report.bytes_removed + size


# -- expiry ------------------------------------------------------------------------------------
def expire(t, keep_seconds: float, dry_run: bool, keep_snapshots: int | None = None) -> set[int]:
    """Expire the snapshots the history rule (`history`) lets go; returns their ids."""
    tuned = settings().warehouse
    keep_snapshots = tuned.keep_snapshots if keep_snapshots is None else keep_snapshots
    old = history.to_expire(t.metadata, int(time.time() * 1000), keep_seconds, keep_snapshots,
                            min(keep_seconds, tuned.keep_all_seconds))
    if old and not dry_run:
        # by ids, not older_than(): older_than would also take the state snapshot behind a foreign head
        t.maintenance.expire_snapshots().by_ids(sorted(old)).commit()
    return old


# -- compaction --------------------------------------------------------------------------------
def files_by_bucket(t, ref: str) -> dict[int, list]:
    """The ref's live DataFiles per bucket, its position delete files after them (metadata only)."""
    out: dict[int, list] = {}
    if t.snapshot_by_name(ref) is None:
        return out
    removing: dict[int, list] = {}
    for task in t.scan().use_ref(ref).plan_files():
        out.setdefault(task.file.partition[0], []).append(task.file)
        for d in task.delete_files:
            if d not in removing.setdefault(d.partition[0], []):
                removing[d.partition[0]].append(d)
    for b, found in removing.items():
        out.setdefault(b, []).extend(found)
    return out


def dblog_properties(snapshot) -> dict[str, str]:
    """The snapshot's `dblog.*` summary properties only: pyiceberg computes its own keys
    (`total-records`, …) and refuses them as properties of a new snapshot."""
    props = (snapshot.summary.additional_properties or {}) if snapshot is not None else {}
    return {k: v for k, v in props.items() if k.startswith("dblog.")}


def compact(t, min_files: int, dry_run: bool) -> int:
    """Rewrite each bucket holding more than `min_files` files on main or on the tombstone branch
    as one file per ref, one commit per bucket; returns how many buckets were (or would be) compacted."""
    refs = {ref: files_by_bucket(t, ref) for ref in (MAIN, BRANCH)}
    # (A bucket with position deletes is compacted whatever its file count: readers stop opening them.)
    due = sorted({b for files in refs.values() for b, fs in files.items()
                  if len(fs) > min_files or any(deletes.is_delete(f) for f in fs)})
    if dry_run or not due:
        return len(due)
    key = json.loads(t.properties["dblog.key"])
    state = dblog_properties(history.state_snapshot(t.metadata))
    branch_state = dblog_properties(t.snapshot_by_name(BRANCH))
    for b in due:
        tx = t.transaction()
        for ref, props in ((MAIN, state), (BRANCH, branch_state)):
            old = refs[ref].get(b, [])
            if len(old) > min_files or any(deletes.is_delete(f) for f in old):
                _swap(t, tx, ref, b, old, key, {**props, "dblog.compacted": str(b)})
        tx.commit_transaction()
    return len(due)


def _swap(t, tx, ref: str, bucket: int, old: list, key: list[str], props: dict[str, str]) -> None:
    """Stage on `tx` the overwrite of a bucket's `old` files on `ref` by one sorted file."""
    where = EqualTo(BUCKET, bucket)  # type: ignore[call-arg,arg-type]  # pydantic signature mypy misreads
    data = t.scan(row_filter=where).use_ref(ref).to_arrow()   # (position deletes applied)
    # (A delete file's records are the rows it names: dblog never names a row twice, as table_state counts.)
    expected = sum(-df.record_count if deletes.is_delete(df) else df.record_count for df in old)
    if data.num_rows != expected:   # delete files or a concurrent writer: never drop or add a row
        raise MaintenanceError(f"bucket {bucket} of {ref} reads {data.num_rows} rows but its files hold "
                               f"{expected}: not compacting it")
    new = []
    if data.num_rows:
        location = tx.table_metadata.location.rstrip("/")
        written = _write(location, bucket, ref == BRANCH, data.sort_by([(k, "ascending") for k in key]),
                         schema_to_pyarrow(tx.table_metadata.schema(), include_field_ids=True))
        new = data_files(Pending(tx, location, b""), [written])
    with overwrite(tx, ref, props) as ow:
        for df in old:
            ow.delete_data_file(df)
        for df in new:
            ow.append_data_file(df)


def _write(location: str, bucket: int, tombstone: bool, data: pa.Table, target: pa.Schema) -> WrittenFile:
    """One Parquet file of the table's current schema, with field ids (columns a branch snapshot's
    older schema lacks are null, as a scan of main shows them)."""
    columns = [data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
               for f in target]
    data = pa.Table.from_arrays(columns, names=target.names).cast(target)
    uri = data_path(location, bucket, f"compact-{uuid.uuid4().hex}" + ("-t" if tombstone else ""))
    fs, path = filesystem(uri)
    if not atomic_puts(fs):   # an object store has no directories to make
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(data, path, filesystem=fs, **PARQUET_WRITE)
    return WrittenFile(uri, bucket, tombstone, data.num_rows, 0)


# -- orphan sweep ------------------------------------------------------------------------------
def _path(uri: str) -> str:
    """A file URI as the location's filesystem lists it."""
    if "://" not in uri:
        return os.path.abspath(uri)
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return os.path.abspath(parts.path)
    if parts.scheme == "s3":
        return f"{parts.netloc}{parts.path}"
    return filesystem(uri)[1]


def reachable(t, skip: Collection[int] = ()) -> tuple[set[str], set[str]]:
    """(files a read of any retained snapshot needs, older metadata files and statistics) as
    filesystem paths; snapshots in `skip` count as expired."""
    io, metadata = t.io, t.metadata
    needed, seen = {t.metadata_location}, set()
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id in skip:
            continue
        needed.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen:   # manifests are shared between snapshots: read once
                continue
            seen.add(manifest.manifest_path)
            needed.add(manifest.manifest_path)
            needed.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    history = {e.metadata_file for e in metadata.metadata_log}
    history |= {s.statistics_path for s in [*metadata.statistics, *metadata.partition_statistics]}
    return {_path(u) for u in needed}, {_path(u) for u in history}


def sweep(t, grace_seconds: float, dry_run: bool, skip: Collection[int] = ()) -> tuple[int, int]:
    """Delete the files under the table's location the table does not reach, older than the
    grace; returns (files, bytes) deleted (or, in a dry run, that would be)."""
    fs, base = filesystem(t.metadata.location.rstrip("/"))
    needed, history = reachable(t, skip)
    if _path(t.metadata_location).rsplit("/", 2)[0] != base:   # not the layout this sweep assumes
        raise MaintenanceError(f"{t.metadata_location} is not under {t.metadata.location}/metadata: not sweeping")
    listed = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
              if i.type == pafs.FileType.File and i.path.startswith(base + "/")]
    lost = {p for p in needed if p.startswith(base + "/")} - {i.path for i in listed}
    if lost:   # a path spelled otherwise than the listing spells it must never look unreachable
        raise MaintenanceError(f"{len(lost)} file(s) the table references are not listed under {base} "
                               f"(e.g. {min(lost)}): not sweeping")
    cutoff_ns = (time.time() - grace_seconds) * 1e9
    files = size = 0
    for info in listed:
        if info.path in needed or info.path in history or info.mtime_ns is None or info.mtime_ns >= cutoff_ns:
            continue
        if not dry_run:
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                continue
        files, size = files + 1, size + (info.size or 0)
    return files, size
