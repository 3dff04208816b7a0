"""Continuous change capture: source log -> staged Parquet segments -> fenced checkpoint.

One capture per source is active: it holds the source's ZooKeeper lease, and a second one
blocks in `lease()` as a standby until the first dies. Events are buffered per table for at
most `flush_rows` events or `flush_seconds`, cut at a transaction end, then staged (a file per
table, the small tables of a flush that touched many in one: `stagedlog.shared_segments`); only
after every segment is durable does the checkpoint advance (invariant 2), in a ZooKeeper
transaction that checks the lease (so a deposed capture cannot move it). In between, the
positions of the batch's watermarks go into the watermark index (`dblog.coordination.watermark_index`), so every
watermark at or before the checkpoint is indexed.

A transaction larger than `capture.piece_rows` arrives in pieces (`Transaction.piece`) and is
staged piece by piece as it is read, so memory stays bounded whatever its size; the checkpoint
stays before it until the part with its commit is staged. Readers take events only up to the
checkpoint, so none sees a piece early; a capture that dies in between re-reads the transaction
from the checkpoint and stages its events again, and a position is merged once.
"""
from __future__ import annotations

import functools
import gc
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from ..coordination import changed_tables, column_renames, repair_requests, unlogged, watermark_index
from ..coordination import store as paths
from ..coordination.checkpoint import Checkpoint, ensure_checkpoint, load_checkpoint, save_checkpoint
from ..coordination.health import Heartbeat
from ..coordination.store import Lease, StateStore
from ..faults import crash_point
from ..model.events import ChangeEvent, ColumnRename, RepairNeed, SourceNote
from ..model.schema import TableSchema
from ..model.staged_format import POSITION, log_table
from ..retry import reconnecting
from ..settings import settings
from ..snapshot import repair
from ..sources.base import WATERMARK_TABLE, Source, Transaction, split_watermark_id
from ..stagedlog.staged_log import StagedLog

log = logging.getLogger("dblog.capture")


@dataclass
class Batch:
    events: dict[str, list[ChangeEvent]] = field(default_factory=lambda: defaultdict(list))  # per table, log order
    staged: dict[str, list[pa.Table]] = field(default_factory=lambda: defaultdict(list))  # rows a source encoded
    count: int = 0
    txns: int = 0                   # complete transactions
    parts: int = 0                  # ... and pieces of one not complete yet (`Transaction.piece`)
    open: bool = False              # it ends with a piece: its transaction's commit is still to come
    resume: dict | None = None      # after its last complete transaction (None: pieces only)
    last_position: str | None = None
    commit_ts: datetime | None = None
    first_commit_ts: datetime | None = None
    opened: float = 0.0
    repairs: list[SourceNote] = field(default_factory=list)   # repairs, and column renames
    # Per table, where each run of its events read with one schema starts: (index in `events`,
    # the schema). Staging happens on another thread, after the reader may have seen DDL.
    schemas: dict[str, list[tuple[int, TableSchema]]] = field(default_factory=dict)

    def add(self, txn: Transaction, schema_of: Callable[[str], TableSchema] | None = None) -> list[ChangeEvent]:
        """Add a transaction (or a piece of one); returns its watermark events (usually none).
        `schema_of`: the schema the source read each table's events with, asked as they arrive."""
        if self.parts == 0:
            self.opened = time.monotonic()
        self.parts += 1
        tables, marks_before = self.events, len(self.events.get(WATERMARK_TABLE, ()))
        starts: dict[str, int] = {}
        for e in txn.events:
            held = tables[e.table]
            starts.setdefault(e.table, len(held))
            held.append(e)
        for name, start in starts.items():
            schema, runs = schema_of(name) if schema_of is not None else None, self.schemas.setdefault(name, [])
            if schema is not None and (not runs or (runs[-1][1] is not schema and runs[-1][1] != schema)):
                runs.append((start, schema))
        for table, rows in txn.staged.items():
            self.staged[table].append(rows)
        marks = [e for e in txn.events if e.table == WATERMARK_TABLE] \
            if len(tables.get(WATERMARK_TABLE, ())) > marks_before else []
        self.count += txn.rows
        self.open = not txn.complete
        if not txn.complete:
            return marks  # staged with the batch; the checkpoint waits for the commit
        self.repairs.extend(txn.repairs)
        # A write logged without rows has a position too: once staged (its repair request and
        # `unlogged` entry), the checkpoint passes it, so waits on "the capture passed it" end.
        passed = [p for p in [txn.last_position(), *(n.position for n in txn.repairs)] if p]
        if passed:
            self.last_position = max([*passed, *([self.last_position] if self.last_position else [])])
            self.commit_ts = txn.commit_ts
            self.first_commit_ts = self.first_commit_ts or txn.commit_ts
        self.txns += 1
        self.resume = txn.resume
        return marks


