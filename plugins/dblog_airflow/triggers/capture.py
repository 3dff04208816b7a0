"""Wait, in the triggerer, until the capture has staged a sync watermark and checkpointed past it.

Deferring frees the worker slot while a dump's last chunks travel through the change stream.
The trigger carries only non-secret facts (ZooKeeper address, staging root, source id, mark), so
it needs no Airflow connection lookup inside the event loop.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CaptureReachedTrigger(BaseTrigger):
    def __init__(self, source: str, mark: str, zookeeper_uri: str, staging: str, poll_interval: float = 1.0):
        super().__init__()
        self.source, self.mark = source, mark
        self.zookeeper_uri, self.staging = zookeeper_uri, staging
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("dblog_airflow.triggers.capture.CaptureReachedTrigger",
                {"source": self.source, "mark": self.mark, "zookeeper_uri": self.zookeeper_uri,
                 "staging": self.staging, "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dblog.config import zookeeper
        from dblog.staging import StagedLog
        from dblog.state import StateStore
        zk = zookeeper(self.zookeeper_uri)
        store = StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout)
        await asyncio.to_thread(store.start)
        try:
            staged = StagedLog(self.staging)
            while True:
                position = await asyncio.to_thread(self._reached, store, staged)
                if position:
                    yield TriggerEvent({"source": self.source, "position": position})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.stop)

    def _reached(self, store, staged) -> str | None:
        from dblog.capture import caught_up
        return caught_up(store, staged, self.source, self.mark)
