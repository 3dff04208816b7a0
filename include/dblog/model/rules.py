"""The paper's rules, each in one place, as pure functions over plain Python values.

* `chunk_ready`: when a chunk's window can be reconciled (HW staged and checkpointed).
* `window_survivors`: Algorithm 1 steps 6-7 (drop chunk rows touched inside the window).
* `blind_window`: a window holding a write the log carries without rows drops all its rows.
* `may_restore`: which chunks the removal of the rows such a write deleted must wait for.
* `ordered_output`: the paper's output order (Figure 4).
* `merge_latest`: the warehouse merge rule (highest position wins; deletes are tombstones).
* `disjoint_chunks`: when chunks cannot hold a key twice (a first load then needs no ranking).

The Spark jobs apply the same rules to DataFrames; tests hold both to the same cases.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .events import ChangeEvent
from .staged_format import ChunkRow, Op


@dataclass(frozen=True)
class Window:
    """A chunk's watermark window on the log: (LW position, HW position), encoded positions."""
    table: str
    low: str
    high: str

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"low watermark {self.low} is not before high watermark {self.high}")

    def contains(self, event: ChangeEvent) -> bool:
        return event.table == self.table and self.low < event.position < self.high


def chunk_ready(low: str | None, high: str | None, upto: str | None) -> bool:
    """Whether a chunk can be reconciled: both watermarks are staged (their positions known) and
    the capture's checkpoint `upto` is at or past the high one. The checkpoint moves only after a
    flush has staged every table's segment, so only then is every event of the window staged: the
    capture stages one table after another, and an HW staged alone (mid-flush, or after a crash
    between two tables) says nothing about the data table's events in the window."""
    return low is not None and high is not None and upto is not None and high <= upto


def ready_window(table: str, low: str | None, high: str | None, upto: str | None) -> Window | None:
    """The chunk's window once `chunk_ready`, else None."""
    if low is None or high is None or not chunk_ready(low, high, upto):
        return None
    return Window(table, low, high)


def blind_window(low: str, high: str, unlogged: Iterable[tuple[str, str]]) -> bool:
    """Whether a write the log carries without its rows (a statement-logged write, LOAD DATA, a
    TRUNCATE: `dblog.coordination.unlogged` intervals of its table) fell inside the window (LW, HW). Steps 6-7
    cannot tell which chunk rows it changed, so none survives: each may predate the write while
    its HW position postdates it. The write's whole-table repair re-reads the keys after it."""
    return any(first < high and last > low for first, last in unlogged)


def may_restore(low: str | None, high: str | None, position: str, unlogged: Iterable[tuple[str, str]]) -> bool:
    """Whether a chunk with window (`low`, `high`) may put back a row that a write at `position`,
    logged without rows, deleted, so that removing such rows must wait until it is merged: its
    window closed before the write (it may have read the row) and it keeps its rows. A window
    still open at the write holds it and keeps none (`blind_window`), one opened after it read
    after it, and one whose watermarks are not both staged is not ready, never merged as it is."""
    return low is not None and high is not None and high < position and not blind_window(low, high, unlogged)


def touched_in_window(window: Window, events: Iterable[ChangeEvent]) -> set[tuple]:
    """Primary keys touched by a same-table event strictly between LW and HW."""
    return {key for e in events if window.contains(e) for key in e.touched_keys()}


def window_survivors(rows: Sequence[Any], key_of: Callable[[Any], tuple], window: Window,
                     events: Iterable[ChangeEvent]) -> list[Any]:
    """Chunk rows not touched in the window, in chunk order. They take the position `window.high`."""
    touched = touched_in_window(window, events)
    return [row for row in rows if key_of(row) not in touched]


@dataclass(frozen=True)
class DumpRecord:
    """A surviving chunk row, emitted at its chunk's high watermark position (row None: the source
    does not have the key, a tombstone)."""
    table: str
    position: str
    key: tuple
    row: dict | None
    dump_id: str | None = None


@dataclass(frozen=True)
class Chunk:
    window: Window
    rows: tuple[ChunkRow, ...]
    dump_id: str | None = None


@dataclass(frozen=True)
class ChunkRange:
    """The keys a range chunk read: after `key_from` (None: from the first) up to `key_to`, as the
    JSON its dump records them in (`staged.ChunkMeta`); both None for a key-list chunk."""
    dump_id: str
    chunk: int
    key_from: str | None
    key_to: str | None


def disjoint_chunks(chunks: Iterable[ChunkRange]) -> bool:
    """Whether no key can be in two of `chunks`: they are range chunks of one dump that follow
    one another, each starting exactly where the one before it ended. A dump reads the keys after
    its cursor in the source's key order, so such chunks are disjoint. A range read again (a
    window's unstaged split carried into a later window, a chunk of a worker that was deposed)
    repeats a `key_from` out of key order, so it breaks the chain; so do a key-list chunk and a
    second dump (and the merge then ranks records)."""
    ordered = sorted(chunks, key=lambda c: c.chunk)
    if len({c.dump_id for c in ordered}) > 1 or any(c.key_to is None for c in ordered):
        return False
    return all(later.key_from == earlier.key_to for earlier, later in zip(ordered, ordered[1:]))


def ordered_output(events: Iterable[ChangeEvent], chunks: Iterable[Chunk],
                   is_watermark: Callable[[ChangeEvent], bool]) -> Iterator[ChangeEvent | DumpRecord]:
    """Log events in position order; each chunk's survivors right after its HW event.

    Watermark events themselves are not part of the output.
    """
    log = sorted(events, key=lambda e: e.position)
    by_high = {c.window.high: c for c in chunks}
    for event in log:
        if is_watermark(event):
            chunk = by_high.get(event.position)
            if chunk is not None:
                for row in window_survivors(chunk.rows, lambda r: r.key, chunk.window, log):
                    yield DumpRecord(chunk.window.table, chunk.window.high, row.key, row.row, chunk.dump_id)
            continue
        yield event


def merge_latest(state: dict[tuple, tuple[str, dict | None]],
                 records: Iterable[ChangeEvent | DumpRecord]) -> dict[tuple, tuple[str, dict | None]]:
    """Apply records to `state` (key -> (position, row or None for a tombstone)).

    Per key the highest position wins, so replaying records or applying them out of order
    gives the same state (idempotent, no time travel). A key update moves the row: the old
    key gets a tombstone at the event's position.
    """
    def put(key: tuple, position: str, row: dict | None) -> None:
        current = state.get(key)
        if current is None or current[0] < position:
            state[key] = (position, row)

    for rec in records:
        if isinstance(rec, DumpRecord):
            put(rec.key, rec.position, rec.row)
            continue
        if rec.old_key is not None and rec.old_key != rec.key:
            put(rec.old_key, rec.position, None)
        row = None if rec.op == Op.DELETE else rec.after
        if row is not None and rec.unchanged:
            # PostgreSQL leaves unchanged TOASTed values out of the new tuple: keep the old ones.
            previous = (state.get(rec.old_key or rec.key) or (None, None))[1] or {}
            row = {**row, **{c: previous.get(c) for c in rec.unchanged}}
        put(rec.key, rec.position, row)
    return state


def visible_rows(state: dict[tuple, tuple[str, dict | None]]) -> dict[tuple, dict]:
    """What a user sees: the live rows, tombstones hidden."""
    return {k: row for k, (_, row) in state.items() if row is not None}
