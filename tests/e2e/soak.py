"""What the soak watches: the capture's leader, state and lag, sampled from ZooKeeper as the
DBLog page reads them (`dblog.coordination.health`), and the handovers between slices that follow from them."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field


@dataclass
class Sample:
    t: float
    state: str
    leader: str | None
    lag_s: float | None


@dataclass
class Handover:
    old: str
    new: str
    gap_s: float       # last moment the old leader was seen capturing -> first moment the new one was
    at: float


@dataclass
class SoakReport:
    seconds: float
    slices: int
    handovers: list[Handover] = field(default_factory=list)
    lag_p50: float = 0.0
    lag_p99: float = 0.0
    lag_max: float = 0.0
    recovery_after_kill_s: float | None = None
    timeline: list = field(default_factory=list)   # [seconds, state, lag] once a second

    @property
    def longest_gap_s(self) -> float:
        return max((h.gap_s for h in self.handovers), default=0.0)

    def summary(self) -> str:
        gaps = sorted(h.gap_s for h in self.handovers)
        median = gaps[len(gaps) // 2] if gaps else 0.0
        return (f"soak {self.seconds:.0f} s: {self.slices} slices, {len(self.handovers)} handovers, handover gap "
                f"median {median:.1f} s / longest {self.longest_gap_s:.1f} s; capture lag p50 {self.lag_p50:.2f} s, "
                f"p99 {self.lag_p99:.2f} s, max {self.lag_max:.2f} s")

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "longest_gap_s": self.longest_gap_s}, indent=1)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


class CaptureProbe:
    """Samples the capture's health every `interval` seconds on a thread of its own."""

    def __init__(self, store, source: str, interval: float = 0.25):
        self.store, self.source, self.interval = store, source, interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CaptureProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from dblog.coordination.health import capture_health
        while not self._stop.is_set():
            h = capture_health(self.store, self.source)
            self.samples.append(Sample(time.time(), h.state, h.leader, h.lag_s))
            self._stop.wait(self.interval)

    def leaders(self) -> list[str]:
        """Capturing leaders in the order they led."""
        out: list[str] = []
        for s in list(self.samples):
            if s.state == "capturing" and s.leader and (not out or out[-1] != s.leader):
                out.append(s.leader)
        return out

    def report(self, since: float | None = None) -> SoakReport:
        samples = [s for s in list(self.samples) if since is None or s.t >= since]
        handovers, last = [], None
        for s in samples:
            if s.state != "capturing" or not s.leader:
                continue
            if last is not None and s.leader != last.leader:
                handovers.append(Handover(last.leader, s.leader, round(s.t - last.t, 2), s.t))
            last = s
        lags = [s.lag_s for s in samples if s.lag_s is not None]
        t0, timeline = samples[0].t if samples else 0.0, []
        for s in samples:
            if not timeline or s.t - t0 >= timeline[-1][0] + 1:
                timeline.append([round(s.t - t0, 1), s.state, s.leader, s.lag_s])
        return SoakReport(seconds=samples[-1].t - samples[0].t if samples else 0.0, slices=len(handovers) + 1,
                          handovers=handovers, lag_p50=_pct(lags, 0.5), lag_p99=_pct(lags, 0.99),
                          lag_max=max(lags, default=0.0), timeline=timeline)
