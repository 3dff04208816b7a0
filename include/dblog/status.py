"""What `dblog status` reports: capture position, leader and lag; dumps and their progress."""
from __future__ import annotations

import time

from . import state as paths
from .dump import dump_status
from .sources.base import Source
from .state import StateStore


def capture_status(store: StateStore, source: Source) -> dict:
    checkpoint = store.get(paths.checkpoint_path(source.name)) or {}
    leaders = store.lock_holders(paths.capture_lock(source.name))
    head = source.head()
    commit_ts = checkpoint.get("commit_ts")
    # Lag: the age of the newest staged commit (it also grows while the source is idle).
    lag = None if commit_ts is None else round(max(0.0, time.time() - commit_ts), 3)
    return {"leaders": leaders, "position": checkpoint.get("position"), "resume": checkpoint.get("resume"),
            "staged_at": checkpoint.get("staged_at"), "head": head, "lag_s": lag}


def source_status(store: StateStore, source: Source) -> dict:
    dumps = [dump_status(store, source.name, d) for d in store.children(paths.dumps_path(source.name))]
    return {"kind": source.kind, "capture": capture_status(store, source), "dumps": dumps}
