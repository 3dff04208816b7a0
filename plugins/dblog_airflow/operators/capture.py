"""Capture a source's change stream for one time slice, then return (the DAG is `@continuous`).

Resuming from the ZooKeeper checkpoint makes slices seamless. The capture lease elects one leader
per source across every Airflow deployment sharing the ZooKeeper: a task that cannot get it
within its slice stays standby and succeeds, so a standby deployment is green, not failing.
While it leads, the capture beats (`dblog.health`): the DBLog page and the metrics read that.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from airflow.sdk import BaseOperator

from dblog.settings import settings
from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook

LOG_EVERY_S = 60.0  # a progress line per minute keeps a long slice's log readable


@contextmanager
def _hang_guard(seconds: float) -> Iterator[None]:
    """Fail the slice if it overruns: with one run at a time, a capture stuck in a read would
    otherwise hold the DAG for ever (shown as `stalled`). The retry starts a fresh capture."""
    def hung(*_):
        raise TimeoutError(f"the capture slice is still running after {seconds:.0f} s, far past its length: it "
                           "looks hung; failing it so that a retry captures afresh")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class CaptureOperator(BaseOperator):
    template_fields: Sequence[str] = ("source_conn_id", "slice_seconds")

    def __init__(self, *, source_conn_id: str, slice_seconds: float | str | None = None,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id
        self.slice_seconds = settings().capture.slice_seconds if slice_seconds is None else slice_seconds
        self.zookeeper_conn_id = zookeeper_conn_id
        self._capture: Any = None  # the running Capture (the engine loads in execute)

    def execute(self, context) -> dict:
        from dblog.state import LeaseTimeout

        from dblog.capture import Capture
        from dblog.health import capture_health
        from dblog_airflow.operators.dump import check_run
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
                # The lease wait, then the slice; past both by this much, a capture is hung.
                with _hang_guard(2 * seconds + settings().capture.hung_after_seconds):
                    stats = capture.run(duration=seconds, lease_timeout=seconds)
            except LeaseTimeout:
                self.log.info("%s: standby; another deployment's capture held the lease all slice", source.name)
                return {"leader": False}
            after = capture_health(store, source.name)
        self.log.info("%s: slice done: %d events in %d transactions, %d segments; %s (max lag %.1fs), "
                      "longest read stall %.2fs", source.name, stats.events, stats.transactions, stats.segments,
                      after.describe(), stats.max_lag_s, stats.max_stall_s)
        if stats.repairs:
            self.log.warning("%s: %d repair request(s) this slice (partial row images or statement-logged writes); "
                             "see the warnings above and `dblog status`", source.name, stats.repairs)
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
