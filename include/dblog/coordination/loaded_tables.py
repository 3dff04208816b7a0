"""Which tables the warehouse holds, as the merges last saw: what tells a dump whether its chunks
may be a first load.

A range dump stages its chunks in the warehouse's form too (`warehouse.adoption`), for a first
load to adopt as data files; that costs the dump about 17% (docs/performance.md), and only a first
load is ever adopted. So a merge's commit marks the table here while it stores rows or tombstones
(`settle`), a merge that finds no warehouse table clears the mark (`clear`, as does `dblog
warehouse drop`), and a dump of a marked table stages the plain form (`holds`). A warehouse reset
another way (a new root, a catalog wiped) keeps the mark until a merge finds the table missing,
so the reload's dump, staged before that, is written from its chunks. A mark that is wrong only costs time: a first
load staged plain is written by the merge, as before adoption; a refresh staged in the warehouse
form is merged as any other dump.
"""
from __future__ import annotations

from . import store as paths
from .store import StateStore


def loaded_path(source: str, table: str) -> str:
    return f"/{source}/loaded/{paths.node_name(table)}"


def mark(store: StateStore, source: str, table: str) -> None:
    store.put(loaded_path(source, table), {})


def settle(store: StateStore, source: str, table: str, stores: bool) -> None:
    """Mark or clear as the table stores rows (or tombstones) or not; written only on a change
    (a merge's commit reads the mark, one round trip)."""
    if stores != holds(store, source, table):
        (mark if stores else clear)(store, source, table)


def clear(store: StateStore, source: str, table: str) -> None:
    store.delete(loaded_path(source, table))


def holds(store: StateStore, source: str, table: str) -> bool:
    return store.modified(loaded_path(source, table)) is not None
