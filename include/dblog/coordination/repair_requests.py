"""Repair requests: what the capture, the merge and a dump window ask the repairer to re-read.

Written here, read by `dblog.snapshot.repair` (which documents the whole flow): the lowest layer
that every asker may import, so a dump can ask without importing the repairer that runs dumps.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable

from ..model.events import RepairNeed
from ..model.schema import encode_key
from . import store as paths
from .store import StateStore

# Key lists travel through ZooKeeper nodes (1 MB at most): requests and repair dumps stay small,
# and a table with more keys to repair than TABLE_ABOVE gets a full dump instead.
REQUEST_KEYS = 2_000
TABLE_ABOVE = 50_000


def request(store: StateStore, source: str, needs: Iterable[RepairNeed]) -> int:
    """Queue repairs; returns how many requests were written (a key list splits at REQUEST_KEYS)."""
    written = 0
    for need in needs:
        keys = None if need.keys is None else [json.loads(encode_key(k)) for k in need.keys]
        kind = "table" if keys is None else "keys"
        for part in [None] if keys is None else parts(keys, REQUEST_KEYS):
            append(store, source, need.table, need.reason, need.position, part, kind)
            written += 1
    return written


def append(store: StateStore, source: str, table: str, reason: str, position: str | None, keys: list | None,
            kind: str) -> None:
    store.append(f"{paths.repairs_path(source)}/req-", {
        "table": table, "reason": reason, "position": position, "keys": keys, "kind": kind,
        "requested_at": time.time()})


def parts(keys: list, size: int) -> list[list]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]