@dataclass
class CaptureStats:
    events: int = 0
    transactions: int = 0
    segments: int = 0
    shared_segments: int = 0       # of them, segments of several tables at once
    flushes: int = 0
    max_stall_s: float = 0.0       # longest time the loop did not read from the log (flushes included)
    max_lag_s: float = 0.0         # oldest commit at the time it became durable
    position: str | None = None
    repairs: int = 0               # repair requests made (partial images, unlogged writes, schema changes)


class Capture:
    def __init__(self, source: Source, store: StateStore, staged: StagedLog, *, flush_rows: int | None = None,
                 flush_seconds: float | None = None, idle_timeout: float = 0.5, identifier: str | None = None,
                 on_beat=None, repairs: bool = True, warehouse=None):
        tuned = settings().capture
        self.source, self.store, self.staged = source, store, staged
        # A schema change made while no capture ran is found against what the staged log holds.
        source.baseline = functools.partial(staged.last_schema, source.name)
        self.flush_rows = tuned.flush_rows if flush_rows is None else flush_rows
        self.flush_seconds = tuned.flush_seconds if flush_seconds is None else flush_seconds
        self.idle_timeout = idle_timeout
        self.identifier = identifier or f"{socket.gethostname()}:{os.getpid()}"
        self.stats = CaptureStats()
        self.stop_event = threading.Event()
        self.lease: Lease | None = None
        self.leading = threading.Event()
        self._checkpoint = Checkpoint()
        self._acked: dict | None = None
        self._slice: float | None = None   # this run's duration, if any
        self._index = changed_tables.ChangeIndex()   # which tables have new events, for the merge
        self._newest: dict[str, str] = {}             # ... staged since the checkpoint last moved
        self.heartbeat = Heartbeat(store, source.name, self.identifier, on_beat)  # liveness, lag history
        # The leader also runs the repairs the log asks for (see dblog.snapshot.repair).
        self.repairer = repair.Repairer(store, source, staged, warehouse=warehouse) if repairs else None

    def run(self, duration: float | None = None, until_watermark: str | None = None,
            lease_timeout: float | None = None) -> CaptureStats:
        """Capture until `duration` elapses, the watermark `until_watermark` is staged, or `stop()`."""
        self.lease = self.store.lease(paths.capture_lock(self.source.name), self.identifier, lease_timeout)
        self._slice = duration
        self.leading.set()
        log.info("%s: capture leader %s", self.source.name, self.identifier)
        try:
            self._checkpoint = ensure_checkpoint(self.store, self.source)
            self.heartbeat.start(self.lease, self._checkpoint)
            self._index = changed_tables.start_index(self.store, self.lease, self.source.name,
                                                     self._checkpoint.position)
            indexed = watermark_index.backfill(self.store, self.lease, self.staged, self.source.name)
            if indexed is not None:
                log.info("%s: indexed the positions of %d staged watermarks", self.source.name, indexed)
            if self.repairer is not None:
                self.repairer.start()
            deadline = None if duration is None else time.monotonic() + duration
            with _fewer_collections():
                self._run_reconnecting(deadline, until_watermark)
        finally:
            if self.repairer is not None:
                self.repairer.stop()
            self.leading.clear()
            self.lease.release()
            self.source.close()
        return self.stats

    def stop(self) -> None:
        self.stop_event.set()

    def _run_reconnecting(self, deadline: float | None, until: str | None) -> None:
        """Read until done; a source restart only pauses the capture, which then resumes from its
        last durable checkpoint (what a lost connection had buffered is read again)."""
        def attempt() -> None:
            if self.stop_event.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return
            if until is not None and watermark_index.positions(self.store, self.staged, self.source.name, [until]):
                return  # staged before the connection was lost
            self._loop(self._checkpoint.resume, deadline, until)

        reconnecting(self.source, attempt, "capture", stop=self.stop_event)

    def _loop(self, resume: dict | None, deadline: float | None, until: str | None) -> None:
        writer = _Writer(self._flush, self.source.name)
        try:
            self._read(writer, resume, deadline, until)
        finally:
            writer.close()
        self._acknowledge(writer)

    def _acknowledge(self, writer: _Writer) -> None:
        durable = writer.durable
        if durable is not None and durable is not self._acked:
            self.source.acknowledge(durable)  # on the reading thread: the replication connection's
            self._acked = durable

    def _read(self, writer: _Writer, resume: dict | None, deadline: float | None, until: str | None) -> None:
        batch, reached, awaited, pieces = Batch(), False, False, False   # pieces: a transaction's pieces came
        last_read = time.monotonic()
        for txn in self.source.stream(resume, self.idle_timeout):
            writer.check()  # a staging failure stops the capture at once, not at the next batch
            if txn is not None:
                self.stats.max_stall_s = max(self.stats.max_stall_s, time.monotonic() - last_read)
                # An empty piece says a transaction is being read that has nothing to stage yet.
                marks = batch.add(txn, self.source.table_schema) if txn.complete or txn.rows else []
                pieces = not txn.complete
                if marks:
                    reached = reached or (until is not None and any((e.after or {}).get("value") == until
                                                                     for e in marks))
                    awaited = awaited or any(is_sync_point(e) for e in marks)
            now = time.monotonic()
            # Someone waits for a sync point (`dblog sync`, a merge after a dump): stage it now,
            # not when the log goes quiet or the batch is full.
            due = batch.parts and (txn is None or reached or awaited or batch.count >= self.flush_rows
                                  or now - batch.opened >= self.flush_seconds)
            if due:
                writer.submit(batch)
                batch, awaited = Batch(), False
                self._acknowledge(writer)
            elif txn is None and not batch.parts and writer.idle:
                self._acknowledge(writer)
                self.source.acknowledge_idle()
            # Idle with everything staged: the capture is at the log's head (see dblog.coordination.health).
            self.heartbeat.beat(txn is None and not batch.parts and writer.idle, self._checkpoint)
            # A slice ends between transactions: one ended inside a transaction would leave it to the next
            # slice to read again from its start, and one longer than a slice would never be staged.
            done = self.stop_event.is_set() or reached or (
                deadline is not None and now >= deadline and not self._inside(pieces, now - deadline))
            if done:
                break
            last_read = time.monotonic()
        if batch.parts:
            writer.submit(batch)

    def _inside(self, pieces: bool, overrun: float) -> bool:
        goes_on = slice_goes_on(pieces, self.source.spooling(), overrun, self._slice or 0.0,
                                settings().capture.hung_after_seconds)
        if not goes_on and not pieces and self.source.spooling():
            log.warning("%s: the slice ends %.0f s late with a streamed transaction still open in the source; "
                        "the next slice reads it again from its start", self.source.name, overrun)
        return goes_on

    def _flush(self, batch: Batch) -> None:
        """Stage every table's segment, then (only then) move the fenced checkpoint."""
        lease = self.lease
        if lease is None:
            raise RuntimeError("Capture._flush without the capture lease: only the leader stages")
        lease.check()  # a deposed capture must not stage (duplicates would be harmless, but noisy)
        renames = [n for n in batch.repairs if isinstance(n, ColumnRename)]
        if renames:   # before the checkpoint passes them, as the repairs below
            column_renames.record(self.store, lease, self.source.name, renames)
            for r in renames:   # (a table only renamed has something to merge: its field)
                self._newest[r.table] = max(r.position, self._newest.get(r.table, ""))
                log.info("%s: %s.%s renamed %s at %s: the merge renames the warehouse's column, keeping its values",
                         self.source.name, r.table, r.old, r.new, r.position)
        repairs = [n for n in batch.repairs if isinstance(n, RepairNeed)]
        if repairs:
            # Before the segments, so before the checkpoint passes the events: a crash repeats them,
            # never loses them (a schema change is found against what the staged log holds: staged
            # first, a crash would leave nothing to find it by). The positions first: once the
            # checkpoint passes a window holding one, a merge may take it.
            unlogged.record(self.store, lease, self.source.name, repairs)
            needs = repair.coalesce(repairs)
            self.stats.repairs += repair_requests.request(self.store, self.source.name, needs)
            for need in needs:
                log.warning("%s: %s at %s cannot be staged as it is (%s); %s", self.source.name, need.table,
                            need.position, need.reason, repair.plan(need))
            if self.repairer is not None:
                self.repairer.wake()
        self._stage(batch)
        if batch.open:
            crash_point("capture.piece_staged")
        # After every segment (an indexed watermark is a staged one), before the checkpoint.
        watermark_index.record(self.store, lease, self.source.name, batch.events.get(WATERMARK_TABLE, ()))
        self.stats.events += batch.count
        self.stats.transactions += batch.txns
        self.stats.flushes += 1
        if batch.resume is None:   # pieces of one transaction, staged; its commit moves the checkpoint
            log.info("%s: staged %d events of a transaction whose commit is still to come", self.source.name,
                     batch.count)
            return
        # The change index before the checkpoint, as the watermark index: a merge that sees the
        # checkpoint sees every table it passed new events of.
        changed_tables.record(self.store, lease, self.source.name, self._index, self._newest)
        self._newest = {}
        crash_point("capture.before_checkpoint")
        checkpoint = self._checkpoint.advanced(batch.resume, batch.last_position,
                                               batch.commit_ts.timestamp() if batch.commit_ts else None, self.identifier)
        save_checkpoint(self.store, lease, self.source.name, checkpoint)
        self._checkpoint = checkpoint
        position = checkpoint.position
        self.stats.position = position
        if batch.first_commit_ts is not None:
            self.stats.max_lag_s = max(self.stats.max_lag_s, time.time() - batch.first_commit_ts.timestamp())
        if batch.count:
            log.info("%s: staged %d events up to %s", self.source.name, batch.count, position)


    def _stage(self, batch: Batch) -> None:
        """Write the batch's segments: a file per table, but one for the small tables of a batch
        that has many (`shared_segments`), and one per piece a source staged itself."""
        shared = self._shared(batch)
        for table in batch.events:
            if table in shared:
                continue
            for schema, events in self._schema_runs(batch, table):
                for run in runs_around(events, batch.staged.get(table, ())):
                    self.staged.write_segment(self.source.name, schema, run)
                    self.stats.segments += 1
                    crash_point("capture.mid_flush")
        if shared:
            self.staged.write_shared(self.source.name, {t: log_table(*self._schema_runs(batch, t)[0]) for t in shared})
            self.stats.segments += 1
            self.stats.shared_segments += 1
            crash_point("capture.mid_flush")
        for table, events in batch.events.items():
            if events and table != WATERMARK_TABLE:   # in log order: the last is the table's newest
                self._newest[table] = max(events[-1].position, self._newest.get(table, ""))
        for table, parts in batch.staged.items():
            for rows in parts:
                self.staged.write_log_table(self.source.name, table, rows)
                self.stats.segments += 1
                crash_point("capture.mid_flush")
                self._newest[table] = max(rows[POSITION][-1].as_py(), self._newest.get(table, ""))


    def _schema_runs(self, batch: Batch, table: str) -> list[tuple[TableSchema, list[ChangeEvent]]]:
        """The table's events of the batch in runs read with one schema each (a segment holds one)."""
        events = batch.events[table]
        runs = batch.schemas.get(table) or [(0, self.source.table_schema(table))]
        ends = [start for start, _ in runs[1:]] + [len(events)]
        return [(schema, events[start:end]) for (start, schema), end in zip(runs, ends) if end > start]

    @staticmethod
    def _shared(batch: Batch) -> set[str]:
        """The tables whose events the batch stages in one shared segment: those with few events,
        when there are more of them than a flush writes files for (the watermark table: never, its
        index reads its own directory)."""
        tuned = settings().capture
        small = {t for t, events in batch.events.items()
                 if t != WATERMARK_TABLE and t not in batch.staged and 0 < len(events) <= tuned.shared_segment_rows
                 and len(batch.schemas.get(t, ())) <= 1}
        return small if tuned.shared_segment_tables and len(small) > tuned.shared_segment_tables else set()


