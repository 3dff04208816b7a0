"""The capture checkpoint: where a capture resumes, and how far the staged log is complete.

One ZooKeeper node per source (`/{source}/capture/checkpoint`, JSON). Only the capture leader
moves it, fenced by its lease, after every segment of a batch is durable (invariant 2): every
event at or before `position` is staged. Dumps, merges, maintenance and health read it.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from .store import Lease, StateStore

if TYPE_CHECKING:  # readers of the checkpoint (the DBLog page, health) need no source adapter
    from ..sources.base import Source


@dataclass(frozen=True)
class Checkpoint:
    resume: dict[str, Any] | None = None  # the source's own resume point (binlog file and offset, LSN)
    position: str | None = None           # the newest staged event's position; None before the first flush
    commit_ts: float | None = None        # unix time the newest staged transaction committed
    staged_at: float | None = None        # unix time the checkpoint last moved (or was set up)
    leader: str | None = None             # the capture that moved it; None when set up at the log's end

    @classmethod
    def at_log_end(cls, resume: dict[str, Any] | None) -> Checkpoint:
        """A first checkpoint: nothing staged yet, resume where the log ends now."""
        return cls(resume=resume, staged_at=time.time())

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Checkpoint:
        # Unknown keys are dropped and missing ones default, so a node another version wrote still reads.
        return cls(**{k: value.get(k) for k in ("resume", "position", "commit_ts", "staged_at", "leader")})

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def advanced(self, resume: dict[str, Any] | None, position: str | None, commit_ts: float | None,
                 leader: str) -> Checkpoint:
        """After a flush: a batch without a new position or commit time keeps the previous ones."""
        return replace(self, resume=resume, position=position or self.position,
                       commit_ts=commit_ts if commit_ts is not None else self.commit_ts,
                       staged_at=time.time(), leader=leader)

    def passed(self, position: str) -> bool:
        """Every event at or before `position` is staged."""
        return (self.position or "") >= position

    @property
    def readable_position(self) -> str | None:
        """The resume point as a user reads it: `mysql-bin.000042:1234` or `LSN 0/16B3748`."""
        return readable_position(self.resume)


def readable_position(resume: dict | None) -> str | None:
    if not resume:
        return None
    if "log_file" in resume:
        return f"{resume['log_file']}:{resume['log_pos']}"
    if "lsn" in resume:
        return f"LSN {resume['lsn']}"
    return str(resume)


def checkpoint_path(source: str) -> str:
    return f"/{source}/capture/checkpoint"


def load_checkpoint(store: StateStore, source: str) -> Checkpoint | None:
    value = store.get(checkpoint_path(source))
    return None if value is None else Checkpoint.from_json(value)


def save_checkpoint(store: StateStore, lease: Lease, source: str, checkpoint: Checkpoint) -> None:
    """Fenced: a capture that lost its lease cannot move its successor's checkpoint."""
    store.fenced_put(lease, checkpoint_path(source), checkpoint.as_json())


def checkpoint_position(store: StateStore, source: str) -> str | None:
    """Every event at or before this position is staged (None before the first flush)."""
    checkpoint = load_checkpoint(store, source)
    return None if checkpoint is None else checkpoint.position


def ensure_checkpoint(store: StateStore, source: Source) -> Checkpoint:
    """Check the source (fail closed) and, on first use, start the checkpoint at the end of its log.

    Everything committed after this returns is captured, so callers set it up before writes or
    dumps they need to see.
    """
    path = checkpoint_path(source.name)
    existing = store.get(path)
    source.preflight(first_use=existing is None)
    if existing is None:
        store.create_new(path, Checkpoint.at_log_end(source.start_point()).as_json())
        existing = store.get(path)  # another process may have created it first: theirs holds
    return Checkpoint.from_json(existing)


def reset_checkpoint(store: StateStore, source: Source) -> None:
    """Forget the checkpoint (after lost history): the next capture starts at the end of the log."""
    store.delete(checkpoint_path(source.name))
    source.reset_stream()
