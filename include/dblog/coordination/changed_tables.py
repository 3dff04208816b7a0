"""Which tables have something new to merge, so a merge cycle costs what changed.

Two records, both read by the continuous merge once per cycle, whatever the number of tables:

* **The change index** (`/{source}/capture/tables`): table -> position of its newest staged event,
  spread over `SHARDS` nodes by a hash of the name (a node holds at most 1 MB; a flush rewrites
  only the shards of the tables it staged, in one transaction). The capture writes it, fenced by
  its lease, after a batch's segments and before the checkpoint that passes them (`record`), so
  every event at or before the checkpoint is counted in it. The root node holds `since`, the
  checkpoint when the indexing capture started: events staged before (by a version that did not
  index) are not in it, so a table merged only up to before `since` is merged whatever the index
  says.
* **Chunk marks** (`/{source}/chunks/{table}-{sequence}`): a dump adds a mark after each chunk it
  stages (`mark_chunk`; sequential, so a mark is never re-created under a name a merge already
  read). A merge that left no chunk of the table pending removes the marks it read before
  listing the chunks (`clear_marks`); a chunk staged meanwhile has a mark of its own.

A merge that finds neither a newer index position than it merged up to nor a mark for a table
leaves that table alone: no lock, no catalog load, no listing.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from urllib.parse import unquote

from . import store as paths
from .store import Lease, StateStore

SHARDS = 32


def index_path(source: str) -> str:
    return f"/{source}/capture/tables"


def shard_path(source: str, shard: int) -> str:
    return f"{index_path(source)}/{shard:02d}"


def shard_of(table: str) -> int:
    return int(hashlib.sha1(table.encode()).hexdigest()[:8], 16) % SHARDS


def marks_path(source: str) -> str:
    return f"/{source}/chunks"


@dataclass
class ChangeIndex:
    since: str | None = None          # the checkpoint when indexing began (None: at the log's start)
    tables: dict[str, str] = field(default_factory=dict)   # table -> newest staged position

    def newer(self, table: str, merged_upto: str | None, checkpoint: str) -> bool:
        """Whether `table`, merged up to `merged_upto`, may have staged events it has not merged
        by `checkpoint`."""
        if merged_upto is None or (self.since is not None and merged_upto < self.since):
            return True
        return min(self.tables.get(table, ""), checkpoint) > merged_upto


def load_index(store: StateStore, source: str) -> ChangeIndex | None:
    """The source's change index; None when no capture of this version has run (merge everything)."""
    root = store.get(index_path(source))
    if root is None:
        return None
    index = ChangeIndex(root.get("since"))
    for shard in store.get_many([shard_path(source, i) for i in range(SHARDS)]).values():
        index.tables.update(shard or {})
    return index


def start_index(store: StateStore, lease: Lease, source: str, checkpoint: str | None) -> ChangeIndex:
    """At capture start: the index as it is, or a new one from `checkpoint` on."""
    index = load_index(store, source)
    if index is None:
        index = ChangeIndex(since=checkpoint)
        store.fenced_put(lease, index_path(source), {"since": checkpoint})
    return index


def record(store: StateStore, lease: Lease, source: str, index: ChangeIndex, newest: dict[str, str]) -> None:
    """Add a batch's newest position per table (fenced, one transaction); only the shards of the
    tables whose position moved are written."""
    moved = {t: p for t, p in newest.items() if p > index.tables.get(t, "")}
    if not moved:
        return
    index.tables.update(moved)
    shards = {shard_of(t) for t in moved}
    store.fenced_put_many(lease, {shard_path(source, i): {t: p for t, p in index.tables.items() if shard_of(t) == i}
                                  for i in shards})


def mark_chunk(store: StateStore, source: str, table: str) -> None:
    store.append(f"{marks_path(source)}/{paths.node_name(table)}-", {})


def marks(store: StateStore, source: str) -> dict[str, list[str]]:
    """Tables with chunk marks -> the marks' node names (what `clear_marks` removes)."""
    out: dict[str, list[str]] = {}
    for name in store.children(marks_path(source)):
        table, _, sequence = name.rpartition("-")
        if table and sequence.isdigit():
            out.setdefault(unquote(table), []).append(name)
    return out


def clear_marks(store: StateStore, source: str, names: list[str]) -> int:
    return store.delete_many([f"{marks_path(source)}/{n}" for n in names])