def runs_around(events: list[ChangeEvent], pieces) -> list[list[ChangeEvent]]:
    """A table's events of a batch (in log order) in runs whose position range holds none of the
    pieces a source staged itself (a streamed transaction committed between two of them): a
    segment holds every event of its table between its first and last position, or readers would
    take a piece inside its range for one it replaced (`staged_format.hidden_segments`)."""
    starts = sorted(pc.min(p[POSITION]).as_py() for p in pieces if p.num_rows)
    if not starts or not events:
        return [events] if events else []
    runs, run = [], [events[0]]
    for e in events[1:]:
        if any(run[-1].position < start < e.position for start in starts):
            runs.append(run)
            run = []
        run.append(e)
    return [*runs, run]


def slice_goes_on(pieces: bool, spooling: bool, overrun: float, slice_s: float, hung_after_s: float) -> bool:
    """Whether a capture slice `overrun` seconds past its end reads on, inside a transaction: one
    come in pieces (its commit was read: it ends soon), or one the source spools (a streamed
    transaction, open in the source for as long as it likes). A spooled one holds the slice for
    another slice length, at least half the hang guard's wait, and never until the task's hang
    guard (`DBLOG_CAPTURE_HUNG_AFTER_SECONDS` past twice the slice): then the slice ends and the
    next one reads the transaction again from its start."""
    return pieces or (spooling and overrun < max(slice_s, hung_after_s / 2))


