"""`dblog export`: a table's reconciled change stream in the paper's output order, as NDJSON.

Log events in position order, each chunk's surviving rows right after its high watermark
(`rules.ordered_output`), from any position the staged log still holds. For consumers that want
a stream rather than a table: replaying it with the merge rule rebuilds the table.
"""
from __future__ import annotations

import json
from typing import IO, Any

from ..coordination import unlogged
from ..coordination.store import StateStore
from ..coordination.watermark_index import positions
from ..errors import DBLogError
from ..model.events import ChangeEvent
from ..model.rules import Chunk, DumpRecord, blind_window, ordered_output, ready_window
from ..model.schema import to_json_value
from ..model.staged_format import ChunkMeta, Op, SegmentFile, chunk_rows, decode_events, key_columns
from ..sources.base import WATERMARK_TABLE
from ..stagedlog.staged_log import StagedLog


class ExportError(DBLogError, ValueError):
    pass


def _json(values: dict | None) -> dict | None:
    return None if values is None else {k: to_json_value(v) for k, v in values.items()}


def export(store: StateStore, staged: StagedLog, source: str, table: str, out: IO[str], upto: str | None,
           from_position: str | None = None) -> int:
    """Write the stream from `from_position` (inclusive) up to the capture's checkpoint position
    `upto` (everything staged by then; a chunk once it is ready, `rules.chunk_ready`) to `out`;
    returns the number of lines."""
    if table not in staged.tables(source):
        raise ExportError(f"no staged log for {table} on {source}; staged tables: "
                          f"{', '.join(t for t in staged.tables(source) if t != WATERMARK_TABLE) or 'none'}")
    segments = staged.segments(source, table)
    if from_position is not None and segments:
        oldest = SegmentFile.parse(segments[0]).first
        if from_position < oldest:
            raise ExportError(f"position {from_position} is no longer in the staged log (oldest {oldest}); "
                              "export from a later position, or run a dump of the table to start afresh")
    staged_chunks = [(data, meta) for data in map(staged.read_chunk, staged.chunk_files(source, table))
                     if (meta := ChunkMeta.of(data)) is not None]
    watermarks = positions(store, staged, source, [i for _, m in staged_chunks for i in (m.lw, m.hw)])
    chunks, key_cols = [], []
    blind_at = unlogged.intervals(store, source, table) if staged_chunks else []
    for data, meta in staged_chunks:
        window = ready_window(table, watermarks.get(meta.lw), watermarks.get(meta.hw), upto)
        if window is not None and blind_window(window.low, window.high, blind_at):
            continue  # its rows may predate a write the log holds without rows: its repair re-reads them
        if window is not None and (from_position is None or window.high >= from_position):
            key_cols = key_columns(data.schema)
            chunks.append(Chunk(window, tuple(chunk_rows(data)), meta.dump_id))
    # Events from the earliest window on, so chunks that straddle `from_position` are reconciled right.
    low = None if from_position is None else min([c.window.low for c in chunks] + [from_position])
    if upto is None:
        return 0  # nothing is checkpointed yet: nothing is known to be complete
    log = staged.read_log(source, table, low, upto)
    events = decode_events(log, source, table)
    keys = key_columns(log.schema) if log.num_rows else key_cols
    highs = {c.window.high: c for c in chunks}
    markers = [ChangeEvent(source, WATERMARK_TABLE, Op.UPDATE, hw, (), {}) for hw in highs]
    lines = 0
    for item in ordered_output(events + markers, chunks, lambda e: e.table == WATERMARK_TABLE):
        if from_position is not None and item.position < from_position:
            continue
        if isinstance(item, DumpRecord):
            # A key the source does not have (a key-list dump's absent key) is a delete for a consumer.
            record: dict[str, Any] = {"position": item.position, "op": Op.READ if item.row is not None else Op.DELETE,
                      "origin": "dump", "dump_id": item.dump_id,
                      "key": dict(zip(key_cols, map(to_json_value, item.key))), "row": _json(item.row)}
        else:
            record = {"position": item.position, "op": item.op, "origin": "log", "txid": item.txid,
                      "commit_ts": to_json_value(item.commit_ts), "key": dict(zip(keys, map(to_json_value, item.key))),
                      "row": _json(item.after),
                      "old_key": None if item.old_key is None else dict(zip(keys, map(to_json_value, item.old_key))),
                      # PostgreSQL: columns whose unchanged TOASTed value is not in `row` (keep the previous)
                      "unchanged": item.unchanged or None}
        out.write(json.dumps(record, sort_keys=True) + "\n")
        lines += 1
    return lines
