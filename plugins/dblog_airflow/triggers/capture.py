"""Wait, in the triggerer, until the capture has staged a sync watermark and checkpointed past it.

Deferring frees the worker slot while a dump's last chunks travel through the change stream.
The wait is never silent: every `log_every` seconds it logs the capture's state (these lines show
in the task's log), and after `timeout` seconds it ends with the reason, which the task raises. It
ends sooner, with the same reason, once no capture has run for `stopped_grace` seconds of it (a
paused dblog_capture DAG): waiting out the timeout would not help.
The trigger carries only non-secret facts (ZooKeeper address, staging root, source id, mark), so
it needs no Airflow connection lookup inside the event loop.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from dblog.settings import settings

START = "start or unpause the dblog_capture DAG (or run `dblog capture`)"
BEHIND = "see its task log, or raise the wait's timeout"


class CaptureReachedTrigger(BaseTrigger):
    def __init__(self, source: str, mark: str, zookeeper_uri: str, staging: str, poll_interval: float = 1.0,
                 timeout: float | None = None, log_every: float = 30.0, started_at: float | None = None,
                 stopped_grace: float | None = None):
        super().__init__()
        self.source, self.mark = source, mark
        self.zookeeper_uri, self.staging = zookeeper_uri, staging
        self.poll_interval, self.log_every = poll_interval, log_every
        self.timeout = settings().capture.wait_timeout_seconds if timeout is None else timeout
        self.stopped_grace = settings().capture.stopped_grace_seconds if stopped_grace is None else stopped_grace
        self.started_at = time.time() if started_at is None else started_at  # survives a triggerer restart

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("dblog_airflow.triggers.capture.CaptureReachedTrigger",
                {"source": self.source, "mark": self.mark, "zookeeper_uri": self.zookeeper_uri,
                 "staging": self.staging, "poll_interval": self.poll_interval, "timeout": self.timeout,
                 "log_every": self.log_every, "started_at": self.started_at,
                 "stopped_grace": self.stopped_grace})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dblog.connections import zookeeper
        from dblog.coordination.health import stopped_for, sync_timeout_reason
        from dblog.coordination.store import StateStore
        from dblog.stagedlog.staged_log import StagedLog
        zk = zookeeper(self.zookeeper_uri)
        store = StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout)
        await asyncio.to_thread(store.start)
        try:
            staged, next_log = StagedLog(self.staging), 0.0
            while True:
                position = await asyncio.to_thread(self._reached, store, staged)
                if position:
                    yield TriggerEvent({"source": self.source, "position": position})
                    return
                waited = time.time() - self.started_at
                health = await asyncio.to_thread(self._health, store)
                if time.monotonic() >= next_log:
                    self.log.info("%s: waiting %.0fs for the capture to pass sync watermark %s; capture %s",
                                  self.source, waited, self.mark, health.describe())
                    next_log = time.monotonic() + self.log_every
                if waited >= self.timeout or stopped_for(health, self.started_at, time.time()) >= self.stopped_grace:
                    reason = sync_timeout_reason(health, waited, start=START, behind=BEHIND)
                    yield TriggerEvent({"source": self.source, "position": None, "error": reason})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.stop)

    def _reached(self, store, staged) -> str | None:
        from dblog.capture.capture_loop import caught_up
        return caught_up(store, staged, self.source, self.mark)

    def _health(self, store):
        from dblog.coordination.health import capture_health
        return capture_health(store, self.source)

