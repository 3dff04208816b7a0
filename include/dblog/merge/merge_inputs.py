"""What one merge applies, as DataFrames: the staged log and chunks turned into merge records.

`merge_input` is the one composition the Spark job runs (`job.merge_inputs` reads the files and
calls it), and the one `tests/spark/test_rules_agree.py` holds against the Python rules: log
events after the last merge (a key update also leaves a tombstone at its old key), each ready
chunk's survivors at its HW, and, when an event left values out, the rows dropped in a window as
fillers at their LW. `merge.merge_records` then applies them to the stored warehouse rows.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..model.rules import ChunkRange, chunk_ready
from ..model.staged_format import BEFORE, CHUNK, COMMIT_TS, DUMP_ID, HW, LW, OLD_KEY, OP, POSITION, UNCHANGED, Op
from ..stagedlog.staged_log import ChunkInfo
from .frame_rules import WINDOW, touched_in_windows, window_dropped, window_survivors


@dataclass(frozen=True)
class ChunkWindow:
    """A staged chunk's window: its watermark ids and, once staged, their positions in the log."""
    dump_id: str
    chunk: int
    lw: str                 # watermark ids, as the chunk rows carry them
    hw: str
    low: str | None         # their positions (None: not staged yet)
    high: str | None
    rows: int
    key_from: str | None = None   # the keys it read (`rules.ChunkRange`)
    key_to: str | None = None

    def ready(self, upto: str) -> bool:
        return chunk_ready(self.low, self.high, upto)

    def range(self) -> ChunkRange:
        return ChunkRange(self.dump_id, self.chunk, self.key_from, self.key_to)


def chunk_windows(infos: list[ChunkInfo], positions: Callable[[set[str]], dict[str, str]]) -> list[ChunkWindow]:
    """The window of each staged chunk with rows (`StagedLog.chunk_infos`), with the positions
    `positions` finds for their watermark ids (`watermarks.positions`: those staged)."""
    found = [(i.meta, i.rows) for i in infos if i.meta is not None]
    at = positions({m.lw for m, _ in found} | {m.hw for m, _ in found})
    return [ChunkWindow(m.dump_id, m.chunk, m.lw, m.hw, at.get(m.lw), at.get(m.hw), rows, m.key_from, m.key_to)
            for m, rows in found]


def with_windows(chunks: DataFrame, ready: list[ChunkWindow]) -> DataFrame:
    """The rows of the `ready` chunks (`ChunkWindow.ready`), each with its window (`_lw_position`,
    `_hw_position`)."""
    windows = chunks.sparkSession.createDataFrame(
        [(w.dump_id, w.chunk, w.lw, w.hw, w.low, w.high) for w in ready],
        f"{DUMP_ID} string, {CHUNK} bigint, {LW} string, {HW} string, _lw_position string, _hw_position string")
    return chunks.join(F.broadcast(windows), [DUMP_ID, CHUNK, LW, HW])


MAX_TOUCHED = 1_000_000   # keys touched inside windows a first load under writes brings to the driver


def window_keys(events: DataFrame, windows: list[ChunkWindow], key: list[str]) -> dict[int, set[tuple]] | str:
    """Per ready window (its index in `windows`), the keys the window rule drops from its chunk
    (`frame_rules.touched_in_windows`), or why they are not given: an event leaves values out,
    which only the general merge fills, from those very rows (`window_dropped`), or more than
    `MAX_TOUCHED` of them."""
    (seen,) = events.agg(F.max(F.when(F.col(OP) != Op.DELETE, F.size(UNCHANGED))).alias("unchanged")).collect()
    if (seen["unchanged"] or 0) > 0:
        return "an event of the table leaves values out, which the general merge fills from the rows its window drops"
    low, high = min(w.low for w in windows if w.low), max(w.high for w in windows if w.high)
    inside = events.where((F.col(POSITION) > low) & (F.col(POSITION) < high))   # (the join is on ranges)
    frame = events.sparkSession.createDataFrame([(i, w.low, w.high) for i, w in enumerate(windows)],
                                                "_w int, _lw_position string, _hw_position string")
    rows = touched_in_windows(inside, frame, key).limit(MAX_TOUCHED + 1).collect()
    if len(rows) > MAX_TOUCHED:
        return f"more than {MAX_TOUCHED:,} keys were changed inside its windows"
    out: dict[int, set[tuple]] = {}
    for row in rows:
        out.setdefault(row["_w"], set()).add(tuple(row[k] for k in key))
    return out


