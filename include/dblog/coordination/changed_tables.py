"""Which tables have something new to merge, so a merge cycle costs what changed.

Two records, both read by the continuous merge once per cycle, whatever the number of tables:

* **The change index** (`/{source}/capture/tables`, one node): table -> position of its newest
  staged event. The capture writes it, fenced by its lease, after a batch's segments and before
  the checkpoint that passes them (`record`), so every event at or before the checkpoint is
  counted in it. `since` is the checkpoint when the indexing capture started: events staged
  before (by a version that did not index) are not in it, so a table merged only up to before
  `since` is merged whatever the index says.
* **Chunk marks** (`/{source}/chunks/{table}`): a dump sets its table's mark after each chunk
  it stages (`mark_chunk`). A merge that left no chunk of the table pending removes the mark
  only if nothing set it since it was read (`clear_mark`, by the node's version), so a chunk
  staged meanwhile keeps it.

A merge that finds neither a newer index position than it merged up to nor a mark for a table
leaves that table alone: no lock, no catalog load, no listing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from . import store as paths
from .store import Lease, StateStore


def index_path(source: str) -> str:
    return f"/{source}/capture/tables"


def marks_path(source: str) -> str:
    return f"/{source}/chunks"


def mark_path(source: str, table: str) -> str:
    return f"{marks_path(source)}/{paths.node_name(table)}"


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

    def as_json(self) -> dict:
        return {"since": self.since, "tables": self.tables}


def load_index(store: StateStore, source: str) -> ChangeIndex | None:
    """The source's change index; None when no capture of this version has run (merge everything)."""
    value = store.get(index_path(source))
    return None if value is None else ChangeIndex(value.get("since"), dict(value.get("tables") or {}))


def start_index(store: StateStore, lease: Lease, source: str, checkpoint: str | None) -> ChangeIndex:
    """At capture start: the index as it is, or a new one from `checkpoint` on."""
    index = load_index(store, source)
    if index is None:
        index = ChangeIndex(since=checkpoint)
        store.fenced_put(lease, index_path(source), index.as_json())
    return index


def record(store: StateStore, lease: Lease, source: str, index: ChangeIndex, newest: dict[str, str]) -> None:
    """Add a batch's newest position per table (fenced); written only when one moved."""
    moved = {t: p for t, p in newest.items() if p > index.tables.get(t, "")}
    if moved:
        index.tables.update(moved)
        store.fenced_put(lease, index_path(source), index.as_json())


def mark_chunk(store: StateStore, source: str, table: str) -> None:
    store.put(mark_path(source, table), {})   # a write bumps the version a clearing merge compares


def marks(store: StateStore, source: str) -> dict[str, int]:
    """Tables with a chunk mark -> the mark's version (what `clear_mark` needs)."""
    names = store.children(marks_path(source))
    found = store.versions([f"{marks_path(source)}/{n}" for n in names])
    return {unquote(p.rsplit("/", 1)[1]): v for p, v in found.items() if v is not None}


def clear_mark(store: StateStore, source: str, table: str, version: int) -> bool:
    return store.delete_at(mark_path(source, table), version)
