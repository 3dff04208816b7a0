"""Where the log is blind: the positions of writes it carries without their rows.

A statement-logged write (binlog_format STATEMENT or MIXED in a session, LOAD DATA) or a
TRUNCATE tells the log that a table changed at a position, not which rows. The window rule
cannot drop a chunk row such a write changed (it sees no key), so a chunk whose window holds
one may hold a row from before the write, stamped with a high watermark after it: the stale row
would win over the write's effect. So the capture records those positions here, per table,
fenced, before its checkpoint passes them (`record`, from `Capture._flush`, beside the repair
request the write makes); the merge drops every chunk whose window holds one
(`rules.blind_window`), and the write's whole-table repair re-reads those keys after it.

Per table one node: a list of [first, last] position intervals, oldest first, at most
`MAX_INTERVALS`; past that the two oldest neighbours become one interval. That drops more
windows than needed, never fewer, and a window dropped that way is still re-read: the later end
is a real write, whose repair reads every key after it. Staged-log retention removes the
intervals before its position (`forget_before`), as it does the watermark index's entries.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model.events import RepairNeed
from . import store as paths
from .store import Lease, StateStore

MAX_INTERVALS = 256

Interval = tuple[str, str]


def add(intervals: list[Interval], positions: Iterable[str], limit: int = MAX_INTERVALS) -> list[Interval]:
    """`intervals` with each of `positions` added as an interval of its own (a position already
    inside one is left out), then the oldest neighbours joined until at most `limit` remain."""
    out = sorted({(lo, hi) for lo, hi in intervals})
    for p in positions:
        if not any(lo <= p <= hi for lo, hi in out):
            out.append((p, p))
    out.sort()
    while len(out) > max(limit, 1):
        (lo, _), (_, hi) = out[0], out[1]
        out[:2] = [(lo, hi)]
    return out


def record(store: StateStore, lease: Lease, source: str, needs: Iterable[RepairNeed]) -> int:
    """Index the positions of the whole-table needs (writes logged without rows) among `needs`,
    fenced by the capture's `lease`; returns how many positions. A re-run after a crash adds the
    same positions again, which changes nothing."""
    by_table: dict[str, list[str]] = {}
    for n in needs:
        if n.keys is None and n.position is not None:
            by_table.setdefault(n.table, []).append(n.position)
    for table, positions in by_table.items():
        def change(value: Any, positions: list[str] = positions) -> list[list[str]]:
            return [list(i) for i in add(_intervals(value), positions)]
        store.update(paths.unlogged_path(source, table), change, lease=lease)
    return sum(map(len, by_table.values()))


def intervals(store: StateStore, source: str, table: str) -> list[Interval]:
    """The table's intervals of writes logged without rows, oldest first (one read)."""
    return _intervals(store.get(paths.unlogged_path(source, table)))


def _intervals(value) -> list[Interval]:
    return [(lo, hi) for lo, hi in value or ()]


def forget_before(store: StateStore, source: str, position: str) -> int:
    """Remove the intervals that end before `position` (a retention job's, with the staged
    segments before it); returns how many."""
    gone = 0
    for node in store.children(paths.unlogged_root(source)):
        if all(hi >= position for _, hi in _intervals(store.get(f"{paths.unlogged_root(source)}/{node}"))):
            continue   # nothing to drop: no write
        dropped: list[int] = []

        def keep(value: Any, dropped: list[int] = dropped) -> list[list[str]]:
            kept = [[lo, hi] for lo, hi in _intervals(value) if hi >= position]
            dropped[:] = [len(_intervals(value)) - len(kept)]
            return kept
        store.update(f"{paths.unlogged_root(source)}/{node}", keep)
        gone += sum(dropped)
    return gone
