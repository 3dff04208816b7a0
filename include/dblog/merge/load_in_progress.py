"""A first load in progress: merged once its dump has read the table whole, not piecemeal.

A continuous merge runs a cycle every few seconds, and a dump's watermarks move the capture's
checkpoint all the time. Without this wait, its first cycle during a dump takes the few chunks
ready then as the table's first load, and every later cycle merges the next chunks into stored
buckets: the general merge, reading and rewriting what a first load would adopt as it is
(`adopt`). So while a worker is reading a table the warehouse does not hold yet, and chunks of
that dump are staged, the merge commits nothing and says what it waits for; once the dump has
read the table (or stopped: a cancelled or crashed dump holds no lease), the next merge takes
the whole load in one commit, less the rows its windows drop, with its events over it.

The table's events wait too (the load is merged with them); retention keeps them, as it keeps
every event no merge took yet. `DBLOG_MERGE_FIRST_LOAD_WAITS=off` fills the table as it goes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..coordination.store import StateStore
from ..settings import settings
from ..snapshot.dump import read_progress, reading
from ..stagedlog.staged_log import StagedLog
from ..warehouse.merged_state import TableState


@dataclass(frozen=True)
class LoadInProgress:
    """The dump reading a table's first load now, and how far it got."""
    dump_id: str
    rows: int
    chunks: int
    estimated_rows: int | None

    def note(self) -> str:
        of = f" of about {self.estimated_rows:,}" if self.estimated_rows else ""
        return (f"first load in progress: dump {self.dump_id} has read {self.rows:,}{of} rows ({self.chunks:,} "
                "chunks); the table is merged once the dump has read it whole, in one commit "
                "(DBLOG_MERGE_FIRST_LOAD_WAITS=off merges it as it goes)")


def in_progress(store: StateStore, staged: StagedLog, source: str, table: str,
                state: TableState | None) -> LoadInProgress | None:
    """The first load this merge waits for: the table stores nothing yet, and a worker is reading
    it for a dump that staged chunks of it. None: merge now."""
    if settings().merge.first_load_waits == "off":
        return None
    if state is not None and not state.stores_nothing:
        return None
    for dump_id in staged.chunk_dumps(source, table):
        if reading(store, source, dump_id, table):
            progress = read_progress(store, source, dump_id, table)
            if progress is not None:
                return LoadInProgress(dump_id, progress.rows, progress.chunks, progress.estimated_rows)
    return None
