"""Steps 5-7 of Algorithm 1 over the durable staged log, in plain Python.

A staged chunk carries the ids of its low and high watermarks. Once the capture has staged the
HW event, the chunk's window on the log is known: `rules.window_survivors` drops the rows touched
inside it, and the survivors take HW's position. `rebuild` applies the merge rule to a table's
whole staged history; it is the reference the Spark jobs and the convergence tests compare with.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .events import ChangeEvent
from .rules import DumpRecord, Window, chunk_ready, merge_latest, window_survivors
from .sources.base import WATERMARK_TABLE
from .staging import StagedLog


def key_columns(table: pa.Table) -> list[str]:
    meta = table.schema.metadata or {}
    return meta[b"dblog.key"].decode().split(",")


def data_columns(table: pa.Table) -> list[str]:
    return [n for n in table.column_names if not n.startswith("_")]


def events_of(table_name: str, source: str, log: pa.Table) -> list[ChangeEvent]:
    if log.num_rows == 0:
        return []
    key_cols, data_cols = key_columns(log), data_columns(log)
    out = []
    for r in log.to_pylist():
        old = r.get("_old_key")
        old_key = None if old is None else tuple(old[c] for c in key_cols)
        row = {c: r[c] for c in data_cols}
        out.append(ChangeEvent(source, table_name, r["_op"], r["_position"], tuple(r[c] for c in key_cols),
                               None if r["_op"] == "d" else row, old_key=old_key, txid=r["_txid"],
                               commit_ts=r["_commit_ts"], unchanged=r["_unchanged"] or []))
    return out


def watermark_positions(staged: StagedLog, source: str) -> dict[str, str]:
    """Watermark value (UUID) -> position of its staged event."""
    wm = staged.read_log(source, WATERMARK_TABLE)
    if wm.num_rows == 0:
        return {}
    return dict(zip(wm["value"].to_pylist(), wm["_position"].to_pylist()))


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
                    watermarks: dict[str, str], upto: str | None) -> ChunkResult:
    """The chunk's survivors, once it is ready (`rules.chunk_ready`: `upto` is the capture's
    checkpoint position)."""
    chunk = staged.read_chunk(path)
    if chunk.num_rows == 0:
        return ChunkResult(path, None, 0, [])
    lw, hw = watermarks.get(chunk["_lw"][0].as_py()), watermarks.get(chunk["_hw"][0].as_py())
    if not chunk_ready(lw, hw, upto):
        return ChunkResult(path, None, chunk.num_rows, [])
    window = Window(table, lw, hw)
    key_cols, data_cols = key_columns(chunk), data_columns(chunk)
    events = events_of(table, source, staged.read_log(source, table, window.low, window.high))
    rows = chunk.to_pylist()
    survivors = window_survivors(rows, lambda r: tuple(r[c] for c in key_cols), window, events)
    records = [DumpRecord(table, window.high, tuple(r[c] for c in key_cols),
                          None if r["_op"] == "x" else {c: r[c] for c in data_cols}) for r in survivors]
    return ChunkResult(path, window, chunk.num_rows, records)


def rebuild(staged: StagedLog, source: str, table: str, upto: str | None) -> tuple[dict, list[ChunkResult]]:
    """The table's state from its staged log up to the checkpoint position `upto` and every
    chunk ready by then: key -> (position, row)."""
    watermarks = watermark_positions(staged, source)
    results = [reconcile_chunk(staged, source, table, p, watermarks, upto) for p in staged.chunk_files(source, table)]
    state: dict = {}
    if upto is not None:  # before the first checkpoint nothing staged is known to be complete
        merge_latest(state, events_of(table, source, staged.read_log(source, table, high=upto)))
    for r in results:
        merge_latest(state, r.survivors)
    return state, results