@dataclass
class _CollectorTuning:
    """What `_fewer_collections` changed in this process (the collector is the process's, and
    captures in threads of one process overlap)."""
    captures: int = 0
    threshold: tuple[int, ...] = ()
    froze: bool = False


_TUNING, _TUNING_LOCK = _CollectorTuning(), threading.Lock()


@contextmanager
def _fewer_collections():
    """The collector tuned for the capture's allocation pattern, for as long as a capture reads.

    Every event allocates a few containers (its row images, the event) that live until their
    batch is staged, and Python's collector runs a young-generation pass every 700 such
    allocations, each examining a batch's worth of live rows that are not garbage: 8-15% of the
    capture's time (bench scenario 1). A young pass now waits for 50,000 allocations, and what
    the process made before (imports, clients) is collected once and frozen out of every pass;
    cycles are still collected, in fewer and larger passes. The first capture in the process to
    start tunes, the last to end restores; a process that froze objects itself (a forking
    executor) keeps its freeze, and one with collection off keeps it off.
    """
    with _TUNING_LOCK:
        _TUNING.captures += 1
        if _TUNING.captures == 1:
            _TUNING.threshold = gc.get_threshold()
            _TUNING.froze = gc.get_freeze_count() == 0
            if _TUNING.froze:
                gc.collect()
                gc.freeze()
            if _TUNING.threshold[0]:
                gc.set_threshold(max(_TUNING.threshold[0], 50_000), *_TUNING.threshold[1:])
    try:
        yield
    finally:
        with _TUNING_LOCK:
            _TUNING.captures -= 1
            if _TUNING.captures == 0:
                gc.set_threshold(*_TUNING.threshold)
                if _TUNING.froze:
                    gc.unfreeze()


