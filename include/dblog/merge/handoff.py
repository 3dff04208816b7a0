"""A dump run's merge, left to the continuous merge when one runs.

The dump DAG ends in a merge task. Where `dblog_merge_continuous` runs (the default deployment),
starting a Spark application there would merge the very tables the continuous merge merges a few
seconds later, take their locks from it, and cost a Spark start (20-30 s of a busy core) for
every dump run. So the task first asks `handoff`: while the source's continuous merge beats
(`coordination.merge_beat`), covers the dump's tables and does not fail on them, the task waits
until the merges' record of each dump (`store.dump_merged_path`) counts every chunk the dump
staged, then reports them as a merge of its own would. Otherwise (no continuous merge, one silent
for `DBLOG_MERGE_HANDOFF_SECONDS`, one that fails on a table of the dump or leaves it out) the
task merges itself, saying why; and also when the wait stops moving (`HandoffWait`): chunks the
merges take without counting them for the dump (a chunk that waits for a rebuild, a dump another
dump superseded, a count a merge lost by crashing between its commit and its record) must not
hold the run for ever. The other way, a chunk file a failed Spark window job staged late counts
for the merges but not for the dump's progress, so the count can complete a cycle before the
dump's last chunk is merged: the task then reports seconds early.

A chunk is merged by a merge that read the log up to the capture's checkpoint, which had passed
the chunk's HW: once the dump's last chunk is counted, its table holds every change up to the
dump's end. Changes after it follow in the continuous merge's next cycles.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
    """What the merge task does now: nothing (MERGED), wait (WAITING, for `pending`, of whose
    chunks the merges counted `merged` so far) or merge itself (MERGE_HERE, `reason` says why)."""
    state: str
    reason: str = ""
    pending: tuple[DumpTable, ...] = ()
    merged: int = 0


def handoff(store: StateStore, tables: list[DumpTable], grace: float, now: float) -> Handoff:
    """See the module doc; `grace`: how long a continuous merge may stay silent (a handover
    between two slices) before it no longer counts; `now`: unix time."""
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
            return Handoff(MERGE_HERE, f"the continuous merge of {source} fails on {'; '.join(failing)}")
    counts = chunk_counts(store, tables)
    pending = tuple(t for t in tables if counts[t][0] < counts[t][1])
    if not pending:
        return Handoff(MERGED)
    return Handoff(WAITING, pending=pending, merged=sum(counts[t][0] for t in pending))


def chunk_counts(store: StateStore, tables: list[DumpTable]) -> dict[DumpTable, tuple[int, int]]:
    """Per table: (chunks the merges counted, chunks the dump staged), read per dump in one batch."""
    out: dict[DumpTable, tuple[int, int]] = {}
    for source, dump_id in sorted({(t.source, t.dump_id) for t in tables}):
        mine = [t for t in tables if (t.source, t.dump_id) == (source, dump_id)]
        progress = read_progress_many(store, source, dump_id, [t.table for t in mine])
        merged = store.get_many([paths.dump_merged_path(source, dump_id, t.table) for t in mine])
        for t in mine:
            record = merged[paths.dump_merged_path(source, dump_id, t.table)] or {}
            staged = progress[t.table]
            out[t] = (int(record.get("chunks", 0)), 0 if staged is None else staged.chunks)
    return out


@dataclass
class HandoffWait:
    """The wait as the trigger runs it, one `poll` at a time: `handoff`, ended as MERGE_HERE once
    the merges have counted no new chunk of the pending tables for `stall` seconds while no merge
    holds any of their locks (a big table's merge counts only at its commit), or once ZooKeeper
    has stayed unreadable that long. Both clocks start at this wait's first poll: a triggerer
    that restarts it starts them again."""
    tables: list[DumpTable]
    grace: float
    stall: float
    _progress_at: float | None = field(default=None, repr=False)
    _unread_since: float | None = field(default=None, repr=False)
    _merged: int = field(default=-1, repr=False)
    _pending: tuple[DumpTable, ...] = field(default=(), repr=False)

    def poll(self, store: StateStore, now: float) -> Handoff:
        if self._progress_at is None:
            self._progress_at, self._pending = now, tuple(self.tables)
        try:
            outcome = handoff(store, self.tables, self.grace, now)
            merging = outcome.state == WAITING and any(
                store.lock_holders(paths.merge_lock(t.source, t.table)) for t in outcome.pending)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away or a record unreadable: said, and waited out
            self._unread_since = self._unread_since or now
            if now - self._unread_since >= self.stall:
                return Handoff(MERGE_HERE, f"the continuous merge's progress could not be read for "
                                           f"{now - self._unread_since:.0f} s ({type(exc).__name__}: {exc})")
            return Handoff(WAITING, f"not read this time ({type(exc).__name__}: {exc})", self._pending,
                           max(self._merged, 0))
        self._unread_since = None
        if outcome.state != WAITING:
            return outcome
        if outcome.merged != self._merged or merging:
            self._merged, self._progress_at = outcome.merged, now
        self._pending = outcome.pending
        if now - self._progress_at >= self.stall:
            return Handoff(MERGE_HERE, f"the continuous merge has counted no new chunk of "
                                       f"{', '.join(map(str, outcome.pending))} for {now - self._progress_at:.0f} s")
        return outcome
