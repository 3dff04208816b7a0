"""Steps 5-7 of Algorithm 1 over the durable staged log, in plain Python.

A staged chunk carries the ids of its low and high watermarks. Once the capture has staged the
HW event, the chunk's window on the log is known: `rules.window_survivors` drops the rows touched
inside it, and the survivors take HW's position; a window holding a write the log carries
without rows keeps none (`rules.blind_window`). `rebuild` applies the merge rule to a table's
whole staged history; it is the reference the Spark jobs and the convergence tests compare with.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..coordination.watermark_index import staged_positions
from ..model.rules import DumpRecord, Window, blind_window, merge_latest, ready_window, window_survivors
from ..model.staged_format import ChunkMeta, chunk_rows, decode_events
from ..stagedlog.staged_log import StagedLog


@dataclass
class ChunkResult:
    path: str
    window: Window | None           # None: the HW is not staged yet; try again later
    read: int
    survivors: list[DumpRecord]

    @property
    def dropped(self) -> int:
        return 0 if self.window is None else self.read - len(self.survivors)


def reconcile_chunk(staged: StagedLog, source: str, table: str, path: str,
                    watermarks: dict[str, str], upto: str | None,
                    unlogged: Sequence[tuple[str, str]] = ()) -> ChunkResult:
    """The chunk's survivors, once it is ready (`rules.chunk_ready`: `upto` is the capture's
    checkpoint position). `unlogged`: the table's `dblog.coordination.unlogged` intervals."""
    chunk = staged.read_chunk(path)
    meta = ChunkMeta.of(chunk)
    if meta is None:
        return ChunkResult(path, None, 0, [])
    window = ready_window(table, watermarks.get(meta.lw), watermarks.get(meta.hw), upto)
    if window is None:
        return ChunkResult(path, None, chunk.num_rows, [])
    if blind_window(window.low, window.high, unlogged):
        return ChunkResult(path, window, chunk.num_rows, [])
    events = decode_events(staged.read_log(source, table, window.low, window.high), source, table)
    survivors = window_survivors(chunk_rows(chunk), lambda r: r.key, window, events)
    records = [DumpRecord(table, window.high, r.key, r.row, meta.dump_id) for r in survivors]
    return ChunkResult(path, window, chunk.num_rows, records)


def rebuild(staged: StagedLog, source: str, table: str, upto: str | None,
            unlogged: Sequence[tuple[str, str]] = ()) -> tuple[dict, list[ChunkResult]]:
    """The table's state from its staged log up to the checkpoint position `upto` and every
    chunk ready by then: key -> (position, row). Reads every staged watermark and chunk, as a
    reference does (the merge asks the watermark index for the few it needs)."""
    watermarks = staged_positions(staged, source)
    results = [reconcile_chunk(staged, source, table, p, watermarks, upto, unlogged) for p in staged.chunk_files(source, table)]
    state: dict = {}
    if upto is not None:  # before the first checkpoint nothing staged is known to be complete
        merge_latest(state, decode_events(staged.read_log(source, table, high=upto), source, table))
    for r in results:
        merge_latest(state, r.survivors)
    return state, results
