"""Is a continuous merge running for a source? Its heartbeat in ZooKeeper, one record per source.

A continuous merge (`dblog.merge.continuous`) writes it every `BEAT_S` while it runs (from a
thread of its own, so a long merge is no silence) and at once when the set of tables it fails on
changes: when, which tables it merges, and which of them failed last. A dump run's merge task
reads it (`dblog.merge.handoff`) to leave its dump's chunks to that merge instead of starting a
Spark application of its own.

The record outlives the process on purpose: between two slices of `dblog_merge_continuous` (a
Spark start) no process beats, and a waiter must tell that handover from a merge that is gone.
It does so by age alone (`MergeBeat.age`), on the writer's and the reader's clocks, as the
capture's heartbeat does (`health`): clocks skewed by more than the grace make a waiter merge
itself sooner or later than it should, never wrongly (its wait is bounded, `handoff.HandoffWait`).
One record per source: two continuous merges of one source (a second deployment's) overwrite
each other's, which only matters when they merge different tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .store import StateStore

BEAT_S = 2.0   # the most often a continuous merge rewrites its record


def beat_path(source: str) -> str:
    return f"/{source}/continuous_merge"   # (not under merge/, where each table has its lock node)


@dataclass(frozen=True)
class MergeBeat:
    """A continuous merge's word on a source: it was running at `at` (unix time), merges `tables`
    (None: every table of the source) and failed last on `failing` (table -> reason)."""
    at: float
    tables: tuple[str, ...] | None = None
    failing: dict[str, str] = field(default_factory=dict)

    def covers(self, table: str) -> bool:
        return self.tables is None or table in self.tables

    def age(self, now: float) -> float:
        return max(0.0, now - self.at)

    def record(self) -> dict:
        return {"at": self.at, "tables": None if self.tables is None else list(self.tables),
                "failing": dict(self.failing)}

    @classmethod
    def of(cls, record: dict) -> MergeBeat:
        tables = record.get("tables")
        return cls(float(record["at"]), None if tables is None else tuple(tables), dict(record.get("failing") or {}))


def beat(store: StateStore, source: str, state: MergeBeat) -> None:
    store.put(beat_path(source), state.record())


def read_beat(store: StateStore, source: str) -> MergeBeat | None:
    """The source's last heartbeat; None when no continuous merge ever ran for it (or its record
    cannot be read: then nothing is left to it)."""
    record = store.get(beat_path(source))
    try:
        return None if not isinstance(record, dict) else MergeBeat.of(record)
    except (KeyError, TypeError, ValueError):
        return None
