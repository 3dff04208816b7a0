"""`dblog maintain` for a source's staged log: retention, compaction, finished dumps (the rules:
`retention`), and what `dblog status` and the DBLog page show of the log's size.

One run, under the source's staged-log lease (`state.staged_maintenance_lock`; a second
maintenance waits for it), reads what the rules need: ZooKeeper's dumps first, then one listing
of the source's files (so a dump registered in between can only look like a younger, unmerged
chunk directory, which stays), the capture checkpoint, each table's merge state, the watermark
positions, each chunk's watermark ids. Then, unless a dry run:

1. expired dumps go: their chunk files, then their ZooKeeper nodes (a run cut short in between
   leaves chunk files the next run finds unregistered and removes);
2. segments past retention go, with the hidden ones within them, and the watermark index's
   entries before the last watermark removed (`watermark_index.forget_before`: no chunk that stays
   needs them);
3. each run of small segments is rewritten as one (`compact`); the inputs stay, hidden;
4. hidden segments whose container is older than the grace go.

Nothing here waits for a merge: a merge lists only segments at or after its chunks' LW and its
last merged position, which the horizon keeps, and reads a compaction's inputs for at most the
grace. A reader of the watermark log that lists a segment just removed lists again
(`StagedLog.read_log`).
"""
from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from ..coordination import store as paths
from ..coordination import unlogged, watermark_index
from ..coordination.checkpoint import checkpoint_position
from ..coordination.watermark_index import staged_positions
from ..errors import DBLogError
from ..model.staged_format import COMMIT_TS, POSITION, ChunkFile
from ..settings import settings
from ..snapshot.dump import CANCELLED, DONE, FAILED, dump_status
from ..sources.base import WATERMARK_TABLE
from ..stagedlog import whole_tables
from ..stagedlog.retention import (
    DumpLife,
    Listing,
    RetentionPlan,
    Segment,
    Snapshot,
    StagedChunk,
    TableLog,
    compaction_groups,
    least_run,
    plan,
    replaced,
)
from ..stagedlog.staged_log import StagedFile, StagedLog, dedupe_sorted, parse_member

ENDED = (DONE, CANCELLED, FAILED, "unknown")  # dump_status states of a dump no worker is running ("unknown": no control node)


class StagedMaintenanceError(DBLogError, RuntimeError):
    """The staged log of a source cannot be maintained now (the reason says why)."""


@dataclass
class StagedLogReport:
    source: str
    segments_removed: int = 0
    dumps_removed: int = 0
    chunk_files_removed: int = 0
    segments_compacted: int = 0     # small segments rewritten ...
    compacted_into: int = 0         # ... as this many
    replaced_removed: int = 0       # compaction inputs removed after the grace
    bytes_removed: int = 0
    files: int = 0                  # the staged log afterwards: files, bytes, oldest retained position
    bytes: int = 0
    oldest: str | None = None
    unmerged: list[str] = field(default_factory=list)  # finished dumps past the window kept: chunks not merged
    held: list[str] = field(default_factory=list)      # ... kept while the log before their chunks is
    unfinished: list[str] = field(default_factory=list)  # running or paused longer than the window: they hold the log
    seconds: float = 0.0
    dry_run: bool = False

    def line(self) -> str:
        """What `dblog maintain` and the task log print for the source."""
        remove, compact = ("would remove", "compact") if self.dry_run else ("removed", "compacted")
        out = (f"{self.source} staged log: {remove} {self.segments_removed} segment(s) past retention and "
               f"{self.dumps_removed} finished dump(s) ({self.chunk_files_removed} chunk file(s)), {compact} "
               f"{self.segments_compacted} segment(s) into {self.compacted_into}, {remove} {self.replaced_removed} "
               f"replaced segment(s), {size_text(self.bytes_removed)} freed; now {self.files} file(s), "
               f"{size_text(self.bytes)}, oldest retained position {self.oldest or '-'}, {self.seconds:.1f}s")
        if self.unmerged:
            out += f"; kept until merged: dump(s) {', '.join(self.unmerged)}"
        if self.held:
            out += f"; kept while the retained log reaches their chunks: dump(s) {', '.join(self.held)}"
        if self.unfinished:
            out += (f"; dump(s) {', '.join(self.unfinished)} began longer ago than the retention window and may "
                    "still stage chunks: their tables' log is kept since they began (cancel a dump nobody resumes)")
        return out + (" (dry run)" if self.dry_run else "")


