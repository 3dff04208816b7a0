"""Capture a source's change stream for one time slice, then return (the DAG is `@continuous`).

Resuming from the ZooKeeper checkpoint makes slices seamless. The capture lease elects one leader
per source across every Airflow deployment sharing the ZooKeeper: a task that cannot get it
within its slice stays standby and succeeds, so a standby deployment is green, not failing.
While it leads, the capture beats (`dblog.coordination.health`): the DBLog page and the metrics read that.
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseOperator

from dblog.settings import settings
from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.params import check_run

LOG_EVERY_S = 60.0  # a progress line per minute keeps a long slice's log readable


@contextmanager
def _hang_guard(seconds: float, quiet: float, progress: Callable[[], int]) -> Iterator[None]:
    """Fail the slice if it overruns `seconds` and then stages nothing (`progress`: events staged
    so far) for `quiet` seconds: with one run at a time, a capture stuck in a read would otherwise
    hold the DAG for ever (shown as `stalled`), and the retry starts a fresh capture. A slice
    still staging past its length is not hung: it is inside a transaction larger than a slice
    (it ends only between transactions), whose pieces it keeps staging."""
    last: list[int | None] = [None]

    def hung(*_):
        now = progress()
        if last[0] is None or now > last[0]:
            last[0] = now
            signal.alarm(max(1, int(quiet)))
            return
        raise TimeoutError(f"the capture slice ran past its length and staged nothing for {quiet:.0f} s: it looks "
                           "hung; failing it so that a retry captures afresh")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class CaptureOperator(BaseOperator):
    """Capture one source's change stream into the staged log for one time slice, under the
    source's capture lease, resuming from the ZooKeeper checkpoint. Returns `{"leader": False}` when
    another deployment's capture held the lease all slice (standby: the task succeeds), else the
    slice's stats with the capture's lag and position. A slice running far past its length fails
    as hung, so that its retry captures afresh; a bad run conf fails it at once.

    :param source_conn_id: Connection id of the source database (templated).
    :param slice_seconds: How long the slice captures; None: `DBLOG_CAPTURE_SLICE_SECONDS` (templated).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the checkpoint and lease.
    """

    template_fields: Sequence[str] = ("source_conn_id", "slice_seconds")

    def __init__(self, *, source_conn_id: str, slice_seconds: float | str | None = None,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id
        self.slice_seconds = settings().capture.slice_seconds if slice_seconds is None else slice_seconds
        self.zookeeper_conn_id = zookeeper_conn_id
        self._capture: Any = None  # the running Capture (the engine loads in execute)

    def execute(self, context) -> dict:
        from dblog.capture.capture_loop import Capture
        from dblog.coordination.health import capture_health
        from dblog.coordination.store import LeaseTimeout
        check_run(self, context, slice_seconds=float(self.slice_seconds))
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source, seconds = hook.get_source(), float(self.slice_seconds)
        with hook.store() as store:
            before = capture_health(store, source.name)
            if before.leader:
                self.log.info("%s: leader is %s; waiting up to %.0fs as standby", source.name, before.leader, seconds)
            self.log.info("%s: capture %s", source.name, before.describe())
            self._capture = capture = Capture(source, store, hook.staged(), on_beat=self._reporter(source.name),
                                              warehouse=hook.warehouse())
            try:
                # The lease wait, then the slice; past both, a capture that stages nothing for this long is hung.
                with _hang_guard(2 * seconds, settings().capture.hung_after_seconds, lambda: capture.stats.events):
                    stats = capture.run(duration=seconds, lease_timeout=seconds)
            except LeaseTimeout:
                self.log.info("%s: standby; another deployment's capture held the lease all slice", source.name)
                return {"leader": False}
            after = capture_health(store, source.name)
        self.log.info("%s: slice done: %d events in %d transactions, %d segments; %s (max lag %.1fs), "
                      "longest read stall %.2fs", source.name, stats.events, stats.transactions, stats.segments,
                      after.describe(), stats.max_lag_s, stats.max_stall_s)
        if stats.repairs:
            self.log.warning("%s: %d repair request(s) this slice (partial row images, statement-logged writes, "
                             "schema changes, new tables); "
                             "see the warnings above and `dblog status`", source.name, stats.repairs)
            metrics.incr("capture.repair_requests", stats.repairs, (source.name,), source=source.name)
        return {"leader": True, **vars(stats), "lag_s": after.lag_s, "position": after.readable_position}

    def _reporter(self, source: str):
        """Called on every heartbeat of the capture: metrics each time, a log line each minute."""
        last = {"t": time.monotonic(), "events": 0, "logged": 0.0}

        def report(lag: float | None) -> None:
            stats, now = self._capture.stats, time.monotonic()
            rate = (stats.events - last["events"]) / max(now - last["t"], 1e-9)
            if lag is not None:
                metrics.gauge("capture.lag_seconds", lag, (source,), source=source)
            metrics.gauge("capture.events_per_second", round(rate, 1), (source,), source=source)
            if stats.events > last["events"]:
                metrics.incr("capture.events", stats.events - last["events"], (source,), source=source)
            if now - last["logged"] >= LOG_EVERY_S:
                self.log.info("%s: capturing; %d events staged this slice, lag %ss, position %s", source,
                              stats.events, lag, stats.position)
                last["logged"] = now
            last.update(t=now, events=stats.events)
        return report

    def on_kill(self) -> None:
        if self._capture is not None:
            self._capture.stop()
