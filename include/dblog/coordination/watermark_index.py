"""Where each watermark sits in the log: an index in ZooKeeper, watermark id -> position.

A chunk carries the ids (UUIDs) of its low and high watermarks; its window on the log is their
positions. Reading them off the staged log of the watermark table costs every watermark ever
staged, on every merge and every wait for a sync watermark. So the capture records the position
of each watermark event it stages (`record`, from `capture.Capture._flush`): after the batch's
segments are staged and before the checkpoint moves, fenced by its lease. Every watermark at or
before the checkpoint is therefore indexed; a crash in between re-stages and re-records the same
facts. Readers ask for the ids they need (`positions`).

A deployment upgraded from before the index has watermarks staged but not indexed: its capture
back-fills the index from the staged watermark log once at start (`backfill`) and then marks it
built; until then `positions` reads the staged log as before. From then on every capture of the
deployment must be of a version that indexes: an older one would stage watermarks unindexed, and
the chunks and sync waits that need them would wait for ever.

Entries are two per chunk plus one per sync watermark, kept until removed: a retention job that
drops staged segments before a position drops the entries before it too (`forget_before`; a
chunk whose window starts there can no longer be reconciled anyway), or named ones (`forget`).
"""
from __future__ import annotations

import time
from collections.abc import Iterable

from ..model.events import ChangeEvent
from ..model.staged_format import OP, POSITION, Op
from ..sources.base import WATERMARK_TABLE
from ..stagedlog.staged_log import StagedLog
from . import store as paths
from .store import Lease, StateStore


def written(rows: Iterable[dict]) -> dict[str, str]:
    """Watermark id -> position of the event that wrote it, from staged watermark rows (data and
    metadata columns by name: `value` is the id). The first write counts: a delete of the row (a
    clean-up) carries the id in its before image but writes nothing. An empty value is no
    watermark of ours."""
    out: dict[str, str] = {}
    for r in rows:
        if r.get("value") and r.get(OP) != Op.DELETE:
            out.setdefault(r["value"], r[POSITION])
    return out


def staged_positions(staged: StagedLog, source: str) -> dict[str, str]:
    """Every staged watermark's position, read from the whole staged watermark log: the reference
    (`reconcile.rebuild`) and the back-fill, not a per-merge path."""
    log = staged.read_log(source, WATERMARK_TABLE)
    columns = [c for c in ("value", OP, POSITION) if c in log.column_names]
    return written(log.select(columns).to_pylist()) if log.num_rows else {}


def record(store: StateStore, lease: Lease, source: str, events: Iterable[ChangeEvent]) -> int:
    """Index the watermarks among a staged batch's events of the watermark table (fenced by the
    capture's `lease`); returns how many."""
    found = written({**(e.after if e.after is not None else e.before or {}), OP: e.op, POSITION: e.position}
                    for e in events)
    if found:
        store.fenced_create(lease, {paths.watermark_path(source, i): p for i, p in found.items()})
    return len(found)


def built(store: StateStore, source: str) -> bool:
    return store.get(paths.watermark_index_built_path(source)) is not None


def backfill(store: StateStore, lease: Lease, staged: StagedLog, source: str) -> int | None:
    """Once per deployment (the capture, at start, holding its lease): index every staged
    watermark, then mark the index built. None when it was built already."""
    if built(store, source):
        return None
    found = staged_positions(staged, source)
    if found:
        store.fenced_create(lease, {paths.watermark_path(source, i): p for i, p in found.items()})
    store.fenced_put(lease, paths.watermark_index_built_path(source), {"at": time.time(), "backfilled": len(found)})
    return len(found)


def positions(store: StateStore, staged: StagedLog, source: str, ids: Iterable[str]) -> dict[str, str]:
    """The positions of the staged watermarks among `ids`; an id not staged yet is left out.
    Whether a window is complete is another question (`rules.chunk_ready`: the checkpoint)."""
    wanted = sorted({i for i in ids if i is not None})
    if not wanted:
        return {}
    if not built(store, source):
        everything = staged_positions(staged, source)
        return {i: everything[i] for i in wanted if i in everything}
    found = store.get_many([paths.watermark_path(source, i) for i in wanted])
    return {i: p for i in wanted if (p := found[paths.watermark_path(source, i)]) is not None}


def forget(store: StateStore, source: str, ids: Iterable[str]) -> int:
    """Remove the entries of `ids` (a merged chunk's watermarks, a sync watermark waited for);
    returns how many there were."""
    return store.delete_many([paths.watermark_path(source, i) for i in set(ids)])


def forget_before(store: StateStore, source: str, position: str) -> int:
    """Remove every entry of a position before `position`; returns how many. Reads the whole
    index (shard by shard): for a retention job, not for a merge."""
    root, gone = paths.watermark_index_path(source), 0
    for shard in store.children(root):
        names = [f"{root}/{shard}/{name}" for name in store.children(f"{root}/{shard}")]
        found = store.get_many(names)
        gone += store.delete_many([n for n, p in found.items() if p is not None and p < position])
    return gone
