"""Is the capture healthy? One definition of capture lag and capture state, used by `dblog status`,
the DBLog page in Airflow, the metrics and the wait for the capture.

**Lag** means: every commit made on the source more than `lag` seconds ago is staged. It is now
minus the later of two moments the capture proves: the commit time of the newest staged
transaction (checkpoint), and the last time the capture had staged everything the source had sent
(heartbeat). A running capture on an idle source therefore shows a lag of about one heartbeat,
and a stopped capture's lag grows with the clock, which is what a user waiting on it feels.

**State**: `capturing` (a leader holds the lease and its heartbeat is fresh), `stalled` (a leader
holds the lease but has not beaten for `STALE_AFTER_S`: hung, or dead and its ZooKeeper session
not yet expired), `stopped` (nobody holds the lease). Contenders queued behind the leader are
standbys.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import store as paths
from .checkpoint import Checkpoint, load_checkpoint
from .store import Lease, StateStore

HEARTBEAT_S = 2.0          # how often a capture proves it is alive
STALE_AFTER_S = 15.0       # no heartbeat for this long: the capture is not running
LAG_SAMPLE_S = 30.0        # one lag sample per this many seconds in the history
LAG_HISTORY_S = 3600.0     # the history keeps the last hour

CAPTURING, STALLED, STOPPED = "capturing", "stalled", "stopped"


def lag_seconds(checkpoint: Checkpoint | None, heartbeat: dict | None, now: float) -> float | None:
    """See the module doc. None when the capture has never staged nor beaten."""
    checkpoint = checkpoint or Checkpoint()
    # A checkpoint that never staged was set at the log's head: that moment proves the same.
    first = checkpoint.staged_at if checkpoint.position is None else None
    proofs = [t for t in (checkpoint.commit_ts, (heartbeat or {}).get("caught_up_at"), first) if t is not None]
    return None if not proofs else round(max(0.0, now - max(proofs)), 3)


@dataclass(frozen=True)
class CaptureHealth:
    source: str
    state: str
    leader: str | None
    standby: list[str]
    position: str | None          # the encoded position of the newest staged event
    readable_position: str | None
    lag_s: float | None
    last_flush: float | None      # unix time the checkpoint last moved
    heartbeat_at: float | None
    lag_history: list[list[float]] = field(default_factory=list)
    resume: dict | None = None    # the checkpoint's resume point, as the source reads it

    def describe(self) -> str:
        """One line for logs and errors: 'stopped: last checkpoint 12:01:03 UTC, lag 698 s, ...'."""
        flushed = time.strftime("%H:%M:%S UTC", time.gmtime(self.last_flush)) if self.last_flush is not None \
            else "never"
        lag = "unknown" if self.lag_s is None else f"{self.lag_s:.0f} s"
        who = f" (leader {self.leader})" if self.leader else ""
        return f"{self.state}{who}: last checkpoint {flushed}, lag {lag}, position {self.readable_position or '-'}"


def sync_timeout_reason(health: CaptureHealth, waited: float, start: str, behind: str) -> str:
    """Why a wait for the capture to pass a sync watermark gave up, and what to do: `start` says
    how to start a capture that is not running, `behind` what to do about one that lags, each in
    the words of the caller (CLI, Airflow task)."""
    state = health.describe()
    if health.state != CAPTURING:
        return (f"the capture of {health.source} is not running ({state}) after {waited:.0f} s of "
                f"waiting; {start}, then re-run")
    return (f"the capture of {health.source} did not pass the sync watermark within {waited:.0f} s although it "
            f"runs ({state}); it is behind: {behind}")


def stopped_for(health: CaptureHealth, waiting_since: float, now: float) -> float:
    """How long no capture has run, as a waiter sees it: 0 while a leader holds the lease, else the
    time since the last heartbeat (a capture that never beat: since the wait began, so that a dump
    triggered just before the first capture slice is not failed)."""
    if health.state != STOPPED:
        return 0.0
    return max(0.0, now - (health.heartbeat_at or waiting_since))


def capture_health(store: StateStore, source: str, now: float | None = None) -> CaptureHealth:
    """Read the capture's checkpoint, heartbeat, lease holders and lag history from ZooKeeper."""
    now = time.time() if now is None else now
    checkpoint = load_checkpoint(store, source) or Checkpoint()
    heartbeat = store.get(paths.heartbeat_path(source)) or {}
    holders = store.lock_holders(paths.capture_lock(source))
    return health_of(source, checkpoint, heartbeat, holders, store.get(paths.lag_history_path(source)) or [], now)


def health_of(source: str, checkpoint: Checkpoint, heartbeat: dict, holders: list[str], history: list, now: float
              ) -> CaptureHealth:
    beat = heartbeat.get("at")
    if not holders:
        state = STOPPED
    elif beat is not None and now - beat <= STALE_AFTER_S and heartbeat.get("leader") == holders[0]:
        state = CAPTURING
    else:
        state = STALLED
    return CaptureHealth(
        source=source, state=state, leader=holders[0] if holders else None, standby=list(holders[1:]),
        position=checkpoint.position, readable_position=checkpoint.readable_position,
        lag_s=lag_seconds(checkpoint, heartbeat, now), last_flush=checkpoint.staged_at,
        heartbeat_at=beat, lag_history=[s for s in history if s[0] >= now - LAG_HISTORY_S],
        resume=checkpoint.resume)


class Heartbeat:
    """Written by the capture leader under its lease (fenced: a deposed leader cannot overwrite
    its successor's): liveness every HEARTBEAT_S, a lag sample every LAG_SAMPLE_S.

    `start(lease)` once the lease is held, then `beat(caught_up, checkpoint)` on every loop turn
    (cheap: it writes only when due)."""

    def __init__(self, store: StateStore, source: str, leader: str, on_beat=None):
        self.store, self.source, self.leader = store, source, leader
        self.on_beat = on_beat  # called with the lag after each write (metrics)
        self.lease: Lease | None = None
        self.caught_up_at: float | None = None
        self._next_beat = 0.0
        self._next_sample = 0.0
        self._history: list | None = None

    def start(self, lease: Lease, checkpoint: Checkpoint) -> None:
        """Take over the previous leader's proof: what it had staged when it was last at the log's
        head is staged still, so a handover does not reset the lag (only the time passing does)."""
        self.lease = lease
        previous = self.store.get(paths.heartbeat_path(self.source)) or {}
        self.caught_up_at = previous.get("caught_up_at")
        self.beat(False, checkpoint, force=True)

    def beat(self, caught_up: bool, checkpoint: Checkpoint, force: bool = False) -> None:
        now = time.time()
        if self.lease is None:
            raise RuntimeError("Heartbeat.beat before start(lease): only a leader beats")
        if caught_up:
            self.caught_up_at = now
        if now < self._next_beat and not force:
            return
        self._next_beat = now + HEARTBEAT_S
        heartbeat = {"leader": self.leader, "at": now, "caught_up_at": self.caught_up_at}
        self.store.fenced_put(self.lease, paths.heartbeat_path(self.source), heartbeat)
        lag = lag_seconds(checkpoint, heartbeat, now)
        if now >= self._next_sample and lag is not None:
            self._next_sample = now + LAG_SAMPLE_S
            if self._history is None:
                self._history = self.store.get(paths.lag_history_path(self.source)) or []
            self._history = [s for s in self._history if s[0] >= now - LAG_HISTORY_S] + [[round(now, 1), lag]]
            self.store.fenced_put(self.lease, paths.lag_history_path(self.source), self._history)
        if self.on_beat is not None:
            self.on_beat(lag)