def size_text(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:,.0f} {unit}" if unit == "bytes" else f"{value:,.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


# -- what the log holds now (dblog status, the DBLog page) --------------------------------------------
@dataclass
class StagedUsage:
    files: int = 0
    bytes: int = 0
    segments: int = 0
    chunk_files: int = 0
    oldest: str | None = None   # the oldest position any table's retained log holds (watermark table aside)
    tables: dict[str, dict] = field(default_factory=dict)  # per table: segments, bytes, oldest


def usage(files: list[StagedFile]) -> StagedUsage:
    """(The members of one shared segment are one file.)"""
    physical = {(parse_member(f.path) or (f.path,))[0] for f in files}
    out = StagedUsage(files=len(physical), bytes=sum(f.size for f in files))
    by_table: dict[str, list[Segment]] = {}
    for f in files:
        if f.dump_id is None:
            by_table.setdefault(f.table, []).append(Segment.of(f))
        else:
            out.chunk_files += 1
    out.segments = len(files) - out.chunk_files
    for table, segments in sorted(by_table.items()):
        shown = Listing(segments).shown
        out.tables[table] = {"segments": len(segments), "bytes": sum(s.size for s in segments),
                             "oldest": shown[0].name.first if shown else None}
    firsts = [t["oldest"] for name, t in out.tables.items() if name != WATERMARK_TABLE and t["oldest"]]
    out.oldest = min(firsts) if firsts else None
    return out


def staged_usage(staged: StagedLog, source: str) -> StagedUsage:
    """The source's staged log now: one listing (no file is opened but shared segments' footers)."""
    return usage(staged.inventory(source))


# -- gathering ------------------------------------------------------------------------------------------
def dump_life(store, source: str, dump_id: str) -> DumpLife:
    status = dump_status(store, source, dump_id)
    scope = store.get(paths.dump_path(source, dump_id)) or {}
    tables = tuple(scope.get("tables") or status["tables"])
    progress = [paths.table_progress_path(source, dump_id, t) for t in tables]
    busy = any(store.lock_holders(f"{p}/lock") for p in progress)
    cancelled = (status["control"] or {}).get("state") == CANCELLED
    touched = [store.modified(p) for p in (paths.dump_path(source, dump_id), paths.control_path(source, dump_id),
                                           *progress)]
    finished_at = [(p or {}).get("finished_at") for p in status["tables"].values()]
    created = status["created_at"] or 0.0
    return DumpLife(dump_id, tables, finished=not busy and (status["state"] in ENDED or cancelled),
                    may_stage=busy or not (cancelled or status["state"] in (DONE, "unknown")), created_at=created,
                    last_active=max([created, *(t for t in touched + finished_at if t)]))


def chunk_windows(staged: StagedLog, files: list[StagedFile]) -> dict[str, tuple[str | None, str | None]]:
    """Each chunk file's watermark ids (LW, HW); None for a chunk without rows."""
    infos = staged.chunk_infos([f.path for f in files])
    return {i.path: (i.meta.lw, i.meta.hw) if i.meta else (None, None) for i in infos}


def snapshot(store, staged: StagedLog, warehouse, source: str, now: float, window: float,
             tables: list[str] | None = None) -> Snapshot:
    """What the retention rules decide on (see the module doc for the order of the reads)."""
    registered = [dump_life(store, source, d) for d in store.children(paths.dumps_path(source))]
    files = staged.inventory(source)
    checkpoint = checkpoint_position(store, source)
    segments = [f for f in files if f.dump_id is None]
    chunk_files = [f for f in files if f.dump_id is not None]
    states = {t: warehouse.state(source, t) for t in {f.table for f in files} - {WATERMARK_TABLE}}
    positions = staged_positions(staged, source)
    ids = chunk_windows(staged, chunk_files)
    chunks = []
    for f in chunk_files:
        lw, hw = ids[f.path]
        state, number = states.get(f.table), ChunkFile.parse(f.path).number
        chunks.append(StagedChunk(f.table, f.dump_id or "", f.path, f.size, f.mtime, positions.get(lw or ""),
                                  positions.get(hw or ""), state is not None and state.chunk_merged(f.dump_id, number)))
    known = {d.dump_id for d in registered}
    unregistered = [DumpLife(d, tuple(sorted({c.table for c in cs})), True, False, min(c.mtime for c in cs),
                             max(c.mtime for c in cs), registered=False)
                    for d, cs in _by_dump(chunks).items() if d not in known]
    logs = {}
    for table in sorted({f.table for f in segments}):
        if tables is None or table in tables:
            state = states.get(table)
            logs[table] = TableLog(table, tuple(Segment.of(f) for f in segments if f.table == table),
                                   state.log_upto if state is not None else None)
    shared: dict[str, set[str]] = {}
    for f in segments:   # every member, whatever `tables` selects: the others' hold their files too
        if (member := parse_member(f.path)) is not None:
            shared.setdefault(member[0], set()).add(f.path)
    return Snapshot(now, window, checkpoint, logs, chunks, registered + unregistered, remove_dumps=tables is None,
                    shared={c: frozenset(m) for c, m in shared.items()})


def _by_dump(chunks: list[StagedChunk]) -> dict[str, list[StagedChunk]]:
    out: dict[str, list[StagedChunk]] = {}
    for c in chunks:
        out.setdefault(c.dump_id, []).append(c)
    return out


class NewestCommit:
    """A segment's age for the rules: the unix time of its newest `_commit_ts`, from the footer's
    statistics (one read per segment, remembered); its file time when no event carries one."""

    def __init__(self, staged: StagedLog):
        self.staged, self.seen = staged, dict[str, float]()

    def __call__(self, segment: Segment) -> float:
        if segment.path not in self.seen:
            self.seen[segment.path] = self._read(segment)
        return self.seen[segment.path]

    def _read(self, segment: Segment) -> float:
        meta = self.staged.segment_file(segment.path).metadata
        newest = None
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                column = group.column(c)
                stats = column.statistics
                if column.path_in_schema == COMMIT_TS and stats is not None and stats.has_min_max:
                    newest = stats.max if newest is None else max(newest, stats.max)
        return newest.timestamp() if newest is not None else segment.mtime


# -- compaction ---------------------------------------------------------------------------------------
def _agree(old: pa.DataType, new: pa.DataType) -> bool:
    """One file can hold both: the same type, or structs (`_before`, `_old_key`) whose common
    fields agree (a column added to the table adds a field)."""
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = {f.name: f.type for f in old}
        return all(f.name not in fields or _agree(fields[f.name], f.type) for f in new)
    return old == new


def joinable_runs(parts: list[pa.Table]) -> Iterator[tuple[int, int]]:
    """(start, end) of the runs of consecutive tables one file can hold with every column and type
    as it is: a changed type or key starts a new run; columns added over time do not."""
    start, joined = 0, parts[0].schema if parts else None
    for i in range(1, len(parts)):
        schema = parts[i].schema
        assert joined is not None
        if schema.metadata != joined.metadata or not all(
                _agree(joined.field(f.name).type, f.type) for f in schema if f.name in joined.names):
            yield start, i
            start, joined = i, schema
        else:
            joined = pa.unify_schemas([joined, schema], promote_options="permissive").with_metadata(schema.metadata)
    if parts:
        yield start, len(parts)


def union(parts: list[pa.Table]) -> pa.Table:
    """One table of segments' events (`joinable_runs`): sorted, each position once, the data
    columns first as a capture writes them, the table's name and key kept."""
    data = dedupe_sorted(pa.concat_tables(parts, promote_options="permissive"), POSITION)
    names = sorted(data.column_names, key=lambda n: n.startswith("_"))  # stable: order within each kind kept
    return data.select(names).replace_schema_metadata(parts[-1].schema.metadata)


def compact(staged: StagedLog, source: str, table: str, group: list[Segment], min_segments: int) -> list[int]:
    """Rewrite the group as one segment per joinable run of at least `min_segments`; returns how
    many segments each new one replaced. The inputs stay (hidden) for `replaced` to remove."""
    parts = [staged.read_segment(s.path) for s in group]
    done = []
    for start, end in joinable_runs(parts):
        if end - start >= least_run(group[start:end], min_segments):
            staged.write_compacted(source, table, union(parts[start:end]))
            done.append(end - start)
    return done


# -- a run --------------------------------------------------------------------------------------------
def maintain_staged(store, staged: StagedLog, warehouse, source: str, *, tables: list[str] | None = None,
                    window_seconds: float | None = None, compact_bytes: int | None = None,
                    compact_min_segments: int | None = None, replaced_grace_seconds: float | None = None,
                    dry_run: bool = False, lock_timeout: float | None = None) -> StagedLogReport:
    """Retention, dumps and compaction of a source's staged log (None options: `settings().retention`;
    `tables`: only those tables' logs, and no dump, no watermark). See the module doc."""
    tuned = settings().retention
    window = tuned.window_seconds if window_seconds is None else window_seconds
    target = tuned.compact_bytes if compact_bytes is None else compact_bytes
    least = tuned.compact_min_segments if compact_min_segments is None else compact_min_segments
    grace = tuned.replaced_grace_seconds if replaced_grace_seconds is None else replaced_grace_seconds
    timeout = settings().merge.lock_timeout_seconds if lock_timeout is None else lock_timeout
    started, report = time.monotonic(), StagedLogReport(source, dry_run=dry_run)
    try:
        lease = store.lease(paths.staged_maintenance_lock(source), f"{socket.gethostname()}:{os.getpid()}", timeout)
    except paths.LeaseTimeout as exc:
        raise StagedMaintenanceError(f"another `dblog maintain` has tended the staged log of {source} for more than "
                                     f"{timeout:.0f}s; run it again once that one finished") from exc
    try:
        snap = snapshot(store, staged, warehouse, source, time.time(), window, tables)
        decided = plan(snap, NewestCommit(staged))
        _retain(store, staged, source, decided, report)
        _compact(staged, source, snap, decided, report, target, least)
        _replaced(staged, source, tables, report, grace, snap.logs if dry_run else None)
        _whole_tables(store, staged, warehouse, source, tables, report)
    finally:
        lease.release()
    after = staged_usage(staged, source)
    report.files, report.bytes, report.oldest = after.files, after.bytes, after.oldest
    report.unmerged, report.held, report.unfinished = decided.unmerged, decided.held, decided.unfinished
    report.seconds = time.monotonic() - started
    return report


def _whole_tables(store, staged: StagedLog, warehouse, source: str, tables: list[str] | None,
                  report: StagedLogReport) -> None:
    """Whole-table snapshots a newer one replaced, all of them once the table is merged keyed
    again, and the parts of dump runs that died (`whole_tables.outdated`), counted with the dumps'
    chunk files."""
    def running(dump_id: str) -> bool:
        return dump_life(store, source, dump_id).may_stage

    for table in whole_tables.tables(staged, source):
        if tables is not None and table not in tables:
            continue
        state = warehouse.state(source, table)
        keyed_since = dt.datetime.fromtimestamp(state.merged_at or 0, dt.UTC) if state is not None and state.key \
            else None
        gone = whole_tables.outdated(staged, source, table, running, keyed_since)
        report.chunk_files_removed += len(gone)
        report.bytes_removed += sum(f.size or 0 for f in gone)
        if gone and not report.dry_run:
            staged.delete([f.path for f in gone])


def _retain(store, staged: StagedLog, source: str, decided: RetentionPlan, report: StagedLogReport) -> None:
    report.segments_removed, report.dumps_removed = len(decided.segments), len(decided.dumps)
    report.chunk_files_removed = len(decided.chunk_files)
    report.bytes_removed += sum(s.size for s in decided.segments) + sum(c.size for c in decided.chunk_files)
    if report.dry_run:
        return
    for dump in decided.dumps:
        mine = [c.path for c in decided.chunk_files if c.dump_id == dump.dump_id]
        if dump.registered and not dump_life(store, source, dump.dump_id).finished:
            continue   # resumed since it was read: it keeps its files (the next run looks again)
        staged.delete(mine)
        if dump.registered:
            store.delete(paths.dump_path(source, dump.dump_id), recursive=True)
    staged.delete([s.path for s in decided.segments])
    upto = decided.watermarks_removed_upto()
    if upto is not None:
        watermark_index.forget_before(store, source, upto)
        unlogged.forget_before(store, source, upto)  # no window that opened before it can still be merged


def _compact(staged: StagedLog, source: str, snap: Snapshot, decided: RetentionPlan, report: StagedLogReport,
             target: int, least: int) -> None:
    for table, kept in decided.retained.items():
        for group in compaction_groups(kept, snap.checkpoint, target, least):
            if report.dry_run:
                report.segments_compacted, report.compacted_into = report.segments_compacted + len(group), \
                    report.compacted_into + 1
                continue
            done = compact(staged, source, table, group, least)
            report.segments_compacted += sum(done)
            report.compacted_into += len(done)


def _replaced(staged: StagedLog, source: str, tables: list[str] | None, report: StagedLogReport, grace: float,
              logs: dict[str, TableLog] | None) -> None:
    """Remove the hidden segments past the grace; `logs`: as listed before (a dry run), else
    listed now, with what this run compacted."""
    if logs is None:
        fresh: dict[str, list[Segment]] = {}
        for f in staged.inventory(source):
            if f.dump_id is None and (tables is None or f.table in tables):
                fresh.setdefault(f.table, []).append(Segment.of(f))
        logs = {t: TableLog(t, tuple(s)) for t, s in fresh.items()}
    gone = [s for log in logs.values() for s in replaced(log, time.time(), grace)]
    report.replaced_removed, report.bytes_removed = len(gone), report.bytes_removed + sum(s.size for s in gone)
    if not report.dry_run:
        staged.delete([s.path for s in gone])