@dataclass
class MergeInput:
    records: DataFrame
    fill_unchanged: bool               # some event left values out: the merge rule fills them
    newest_commit_ts: float | None     # unix time of the newest new event (freshness)
    oldest_commit_ts: float | None = None  # ... and of the oldest: it waited longest to become visible


def merge_input(events: DataFrame | None, chunks: DataFrame | None, key: list[str], columns: list[str],
                after: str | None) -> MergeInput:
    """The records of one merge. `events`: the table's staged events up to the checkpoint, from
    the earliest ready window's LW on (each position once); those after `after`, the last merge's
    position, are new, the older ones only drop chunk rows. `chunks`: the ready chunks' rows with
    their windows (`with_windows`). Both carry exactly the warehouse's `columns`; one at least is given."""
    parts, fill, newest, oldest = [], False, None, None
    if events is not None:
        new = events if after is None else events.where(F.col(POSITION) > after)
        # A delete's left-out columns need no fill: a tombstone has no values.
        (seen,) = new.agg(F.max(F.when(F.col(OP) != Op.DELETE, F.size(UNCHANGED))).alias("unchanged"),
                          F.max(F.unix_micros(COMMIT_TS)).alias("newest"),
                          F.min(F.unix_micros(COMMIT_TS)).alias("oldest")).collect()
        fill = (seen["unchanged"] or 0) > 0
        newest = None if seen["newest"] is None else seen["newest"] / 1e6
        oldest = None if seen["oldest"] is None else seen["oldest"] / 1e6
        parts.append(log_records(new, key, columns))
    if chunks is not None:
        parts.append(dump_records(window_survivors(chunks, events, key), columns))
        if fill and events is not None:
            parts.append(fill_records(window_dropped(chunks, events, key), columns))
    if not parts:
        raise ValueError("a merge input needs staged events or chunks")
    records = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    return MergeInput(records, fill, newest, oldest)


def _no_unchanged():
    return F.lit(None).cast("array<string>").alias(UNCHANGED)


def _no_dump():
    return F.lit(None).cast("string").alias(DUMP_ID)


def log_records(log: DataFrame, key: list[str], columns: list[str]) -> DataFrame:
    """Log events as records (`_origin` log); a key update also leaves a tombstone at its old key."""
    events = log.select(*columns, POSITION, OP, UNCHANGED, F.lit("log").alias("_origin"), _no_dump())
    # The old key's tombstone keeps the row's values before the update (a soft-delete table shows them).
    before = {f.name for f in log.schema[BEFORE].dataType} if BEFORE in log.columns else set()  # type: ignore[attr-defined]
    moved = (log.where(F.col(OLD_KEY).isNotNull())
             .select(*[F.col(f"{OLD_KEY}.{k}").alias(k) if k in key
                       else F.col(BEFORE)[k].try_cast(log.schema[k].dataType).alias(k) if k in before
                       else F.lit(None).alias(k) for k in columns],
                     POSITION, F.lit(Op.DELETE).alias(OP), _no_unchanged(), F.lit("log").alias("_origin"),
                     _no_dump()))
    return events.unionByName(moved, allowMissingColumns=True)


def dump_records(survivors: DataFrame, columns: list[str]) -> DataFrame:
    """Surviving chunk rows as records (`_origin` dump, `_dump_id`)."""
    return survivors.select(*columns, POSITION, OP, _no_unchanged(), F.lit("dump").alias("_origin"), DUMP_ID)


def fill_records(dropped: DataFrame, columns: list[str]) -> DataFrame:
    """Chunk rows dropped in their window as fill-only records (`_origin` WINDOW, see `rules.latest`)."""
    return dropped.select(*columns, POSITION, OP, _no_unchanged(), F.lit(WINDOW).alias("_origin"), _no_dump())
