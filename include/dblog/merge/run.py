"""A `dblog merge` run, whoever starts it: the `dblog merge` command and the spark-submit job
(`spark_jobs/merge.py`, what the Airflow merge task submits) both call `run_merge`.

A run checks its options and tables before anything is started or written (a merge lock, a
catalog entry, a Spark session), then merges each table once, or keeps merging in one warm
session (`continuous`). What it did crosses to the Airflow task as a report file (`MergeReport`).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import connections
from ..coordination.store import open_store
from ..errors import UsageError
from ..settings import ConfigError, settings
from ..snapshot.dump_spec import qualified
from ..stagedlog.staged_log import StagedLog
from .merge_result import MergeResult

SLICE_FAILED = 3   # exit code of a continuous merge some table's last merge failed in; its report says which


@dataclass
class MergeOptions:
    """What `dblog merge` is asked: `sources` empty is every configured source, `tables` empty is
    every staged table; `every` and `duration` only with `continuous`."""
    sources: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    bucket_rows: int | None = None
    master: str | None = None
    continuous: bool = False
    every: float | None = None
    duration: float | None = None

    def check(self) -> None:
        tuned = settings()
        tuned.check_option("--bucket-rows", "merge.bucket_rows",
                           tuned.merge.bucket_rows if self.bucket_rows is None else self.bucket_rows)
        if self.continuous:
            if self.every is not None:
                tuned.check_option("--every", "merge.continuous_every_seconds", self.every)
            if self.duration is not None and self.duration <= 0:
                raise UsageError(f"--duration must be > 0 seconds, got {self.duration:g} (leave it out to run until "
                                 "stopped)")
        elif self.duration is not None or self.every is not None:
            raise UsageError("--duration and --every need --continuous (a single merge ends when it is done)")


def run_merge(options: MergeOptions, say: Callable[[str], None] = print,
              on_table: Callable[[int, int], None] | None = None) -> list[MergeResult]:
    """Merge once (a summary line per table to `say`, then `on_table(tables merged, of)`), or keep
    merging until `options.duration`
    ends or SIGTERM/SIGINT (a line per cycle that committed, then the slice's). A continuous run's
    failing tables come back with their `error` set; any other failure raises."""
    options.check()
    from ..spark.session import LONG_RUNNING, session
    from ..warehouse.tables import Warehouse
    from .job import merge_table, staged_tables
    sources = [connections.source(s) for s in options.sources or connections.source_ids()]
    tables = {src.name: [qualified(src, t) for t in options.tables] or None for src in sources}
    staged, warehouse = StagedLog(connections.staging_root()), Warehouse(connections.warehouse_root())
    for src in sources:
        _known_tables(src, staged, tables[src.name] or [])
    parallel = settings().merge.parallel_tables
    spark = session("dblog-merge", options.master, LONG_RUNNING if options.continuous or parallel > 1 else None)
    with open_store() as store:
        if options.continuous:
            return _merge_continuously(options, say, spark, store, staged, warehouse, tables)
        pairs = [(source, t) for source, chosen in tables.items() for t in chosen or staged_tables(staged, source)]

        def merge(source: str, table: str) -> MergeResult:
            if parallel > 1:   # a fair-scheduler pool per thread: a small table's jobs are not queued behind a big one's
                spark.sparkContext.setLocalProperty("spark.scheduler.pool", threading.current_thread().name)
            return merge_table(spark, store, staged, warehouse, source, table, bucket_rows=options.bucket_rows)
        return merge_each(pairs, merge, parallel, say, on_table)


def merge_each(pairs: list[tuple[str, str]], merge: Callable[[str, str], MergeResult], parallel: int,
               say: Callable[[str], None], on_table: Callable[[int, int], None] | None) -> list[MergeResult]:
    """Each table merged once, `parallel` side by side (one table's driver-side work, planning and
    commits, overlaps another's Spark tasks), a line to `say` as each ends; the results in `pairs`
    order. The first failure stops the tables not started yet and is raised once the ones under way
    end, as a serial run raises it."""
    done, said = 0, threading.Lock()

    def one(source: str, table: str) -> MergeResult:
        nonlocal done
        result = merge(source, table)
        with said:   # a line never runs into another
            done += 1
            say(result.summary())
            if on_table is not None:
                on_table(done, len(pairs))
        return result
    if parallel <= 1 or len(pairs) <= 1:
        return [one(s, t) for s, t in pairs]
    with ThreadPoolExecutor(min(parallel, len(pairs)), thread_name_prefix="dblog-merge") as pool:
        running = [pool.submit(one, s, t) for s, t in pairs]
        futures.wait(running, return_when=futures.FIRST_EXCEPTION)
        if any(f.done() and f.exception() is not None for f in running):
            for f in running:
                f.cancel()
        futures.wait(running)
    failed = next((f.exception() for f in running if not f.cancelled() and f.exception() is not None), None)
    if failed is not None:
        raise failed
    return [f.result() for f in running]


def _merge_continuously(options: MergeOptions, say: Callable[[str], None], spark, store, staged, warehouse,
                        tables: dict[str, list[str] | None]) -> list[MergeResult]:
    from .continuous import ContinuousMerge
    stop = threading.Event()

    def on_signal(*_):
        if stop.is_set():   # asked twice: do not wait for the cycle under way
            raise KeyboardInterrupt
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    every = options.every if options.every is not None else settings().merge.continuous_every_seconds
    say(f"continuous merge of {', '.join(tables)} every {every:g}s"
        + ("" if options.duration is None else f" for {options.duration:g}s"))
    merge = ContinuousMerge(spark, store, staged, warehouse, tables, every=every, bucket_rows=options.bucket_rows,
                            say=say, stop=stop)
    report = merge.run(options.duration)
    cycles = sorted(report.cycle_seconds)
    results = report.results()
    say(f"slice done: {report.cycles} cycles, {report.busy_cycles} merged something (cycle time p50 "
        f"{cycles[len(cycles) // 2] if cycles else 0:.1f}s, max {cycles[-1] if cycles else 0:.1f}s); "
        f"{report.merges} table merges, {report.skipped} passed over with nothing new; "
        + "; ".join(f"{r.source} {r.table}: {r.commits} snapshots, {r.log_events} log events, {r.chunks} chunks"
                    for r in results))
    return results


def _known_tables(source, staged: StagedLog, tables: list[str]) -> None:
    """Refuse tables neither the source nor the staged log knows, before anything is started or
    written."""
    from .job import staged_tables
    known = set(staged_tables(staged, source.name))
    unknown = [t for t in tables if t not in known]
    if unknown:
        try:
            known |= set(source.tables())
        finally:
            source.close()
        unknown = [t for t in unknown if t not in known]
    if unknown:
        raise ConfigError(f"{source.name}: no table {', '.join(unknown)}; known tables: "
                          f"{', '.join(sorted(known)) or 'none'}")
