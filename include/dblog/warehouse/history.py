"""How much snapshot history a warehouse table keeps: the one rule both the merge and `dblog
maintain` apply.

A continuous merge commits a snapshot per table every few seconds, and Iceberg's metadata file
lists every snapshot kept: at ~1 kB each, a day of merges every 3 s is a 30 MB file that each
commit reads, copies and writes again (a small merge went from 0.1 s to 0.8 s over its first
1,000 snapshots). So the history is bounded twice:

- by age: a replaced snapshot older than `DBLOG_WAREHOUSE_KEEP_SECONDS` goes (time travel and
  long queries read the ones inside it);
- by count: past `DBLOG_WAREHOUSE_KEEP_SNAPSHOTS`, the newest half, and every snapshot younger
  than `DBLOG_WAREHOUSE_KEEP_ALL_SECONDS`, stay as they are, and the older ones are thinned to one
  per equal slot of the age window (the newest of each slot), so time travel still reaches back
  the whole window, at a coarser step.

Each merge applies it in its own commit (no extra catalog commit), with the settings where the
merge runs; `dblog maintain` applies it too (its `--keep-seconds` can shorten the window for one
run, not lengthen what merges keep). Protected snapshots (each branch's head, main's chain back to the snapshot holding the merge
state) never go. An expired snapshot's files stay on disk until the orphan sweep finds them older
than `DBLOG_ORPHAN_GRACE_SECONDS`.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable


def expired(snapshots: Iterable[tuple[int, int]], protected: Collection[int], now_ms: int, keep_seconds: float,
            keep_snapshots: int, keep_all_seconds: float = 0.0) -> set[int]:
    """The ids to expire among `snapshots` ((id, timestamp in ms) pairs), by the rule above; none
    younger than `keep_all_seconds` is thinned (a reader may have planned on it a moment ago)."""
    window_ms = keep_seconds * 1000
    out, left = set(), []
    for sid, ts in snapshots:
        if sid in protected:
            continue
        if ts < now_ms - window_ms:
            out.add(sid)
        else:
            left.append((ts, sid))
    if len(left) <= keep_snapshots:
        return out
    left.sort(reverse=True)
    slots_left = keep_snapshots - keep_snapshots // 2
    young = sum(1 for ts, _ in left if ts >= now_ms - keep_all_seconds * 1000)
    recent = max(keep_snapshots // 2, young)
    # Slots fixed in time, not counted back from now: once a slot is past, its keeper stays.
    width = max(1.0, window_ms / max(1, slots_left - 1))
    slots: set[int] = set()
    for ts, sid in left[recent:]:
        slot = int(ts // width)
        if slot in slots:
            out.add(sid)
        slots.add(slot)
    return out


def state_chain(metadata) -> list:
    """Main's snapshots from its head back to the newest one holding the merge state (the last
    one; another writer's snapshots, such as a user's compaction, may sit on top of it), or back
    to the first snapshot when none does."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    chain, sid = [], metadata.current_snapshot_id
    while sid is not None and sid in by_id:
        chain.append(by_id[sid])
        if is_state(by_id[sid]):
            break
        sid = by_id[sid].parent_snapshot_id
    return chain


def state_snapshot(metadata):
    """The newest snapshot of main holding the merge state, or None."""
    chain = state_chain(metadata)
    return chain[-1] if chain and is_state(chain[-1]) else None


def is_state(snapshot) -> bool:
    return "dblog.format" in (snapshot.summary.additional_properties or {})


def protected(metadata) -> set[int]:
    """Snapshots no expiry may take: every ref's head and main's chain back to the state snapshot
    (`tables.table_state` walks it)."""
    return {ref.snapshot_id for ref in metadata.refs.values()} | {s.snapshot_id for s in state_chain(metadata)}


def to_expire(metadata, now_ms: int, keep_seconds: float, keep_snapshots: int, keep_all_seconds: float) -> set[int]:
    """The snapshots of a table's metadata the rule expires now."""
    return expired(((s.snapshot_id, s.timestamp_ms) for s in metadata.snapshots), protected(metadata), now_ms,
                   keep_seconds, keep_snapshots, keep_all_seconds)
