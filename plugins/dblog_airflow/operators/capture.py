"""Capture a source's change stream for one time slice, then return (the DAG is `@continuous`).

Resuming from the ZooKeeper checkpoint makes slices seamless. The capture lease elects one leader
per source across every Airflow deployment sharing the ZooKeeper: a task that cannot get it
within its slice stays standby and succeeds, so a standby deployment is green, not failing.
"""
from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook


class CaptureOperator(BaseOperator):
    template_fields: Sequence[str] = ("source_conn_id", "slice_seconds")

    def __init__(self, *, source_conn_id: str, slice_seconds: float | str = 300,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id
        self.slice_seconds = slice_seconds
        self.zookeeper_conn_id = zookeeper_conn_id
        self._capture = None

    def execute(self, context) -> dict:
        from kazoo.exceptions import LockTimeout

        from dblog.capture import Capture
        from dblog.status import capture_status
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source, seconds = hook.get_source(), float(self.slice_seconds)
        with hook.store() as store:
            before = capture_status(store, source)
            if before["leaders"]:
                self.log.info("%s: leader is %s; waiting up to %.0fs as standby", source.name,
                              before["leaders"][0], seconds)
            self.log.info("%s: checkpoint %s, lag %ss", source.name, before["position"], before["lag_s"])
            self._capture = Capture(source, store, hook.staged())
            try:
                stats = self._capture.run(duration=seconds, lease_timeout=seconds)
            except LockTimeout:
                self.log.info("%s: standby; another deployment's capture held the lease all slice", source.name)
                return {"leader": False}
            after = capture_status(store, source)
        self.log.info("%s: slice done: %d events in %d transactions, %d segments; position %s, lag %ss "
                      "(max %.1fs), longest read stall %.2fs", source.name, stats.events, stats.transactions,
                      stats.segments, after["position"], after["lag_s"], stats.max_lag_s, stats.max_stall_s)
        return {"leader": True, **vars(stats), "lag_s": after["lag_s"]}

    def on_kill(self) -> None:
        if self._capture is not None:
            self._capture.stop()
