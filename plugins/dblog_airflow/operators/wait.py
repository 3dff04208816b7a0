"""Wait (deferred, in the triggerer) until the capture has staged everything committed so far."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from dblog.settings import settings
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.triggers.capture import CaptureReachedTrigger


class WaitForCaptureOperator(BaseOperator):
    """Write a sync watermark and wait (deferred) until the capture has checkpointed past it.

    After that, every chunk staged before this task started has its high watermark in the staged
    log below the checkpoint, so the merge that follows includes it. The wait logs the capture's
    state every `log_every` seconds and fails after `timeout_seconds` saying why (capture stopped,
    or running but behind) and what to do, or sooner once no capture has run for
    `DBLOG_CAPTURE_STOPPED_GRACE_SECONDS`. Returns the position the capture passed.

    :param source_conn_id: Connection id of the source database (templated).
    :param poll_interval: Seconds between two reads of the capture's checkpoint.
    :param timeout_seconds: How long to wait; None: `DBLOG_CAPTURE_WAIT_TIMEOUT`.
    :param log_every: Seconds between two log lines on the capture's state while waiting.
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the checkpoint.
    """

    template_fields: Sequence[str] = ("source_conn_id",)

    def __init__(self, *, source_conn_id: str, poll_interval: float = 1.0, timeout_seconds: float | None = None,
                 log_every: float = 30.0, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.poll_interval = source_conn_id, poll_interval
        self.timeout_seconds = (settings().capture.wait_timeout_seconds if timeout_seconds is None
                                else timeout_seconds)
        self.log_every, self.zookeeper_conn_id = log_every, zookeeper_conn_id

    def execute(self, context) -> str:
        from dblog.capture.capture_loop import sync_point
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source = hook.get_source()
        mark = sync_point(source)
        source.close()
        self.log.info("%s: sync watermark %s written; waiting up to %.0fs for the capture to pass it",
                      source.name, mark, self.timeout_seconds)
        # The trigger enforces the timeout itself, so that it can say why; Airflow's own deferral
        # timeout is a backstop a little later (it only says "timed out").
        self.defer(trigger=self.trigger(hook, source.name, mark), method_name="execute_complete",
                   timeout=dt.timedelta(seconds=self.timeout_seconds + 120))

    def trigger(self, hook: DBLogHook, source: str, mark: str) -> CaptureReachedTrigger:
        """The wait, as the triggerer runs it: the ZooKeeper and staging root resolved here, so
        that the trigger needs no connection lookup (and carries no credential: it is stored)."""
        return CaptureReachedTrigger(source, mark, hook.zookeeper_uri(), hook.staging_root(), self.poll_interval,
                                     self.timeout_seconds, self.log_every)

    def execute_complete(self, context, event: dict) -> str:
        if event.get("error"):
            raise AirflowFailException(event["error"])
        self.log.info("%s: capture passed the sync watermark at %s", event["source"], event["position"])
        return event["position"]
