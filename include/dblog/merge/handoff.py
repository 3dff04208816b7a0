"""A dump run's merge, left to the continuous merge when one runs.

The dump DAG ends in a merge task. Where `dblog_merge_continuous` runs (the default deployment),
starting a Spark application there would merge the very tables the continuous merge merges a few
seconds later, take their locks from it, and cost a Spark start (20-30 s of a busy core) for
every dump run. So the task first asks `handoff`: while the source's continuous merge beats
(`coordination.merge_beat`), covers the dump's tables and does not fail on them, the task waits
until it has taken every chunk of the run's dumps, then reports them as a merge of its own would.
Otherwise (no continuous merge, one silent for `DBLOG_MERGE_HANDOFF_SECONDS`, one that fails on
a table of the dump or leaves it out) the task merges itself, saying why.

A table of a dump is merged when the merges' record of the dump counts every chunk it staged
(`store.dump_merged_path`), or when no chunk mark of the table is left (`changed_tables`: the
continuous merge clears them once nothing of the table waits), which also covers a merge that
crashed between its commit and its count.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..coordination import changed_tables
from ..coordination import store as paths
from ..coordination.merge_beat import read_beat
from ..coordination.store import StateStore
from ..snapshot.dump import read_progress_many

MERGED, WAITING, MERGE_HERE = "merged", "waiting", "merge here"


@dataclass(frozen=True)
class DumpTable:
    """A table of a dump a run registered."""
    source: str
    dump_id: str
    table: str

    def __str__(self) -> str:
        return f"{self.source} {self.table} (dump {self.dump_id})"


@dataclass(frozen=True)
class Handoff:
    """What the merge task does now: nothing (MERGED), wait (WAITING, for `pending`) or merge
    itself (MERGE_HERE, `reason` says why)."""
    state: str
    reason: str = ""
    pending: tuple[DumpTable, ...] = ()


def handoff(store: StateStore, tables: list[DumpTable], grace: float, now: float) -> Handoff:
    """See the module doc; `grace`: how long a continuous merge may stay silent (a handover
    between two slices) before it no longer counts; `now`: unix time."""
    pending: list[DumpTable] = []
    for source in sorted({t.source for t in tables}):
        mine = [t for t in tables if t.source == source]
        beat = read_beat(store, source)
        if beat is None:
            return Handoff(MERGE_HERE, f"no continuous merge runs for {source}")
        if beat.age(now) > grace:
            return Handoff(MERGE_HERE, f"the continuous merge of {source} has been silent for {beat.age(now):.0f} s "
                                       "(is dblog_merge_continuous paused?)")
        left_out = [t.table for t in mine if not beat.covers(t.table)]
        if left_out:
            return Handoff(MERGE_HERE, f"the continuous merge of {source} does not merge {', '.join(left_out)}")
        failing = [f"{t.table}: {beat.failing[t.table]}" for t in mine if t.table in beat.failing]
        if failing:
            return Handoff(MERGE_HERE, f"the continuous merge of {source} keeps failing on {'; '.join(failing)}")
        marked = changed_tables.marks(store, source)
        for t in mine:
            if t.table in marked and merged_chunks(store, t) < staged_chunks(store, t):
                pending.append(t)
    return Handoff(WAITING, pending=tuple(pending)) if pending else Handoff(MERGED)


def staged_chunks(store: StateStore, t: DumpTable) -> int:
    progress = read_progress_many(store, t.source, t.dump_id, [t.table])[t.table]
    return 0 if progress is None else progress.chunks


def merged_chunks(store: StateStore, t: DumpTable) -> int:
    return int((store.get(paths.dump_merged_path(t.source, t.dump_id, t.table)) or {}).get("chunks", 0))