class _Writer:
    """Stages batches in order on its own thread, so reading the log overlaps writing Parquet.

    At most one batch waits while another is written (bounded memory); the reader blocks beyond
    that. A failure (for example a lost lease) stops the writer and is raised to the reader.
    """

    def __init__(self, flush, name: str):
        self._flush = flush
        self._queue: queue.Queue[Batch | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.durable: dict | None = None
        self.submitted = self.staged = 0
        self._thread = threading.Thread(target=self._run, name=f"dblog-stage-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self.error is not None:
                continue  # drain: the reader raises at its next submit
            try:
                self._flush(batch)
                self.durable = batch.resume or self.durable
                self.staged += 1
            except BaseException as exc:  # noqa: B036 - handed to the reading thread
                self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def submit(self, batch: Batch) -> None:
        self.check()
        self.submitted += 1
        self._queue.put(batch)

    @property
    def idle(self) -> bool:
        """Every submitted batch is staged."""
        return self.error is None and self.staged == self.submitted

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self.check()


def caught_up(store: StateStore, staged: StagedLog, source: str, mark: str) -> str | None:
    """The position of the sync watermark `mark` once the checkpoint has passed it, else None.
    From then on a merge covers every commit made before `sync_point` returned `mark`."""
    position = watermark_index.positions(store, staged, source, [mark]).get(mark)
    if position is None:
        return None
    checkpoint = load_checkpoint(store, source)
    return position if checkpoint is not None and checkpoint.passed(position) else None


SYNC_SLOT = "sync"   # the watermark row of sync points


def sync_point(source: Source) -> str:
    """Write a fresh watermark and return its value: once it is staged, so is every earlier commit."""
    value = str(uuid.uuid4())
    source.write_watermark(SYNC_SLOT, value)
    return value


def is_sync_point(event: ChangeEvent) -> bool:
    """A sync point's watermark write, of any deployment."""
    return event.table == WATERMARK_TABLE and split_watermark_id(str((event.after or {}).get("id") or ""))[1] == SYNC_SLOT


def await_sync(store: StateStore, staged: StagedLog, source: str, mark: str, timeout: float,
               poll: float = 0.2) -> str | None:
    """`caught_up` once it holds (the sync watermark's position), or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        position = caught_up(store, staged, source, mark)
        if position is not None or time.monotonic() >= deadline:
            return position
        time.sleep(poll)
