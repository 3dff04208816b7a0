"""Wait, in the triggerer, until the capture has staged a sync watermark and checkpointed past it.

Deferring frees the worker slot while a dump's last chunks travel through the change stream.
The wait is never silent: every `log_every` seconds it logs the capture's state (these lines show
in the task's log), and after `timeout` seconds it ends with the reason, which the task raises.
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


class CaptureReachedTrigger(BaseTrigger):
    def __init__(self, source: str, mark: str, zookeeper_uri: str, staging: str, poll_interval: float = 1.0,
                 timeout: float | None = None, log_every: float = 30.0, started_at: float | None = None):
        super().__init__()
        self.source, self.mark = source, mark
        self.zookeeper_uri, self.staging = zookeeper_uri, staging
        self.poll_interval, self.log_every = poll_interval, log_every
        self.timeout = settings().capture.wait_timeout_seconds if timeout is None else timeout
        self.started_at = time.time() if started_at is None else started_at  # survives a triggerer restart

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("dblog_airflow.triggers.capture.CaptureReachedTrigger",
                {"source": self.source, "mark": self.mark, "zookeeper_uri": self.zookeeper_uri,
                 "staging": self.staging, "poll_interval": self.poll_interval, "timeout": self.timeout,
                 "log_every": self.log_every, "started_at": self.started_at})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dblog.connections import zookeeper
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
                if waited >= self.timeout:
                    reason = await asyncio.to_thread(self._why, store, waited)
                    yield TriggerEvent({"source": self.source, "position": None, "error": reason})
                    return
                if time.monotonic() >= next_log:
                    health = await asyncio.to_thread(self._health, store)
                    self.log.info("%s: waiting %.0fs for the capture to pass sync watermark %s; capture %s",
                                  self.source, waited, self.mark, health.describe())
                    next_log = time.monotonic() + self.log_every
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.stop)

    def _reached(self, store, staged) -> str | None:
        from dblog.capture.capture_loop import caught_up
        return caught_up(store, staged, self.source, self.mark)

    def _health(self, store):
        from dblog.coordination.health import capture_health
        return capture_health(store, self.source)

    def _why(self, store, waited: float) -> str:
        from dblog.coordination.health import sync_timeout_reason
        return sync_timeout_reason(self._health(store), waited,
                                   start="start or unpause the dblog_capture DAG (or run `dblog capture`)",
                                   behind="see its task log, or raise the wait's timeout")
