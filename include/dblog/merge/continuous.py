"""The continuous merge: one warm Spark session merges every table every few seconds.

A cold `dblog merge` spends most of its time starting Spark and planning; the change itself is a
few rows. Here the session stays up and each cycle runs `job.merge_table` for the tables of each
source, so a change is visible one cycle after the capture checkpoints it. A cycle starts as soon
as a source's checkpoint moves (a ZooKeeper watch; at most every `MIN_PAUSE_S`), else `every`
seconds after the last one began: a change waits for the capture's flush and one cycle, not for
an interval on top.

A cycle costs what changed: per source, it reads the capture's checkpoint, then the change
index and the chunk marks (`dblog.coordination.changed_tables`): three ZooKeeper reads, whatever
the number of tables. A table is merged only when the index holds an event of it newer than this
process merged it up to, or a dump marked it with a chunk; every other table is passed over with
no lock, no catalog load and no listing (`SliceReport.skipped`). The source's tables are listed
once, at the first cycle (every table is merged then: this process knows no table's position
yet). A source whose capture is of a version without the index is swept as before: every table
whenever the checkpoint moved, and every `FULL_PASS_S` whatever it did. A table with nothing new
commits nothing (`merge_table` says "up to date"); a table with new input commits one Iceberg
snapshot.

Merges of one table stay serialized by its ZooKeeper merge lock, so a scheduled `dblog merge`, a
dump run's merge or a second deployment's continuous merge can run beside this one: a table whose
lock another merge holds is skipped for the cycle (waiting at most one interval) and taken by a
later one. A table whose merge fails is retried every cycle, its error logged when it first
appears and once a minute while it lasts; the slice then ends failed (`SliceReport.failures`), so
a task shows it, while every other table keeps merging until the slice ends.

It beats in ZooKeeper while it runs (`coordination.merge_beat`: when, which tables, which failed
last; from a thread of its own, and after a cycle whose failures changed), so a dump run's merge
task leaves the dump's chunks to it and waits (`handoff`) instead of starting a second Spark
application that would merge the same tables.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ..coordination import changed_tables
from ..coordination.checkpoint import checkpoint_path, checkpoint_position
from ..coordination.merge_beat import BEAT_S, MergeBeat, beat
from ..coordination.store import StateStore
from ..settings import settings
from ..sources.base import WATERMARK_TABLE
from ..stagedlog.staged_log import StagedLog
from ..warehouse.tables import Warehouse
from .job import MergeBusy, MergeError, MergeResult, merge_table, staged_tables

log = logging.getLogger("dblog.merge")

MIN_PAUSE_S = 0.2      # the shortest pause between cycles, however often the checkpoint moves
REPEAT_ERROR_S = 60.0   # a lasting failure is logged again this often, not every cycle
IDLE_LINE_S = 60.0      # an idle merge says so this often, so a quiet log is not mistaken for a hung one
FULL_PASS_S = 30.0      # a source is merged at least this often, even if its checkpoint stayed put
# With the change index, every table is still merged this often: a chunk a dump staged without a
# mark (a Spark task of a failed window job finishing late, a dump of an older version) is not
# left for ever. At 1,000 tables it costs about a cycle of up-to-date checks every ten minutes.
BACKSTOP_S = 600.0
_SUMMED = ("log_events", "chunks", "chunk_rows", "survivors", "buckets_written", "seconds", "commit_seconds",
           "repairs_requested", "blind_chunks", "blind_rows", "snapshots_expired", "changes")
_LATEST = ("snapshot_id", "upto", "buckets", "rows", "tombstones", "missing_rows", "waiting", "note", "chunks_waiting")


@dataclass
class TableSlice:
    """What a slice did to one table: its merges summed into one `MergeResult` (the shape the merge
    task's report has, `commits` counting its snapshots) and its latest failure, if any."""
    total: MergeResult
    error: str | None = None
    error_logged: float = -REPEAT_ERROR_S
    busy_since: float | None = None   # monotonic time another merge first held the table's lock
    merges: int = 0                   # merges started (the rest of the cycles passed it over)
    load_said: str | None = None      # the dump whose first load this slice said it waits for

    def add(self, r: MergeResult) -> None:
        for name in _SUMMED:
            setattr(self.total, name, getattr(self.total, name) + getattr(r, name))
        for name in _LATEST:
            setattr(self.total, name, getattr(r, name))
        for dump_id, merged in r.dumps.items():
            totals = self.total.dumps.setdefault(dump_id, {"chunks": 0, "rows": 0, "dropped": 0})
            for k in totals:
                totals[k] += merged.get(k, 0)
        if r.changes_upto is not None:   # the slice's range: before its first append, to its last
            if self.total.changes_upto is None:
                self.total.changes_after = r.changes_after
            self.total.changes_upto = r.changes_upto
        if r.newest_commit_ts is not None:
            self.total.newest_commit_ts = max(self.total.newest_commit_ts or 0.0, r.newest_commit_ts)
        if r.committed_at is not None:
            self.total.commits += 1
            if r.visible_after_s is not None and r.visible_after_s >= (self.total.visible_after_s or 0.0):
                # The slice's total reports the change that waited longest to become visible.
                self.total.committed_at, self.total.oldest_commit_ts = r.committed_at, r.oldest_commit_ts
        self.error, self.busy_since = None, None

    def result(self) -> MergeResult:
        """The slice's total, with the table's latest failure."""
        self.total.error = self.error
        return self.total

    def report(self) -> dict:
        return self.result().to_json()


@dataclass
class SliceReport:
    cycles: int = 0
    busy_cycles: int = 0    # cycles that merged something
    cycle_seconds: list[float] = field(default_factory=list)   # of busy cycles (an idle one is a ZooKeeper read)
    tables: dict[tuple[str, str], TableSlice] = field(default_factory=dict)
    merges: int = 0         # table merges started (each takes the table's lock and loads its state)
    skipped: int = 0        # ... and tables passed over without either: nothing new in the index
    listings: int = 0       # staged-log listings of a source's tables

    @property
    def failures(self) -> dict[tuple[str, str], str]:
        """Tables whose last merge in the slice failed, with the reason."""
        return {k: t.error for k, t in self.tables.items() if t.error}

    def results(self) -> list[MergeResult]:
        return [t.result() for t in self.tables.values()]


class ContinuousMerge:
    """Merges `tables` (per source; None: every staged table) every `every` seconds until `stop` is
    set or `duration` seconds have passed (None: for ever). `say` receives a line per cycle that
    committed, and one a minute while idle."""

    def __init__(self, spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse,
                 tables: dict[str, list[str] | None], *, every: float, bucket_rows: int | None = None,
                 say: Callable[[str], None] = print, stop: threading.Event | None = None,
                 parallel: int | None = None):
        if every <= 0:
            raise MergeError(f"the merge interval must be > 0 seconds, got {every}")
        parallel = settings().merge.parallel_tables if parallel is None else parallel
        self.spark, self.store, self.staged, self.warehouse = spark, store, staged, warehouse
        self.tables, self.every, self.bucket_rows = tables, every, bucket_rows
        said = threading.Lock()

        def say_whole(line: str) -> None:   # merges side by side: a line never runs into another
            with said:
                say(line)
        self.say = say_whole
        self.lock_timeout = settings().merge.lock_timeout_seconds
        self.stop = stop or threading.Event()
        self._merged_to: dict[str, tuple[str, float]] = {}   # source -> (position every table merged up to, when)
        self._upto: dict[tuple[str, str], str | None] = {}    # (source, table) -> position merged up to here
        self._tables: dict[str, set[str]] = {}                # source -> its tables (with an index)
        self._swept: dict[str, float] = {}                    # source -> when every table was last merged
        self._idle_said = time.monotonic()
        self._counting = threading.Lock()   # the report's shared counters, from the merge threads
        # Tables merge side by side: a big merge (a dump landing) runs on while the next cycles
        # merge the small tables; one merge of a table at a time (`_running`, and its lock).
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix="dblog-merge") if parallel > 1 else None
        self._running: dict[tuple[str, str], Future[int]] = {}
        self._moved = threading.Event()   # a watched checkpoint moved since the last cycle began
        self._watched: set[str] = set()   # sources whose checkpoint is watched
        self._beaten = -BEAT_S                                   # the last heartbeat (`_beat`) ...
        self._beat_failing: dict[tuple[str, str], str] = {}      # ... and the failures it named
        self._beat_lock = threading.Lock()

    def run(self, duration: float | None = None) -> SliceReport:
        report = SliceReport()
        # Beats go on while a cycle merges a big table (a dump landing) and while the slice's last
        # merges end: a dump run waiting on this merge must not take a long merge for silence.
        ended = threading.Event()
        beating = threading.Thread(target=self._beat_until, args=(report, ended), name="dblog-merge-beat",
                                   daemon=True)
        beating.start()
        try:
            self._run(report, None if duration is None else time.monotonic() + duration)
            self.harvest(None)   # the merges under way end their table's work, as a serial cycle does
        finally:
            ended.set()
            beating.join(timeout=10)
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
        return report

    def _beat_until(self, report: SliceReport, ended: threading.Event) -> None:
        while not ended.wait(BEAT_S):
            try:
                self._beat(report)
            except Exception as exc:  # noqa: BLE001 - (the merge threads changed the report as it was read): next time
                log.debug("heartbeat skipped (%s)", exc)

    def _run(self, report: SliceReport, deadline: float | None) -> None:
        while not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
            began = time.monotonic()
            self._moved.clear()
            self._watch()
            merged = self.cycle(report)
            report.cycles += 1
            self._beat(report)
            if merged:
                report.busy_cycles += 1
                report.cycle_seconds.append(time.monotonic() - began)
            elif time.monotonic() - self._idle_said >= IDLE_LINE_S:
                failing = ", ".join(f"{s} {t}" for s, t in report.failures)
                self.say(f"idle: nothing new to merge ({report.cycles} cycles so far)"
                         + (f"; still failing: {failing}" if failing else ""))
                self._idle_said = time.monotonic()
            self._pause(began, deadline)

    def _beat(self, report: SliceReport) -> None:
        """Tell waiting dump runs that this merge runs (`merge_beat`): every BEAT_S (from its own
        thread too, `run`), and at once when the tables it fails on change. Never fails the cycle:
        a waiter that hears nothing merges itself."""
        with self._beat_lock:   # (the cycle's thread and the beat's)
            self._beat_now(report)

    def _beat_now(self, report: SliceReport) -> None:
        now = time.monotonic()
        failing = report.failures
        # A failure's text may change every cycle (a lock held "for N s"): only the tables count.
        if now - self._beaten < BEAT_S and set(failing) == set(self._beat_failing):
            return
        for source, chosen in self.tables.items():
            if (source, "*") in failing:   # this cycle could not read the source: nothing to promise
                continue
            state = MergeBeat(time.time(), None if chosen is None else tuple(chosen),
                              {t: reason for (s, t), reason in failing.items() if s == source})
            try:
                beat(self.store, source, state)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.debug("%s: heartbeat not written (%s)", source, exc)
        self._beaten, self._beat_failing = now, failing

    def _watch(self) -> None:
        """Watch each source's checkpoint once (see `_pause`); ZooKeeper away: the next cycle tries
        again, and meanwhile cycles come every `every` seconds."""
        for source in self.tables:
            if source not in self._watched:
                try:
                    self.store.watch(checkpoint_path(source), self._moved.set, wait=False)
                    self._watched.add(source)
                except Exception as exc:  # noqa: BLE001 - the cycle reports ZooKeeper's state itself
                    log.debug("%s: no checkpoint watch yet (%s)", source, exc)

    def _pause(self, began: float, deadline: float | None) -> None:
        """Until `every` seconds after the cycle began, or from MIN_PAUSE_S on as soon as a
        checkpoint moved: a change then waits for the capture's flush and one cycle, not for a
        fixed interval on top (at 1,000 tables with 50 written, the p50 wait 6.0 -> 4.1 s)."""
        end = began + self.every if deadline is None else min(began + self.every, deadline)
        soonest = time.monotonic() + MIN_PAUSE_S
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= end or (now >= soonest and self._moved.is_set()):
                return
            self.stop.wait(min(0.05, end - now))

    def cycle(self, report: SliceReport) -> int:
        """One pass over every source whose checkpoint moved; returns the snapshots committed (with
        merges side by side: those that ended since the last cycle or within this one's interval)."""
        committed, before = self.harvest(0), set(self._running)
        for source, chosen in self.tables.items():
            try:
                committed += self._source(report, source, chosen)
            except FatalMergeError:
                raise
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or the staged log away: the next cycle tries again
                self._failed(self._entry(report, source, "*"), f"{type(exc).__name__}: {exc}", exc)
        # This cycle's merges get up to an interval to end; a longer one (an earlier cycle's too) runs on.
        return committed + self.harvest(self.every, [f for k, f in self._running.items() if k not in before])

    def harvest(self, wait: float | None, awaited: list[Future[int]] | None = None) -> int:
        """Collect the merges that ended, waiting up to `wait` seconds (None: for ever) for the
        `awaited` ones (None: all under way); the snapshots they committed. A dead Spark session
        raises here."""
        if not self._running:
            return 0
        futures.wait(list(self._running.values()) if awaited is None else awaited, timeout=wait)
        committed = 0
        for key, future in list(self._running.items()):
            if future.done():
                del self._running[key]
                committed += future.result()
        return committed

    def _start(self, report: SliceReport, source: str, table: str, mark: list[str] | None) -> int:
        """Merge a table now (serial), or start its merge beside the others; the snapshots
        committed now."""
        if self._pool is None:
            return self._merge_marked(report, source, table, mark)
        self._running[(source, table)] = self._pool.submit(self._merge_marked, report, source, table, mark)
        return 0

    def _merge_marked(self, report: SliceReport, source: str, table: str, marks: list[str] | None) -> int:
        """Merge a table; then, if no chunk of it waits, remove the chunk marks read before the
        merge listed its chunks (`changed_tables`)."""
        if self._pool is not None and self.spark is not None:
            # A fair-scheduler pool per thread: a small table's jobs are not queued behind a big one's.
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", threading.current_thread().name)
        done = self._merge(report, source, table)
        if done is None:
            return 0   # failed or busy: tried again next cycle
        self._upto[(source, table)] = done.upto
        if marks and not done.chunks_waiting:
            try:
                changed_tables.clear_marks(self.store, source, marks)
            except Exception as exc:  # noqa: BLE001 - marks left are merged again next cycle: harmless
                log.warning("%s %s: chunk marks not cleared (%s); the table is merged again next cycle",
                            source, table, exc)
        return int(done.committed_at is not None)

    def _source(self, report: SliceReport, source: str, chosen: list[str] | None) -> int:
        upto = checkpoint_position(self.store, source)
        if upto is None:
            return 0
        index = changed_tables.load_index(self.store, source)   # after the checkpoint: see its module
        if index is None:
            return self._sweep(report, source, chosen, upto)
        marks = changed_tables.marks(self.store, source)
        committed, full = 0, time.monotonic() - self._swept.get(source, 0.0) >= BACKSTOP_S
        if full:   # see BACKSTOP_S
            self._tables.pop(source, None)
            self._swept[source] = time.monotonic()
        for table in chosen or self._known(report, source, index, marks):
            if self.stop.is_set():
                break
            if not full and table not in marks and not index.newer(table, self._upto.get((source, table)), upto):
                report.skipped += 1
            elif (source, table) not in self._running:   # else still merging from an earlier cycle
                self._entry(report, source, table)
                committed += self._start(report, source, table, marks.get(table))
        report.tables.pop((source, "*"), None)   # the source could be read again
        return committed

    def _known(self, report: SliceReport, source: str, index: changed_tables.ChangeIndex,
               marks: dict[str, list[str]]) -> list[str]:
        """Every table of the source: listed from the staged log once, then learnt from the index
        and the marks (a new table is staged by the capture or a dump before it can be merged)."""
        known = self._tables.get(source)
        if known is None:
            known = self._tables[source] = set(staged_tables(self.staged, source))
            report.listings += 1
        known.update(t for t in (*index.tables, *marks) if t != WATERMARK_TABLE)
        return sorted(known)

    def _sweep(self, report: SliceReport, source: str, chosen: list[str] | None, upto: str) -> int:
        """Without a change index (a capture of an older version stages this source): every table,
        whenever the checkpoint moved, and at least every FULL_PASS_S."""
        last = self._merged_to.get(source)
        if last is not None and upto == last[0] and time.monotonic() - last[1] < FULL_PASS_S:
            return 0
        began, committed, all_done = time.monotonic(), 0, True
        report.listings += chosen is None
        for table in chosen or staged_tables(self.staged, source):
            if self.stop.is_set():
                return committed
            done = self._merge(report, source, table)
            all_done &= done is not None
            if done is not None and done.committed_at is not None:
                committed += 1
        if all_done:  # a table that failed or was busy is tried again next cycle
            self._merged_to[source] = (upto, began)
        report.tables.pop((source, "*"), None)   # the source could be read again
        return committed

    @staticmethod
    def _entry(report: SliceReport, source: str, table: str) -> TableSlice:
        entry = report.tables.get((source, table))
        if entry is None:
            entry = report.tables[(source, table)] = TableSlice(MergeResult(source, table))
        return entry

    def _merge(self, report: SliceReport, source: str, table: str) -> MergeResult | None:
        entry = self._entry(report, source, table)
        with self._counting:
            report.merges += 1
        entry.merges += 1
        try:
            # Waiting longer for another merge's lock would hold every other table back.
            r = merge_table(self.spark, self.store, self.staged, self.warehouse, source, table,
                            bucket_rows=self.bucket_rows, lock_timeout=max(1.0, self.every))
        except MergeBusy:
            now = time.monotonic()
            entry.busy_since = entry.busy_since or now
            held = now - entry.busy_since
            if held > self.lock_timeout:   # as a single merge would, after waiting this long
                self._failed(entry, f"another merge has held the lock of {source}/{table} for {held:.0f}s; check "
                                    "`dblog status` for a stuck worker")
            else:
                log.info("%s %s: another merge holds it; trying again next cycle", source, table)
            return None
        except MergeError as exc:
            self._failed(entry, str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others' merges
            if _session_gone(self.spark, exc):
                raise FatalMergeError(f"the Spark session is gone ({type(exc).__name__}: {exc}); the slice ends "
                                      "so that a new one starts Spark afresh") from exc
            self._failed(entry, f"{type(exc).__name__}: {exc}", exc)
            return None
        before = entry.total.waiting
        entry.add(r)
        # A line per commit, and one when what waits for a repair or a first load changes (not one every cycle).
        if r.committed_at is not None or (r.waiting and r.waiting != before) or \
                (r.load_waits and r.load_waits != entry.load_said):
            self.say(r.summary())
        entry.load_said = r.load_waits
        return r

    def _failed(self, entry: TableSlice, reason: str, exc: BaseException | None = None) -> None:
        """Record a failure; say it when it is new, and again each REPEAT_ERROR_S while it lasts
        (an unexpected one with its traceback, as often)."""
        now = time.monotonic()
        if reason != entry.error or now - entry.error_logged >= REPEAT_ERROR_S:
            self.say(f"{entry.total.source} {entry.total.table}: merge failed (retrying every cycle): {reason}")
            if exc is not None:
                log.error("%s %s: merge failed", entry.total.source, entry.total.table, exc_info=exc)
            entry.error_logged = now
        entry.error = reason


class FatalMergeError(MergeError):
    """The continuous merge cannot go on in this process (its Spark session died)."""


def _session_gone(spark: SparkSession, exc: BaseException) -> bool:
    from py4j.protocol import Py4JNetworkError
    if isinstance(exc, (Py4JNetworkError, ConnectionRefusedError)):
        return True
    try:
        return spark.sparkContext._jsc is None or spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - the gateway itself is gone
        return True
