"""Wait, in the triggerer, until the continuous merge has taken every chunk of a run's dumps.

The merge task of a dump run defers here when a continuous merge runs (`dblog.merge.handoff`).
The wait ends merged, or with the reason the task must merge itself after all: the continuous
merge fell silent past its grace, failed on a table of the dump, or counted no new chunk of the
dump for `timeout` seconds (`HandoffWait`). Every `log_every` seconds it logs what it still waits
for. It carries only non-secret facts (ZooKeeper address, the dumps' tables), so it needs no
connection lookup.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class ContinuousMergeTookTrigger(BaseTrigger):
    """`tables`: [source, dump id, table] of each table the run dumped."""

    def __init__(self, tables: list[list[str]], zookeeper_uri: str, grace: float, timeout: float,
                 poll_interval: float = 1.0, log_every: float = 30.0, started_at: float | None = None):
        super().__init__()
        self.tables, self.zookeeper_uri = [list(t) for t in tables], zookeeper_uri
        self.grace, self.timeout = grace, timeout
        self.poll_interval, self.log_every = poll_interval, log_every
        self.started_at = time.time() if started_at is None else started_at  # survives a triggerer restart

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("dblog_airflow.triggers.merge.ContinuousMergeTookTrigger",
                {"tables": self.tables, "zookeeper_uri": self.zookeeper_uri, "grace": self.grace,
                 "timeout": self.timeout, "poll_interval": self.poll_interval, "log_every": self.log_every,
                 "started_at": self.started_at})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dblog.connections import zookeeper
        from dblog.coordination.store import StateStore
        from dblog.merge.handoff import MERGE_HERE, WAITING, DumpTable, HandoffWait
        wait = HandoffWait([DumpTable(*t) for t in self.tables], self.grace, self.timeout)
        zk = zookeeper(self.zookeeper_uri)
        store = StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout)
        try:
            await asyncio.to_thread(store.start)
        except Exception as exc:  # noqa: BLE001 - the task merges itself, saying why
            yield TriggerEvent({"state": MERGE_HERE, "reason": f"ZooKeeper could not be reached ({exc})"})
            return
        try:
            next_log = 0.0
            while True:
                outcome = await asyncio.to_thread(wait.poll, store, time.time())
                if outcome.state != WAITING:
                    yield TriggerEvent({"state": outcome.state, "reason": outcome.reason,
                                        "waited": time.time() - self.started_at})
                    return
                if time.monotonic() >= next_log:
                    self.log.info("waited %.0f s for the continuous merge to take the chunks of %s (%d merged so far)%s",
                                  time.time() - self.started_at, ", ".join(map(str, outcome.pending)), outcome.merged,
                                  f"; {outcome.reason}" if outcome.reason else "")
                    next_log = time.monotonic() + self.log_every
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.stop)
