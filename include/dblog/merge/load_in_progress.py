"""A first load in progress: merged once its dump has read the table, not piecemeal.

A continuous merge runs a cycle every few seconds, and a dump's watermarks move the capture's
checkpoint all the time. Without this wait, its first cycle during a dump takes the few chunks
ready then as the table's first load, and every later cycle merges the next chunks into stored
buckets: the general merge, reading and rewriting what a first load adopts as it is (`adopt`).

So a merge of a table that stores nothing commits nothing, and says what it waits for, while
a range dump of it that staged chunks (not a key-list repair, not cancelled) either

- is still reading it (running, paused, or between a crashed worker and its retry), or
- has read it, and some of its staged chunks still wait for the capture to pass their windows
  (the first load would otherwise leave its last windows to the general merge);

and only while that dump's progress was written within `DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS` (plus
its throttle's pause between windows): a dump that stands still (paused for long, a stuck read,
a worker nobody resumes) no longer holds the table back, which then fills in as its chunks
become ready. The table's events wait with the load (the load is merged with them; retention
keeps every event no merge took yet).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..coordination import store as paths
from ..coordination.store import StateStore
from ..settings import settings
from ..snapshot.dump import CANCELLED, DONE, RUNNING, read_progress
from ..snapshot.dump_spec import DumpError
from ..stagedlog.staged_log import StagedLog
from ..warehouse.merged_state import TableState


@dataclass(frozen=True)
class LoadInProgress:
    """The dump a table's first load waits for, and how far it got."""
    dump_id: str
    rows: int
    chunks: int
    estimated_rows: int | None
    read: bool   # the dump has read the table: its last windows wait for the capture

    def note(self) -> str:
        if self.read:
            return (f"first load of dump {self.dump_id} ({self.rows:,} rows, {self.chunks:,} chunks) waits for the "
                    "capture to pass its last windows, to be merged whole")
        of = f" of about {self.estimated_rows:,}" if self.estimated_rows else ""
        return (f"first load in progress: dump {self.dump_id} has read {self.rows:,}{of} rows ({self.chunks:,} "
                "chunks); the table is merged once the dump has read it, not piecemeal "
                "(DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS=0 merges it as it goes)")


def in_progress(store: StateStore, staged: StagedLog, source: str, table: str, state: TableState | None,
                unready: set[str] | None = None, now: float | None = None) -> LoadInProgress | None:
    """The first load this merge of `table` waits for; None: merge now. `unready`: the dumps whose
    staged chunks this merge found still waiting for the capture (None: not listed yet, so only a
    dump being read counts)."""
    limit = settings().merge.first_load_wait_seconds
    if limit <= 0 or (state is not None and not state.stores_nothing):
        return None
    now = time.time() if now is None else now
    for dump_id in staged.chunk_dumps(source, table):
        control = store.get(paths.control_path(source, dump_id)) or {}
        if control.get("state", CANCELLED) == CANCELLED:   # (also a dump ZooKeeper forgot)
            continue
        try:
            progress = read_progress(store, source, dump_id, table)
        except DumpError:   # a record of another version: not waited for, never a failed merge
            continue
        if progress is None or progress.status not in (RUNNING, DONE):
            continue
        if progress.status == DONE and (unready is None or dump_id not in unready):
            continue
        if (store.get(paths.dump_path(source, dump_id)) or {}).get("keys") is not None:
            continue   # a key-list dump (a repair) is no table's load
        moved = store.modified(paths.table_progress_path(source, dump_id, table))
        if moved is None or now - moved > limit + float(control.get("delay_s") or 0):
            continue   # it stands still: the table fills in as its chunks become ready
        return LoadInProgress(dump_id, progress.rows, progress.chunks, progress.estimated_rows,
                              read=progress.status == DONE)
    return None
