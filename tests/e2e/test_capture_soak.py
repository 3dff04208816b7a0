"""The capture keeps the change stream flowing under the real scheduler (`airflow standalone`:
scheduler, triggerer, LocalExecutor), slice after slice, under a write workload: it survives a
kill -9 of the capture task's process mid-slice, a dump triggered meanwhile completes, the lag
stays bounded, the metrics flow; and a dump waiting on a stopped capture fails saying why.

Short form in `make test` (slices of 20 s, at least 10 handovers); `make soak` runs it for
`DBLOG_SOAK_SECONDS` (30 minutes) and prints slices, the longest handover gap and lag p50/p99/max.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_fixtures import ROOT, SLICE_SECONDS
from conftest import wait_for
from soak import CaptureProbe

HANDOVERS = 5  # the suite's short form; `make soak` runs for DBLOG_SOAK_SECONDS
SOAK_SECONDS = float(os.environ.get("DBLOG_SOAK_SECONDS", "0"))  # 0: until HANDOVERS handovers
# A handover waits for the scheduler to start the next run; a killed task for its retry (retry
# delay 5 s, plus the dead process's ZooKeeper session). Lag beyond this means the capture stopped.
LAG_BOUND_S = 4 * SLICE_SECONDS
OUT = ROOT / ".local" / "test-output"


def _pid_of(leader: str) -> int:
    return int(leader.rsplit(":", 1)[1])


@pytest.mark.late(2)
@pytest.mark.timeout(1500 + 2 * SOAK_SECONDS)
def test_the_capture_hands_over_slice_after_slice_survives_a_kill_and_a_dump_completes(standalone):
    """The probe has sampled the capture since the deployment started, and this test runs after the
    deployment's other tests: the handovers during those count (they ran writes, dumps and merges)."""
    src, probe = standalone.src, standalone.probe
    assert isinstance(probe, CaptureProbe)
    writer = src.spawn_workload(seconds=7200, seed=61, rows=3000, rate=50)
    # The first slice catches up with what was written while the deployment started: not a handover.
    wait_for(lambda: len(probe.leaders()) >= 2, 10 * SLICE_SECONDS, interval=0.5, what="the first handover")
    started = next(s.t for s in probe.samples if s.leader == probe.leaders()[1])
    wait_for(lambda: len(probe.leaders()) >= 4, 20 * SLICE_SECONDS, interval=1,
             what="the capture to hand over twice more under the scheduler")

    run = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={
        "logical_date": None, "conf": {"source": src.source_id, "tables": ["accounts"], "chunk_size": 500}})
    assert run.status_code == 200, run.text

    # kill -9 the capture task's process mid-slice: a retry (or the next run) replaces it. The leader
    # seen capturing is killed; one whose slice ended meanwhile is gone, and the next one is taken.
    def killed() -> str | None:
        sample = probe.samples[-1]
        if sample.state != "capturing" or not sample.leader:
            return None
        try:
            os.kill(_pid_of(sample.leader), signal.SIGKILL)
        except ProcessLookupError:
            return None
        return sample.leader
    victim = wait_for(killed, 60, interval=0.25, what="a capture slice to be running, to kill it")
    killed_at = time.time()
    wait_for(lambda: probe.leaders()[-1] != victim and probe.samples[-1].state == "capturing",
             10 * SLICE_SECONDS, interval=0.5, what="a new capture after the kill")
    recovered_s = time.time() - killed_at

    # ... while a dump triggered just before the kill runs: it completes, its wait for the capture
    # spanning the killed slice and its replacement
    assert standalone.wait_for_run("dblog_dump", run.json()["dag_run_id"], timeout=600) == "success"

    def enough() -> bool:
        report = probe.report(since=started)
        return len(report.handovers) >= HANDOVERS + 1 and time.time() - started >= SOAK_SECONDS
    wait_for(enough, max(SOAK_SECONDS * 1.5, 40 * SLICE_SECONDS), interval=2,
             what=f"{HANDOVERS} handovers beside the kill")
    report = probe.report(since=started)
    writer.kill()

    OUT.mkdir(parents=True, exist_ok=True)
    report.recovery_after_kill_s = round(recovered_s, 2)
    (OUT / "soak.json").write_text(report.to_json())
    print(f"\n{report.summary()}; recovery after kill -9 {recovered_s:.1f} s")
    leaders = [h.new for h in report.handovers]
    assert len(set(leaders)) == len(leaders), "a leader came back: a slice did not end or two overlapped"
    assert report.lag_max < LAG_BOUND_S, report.summary()
    # Every slice was an Airflow run of dblog_capture; none failed (the killed try was retried).
    runs = standalone.api("GET", "/dags/dblog_capture/dagRuns", params={"limit": 100}).json()["dag_runs"]
    assert len(runs) >= HANDOVERS and not [r for r in runs if r["state"] == "failed"], runs
    # The capture's metrics reach the deployment's StatsD.
    lags = standalone.statsd.values(f"dblog.capture.lag_seconds.{src.source_id}")
    assert lags and max(lags) < LAG_BOUND_S
    assert sum(standalone.statsd.values(f"dblog.capture.events.{src.source_id}")) > 0


# `make test-full` only (85 s, most of it the capture's grace): the suite's form is
# tests/plugins/test_capture_trigger.py (the wait's trigger against a stopped capture and its grace).
@pytest.mark.long
@pytest.mark.late(3)  # it pauses the capture: after every test that needs it running
def test_a_dump_waiting_on_a_stopped_capture_fails_with_the_reason_and_the_fix(standalone):
    src = standalone.src
    assert standalone.api("PATCH", "/dags/dblog_capture", json={"is_paused": True}).ok
    try:
        with src.store() as store:
            from dblog.coordination.health import STOPPED, capture_health

            def stopped() -> bool:
                # No lease holder is also the moment between two slices: a run created before the
                # pause may still start one. Stopped is no capture run left running or queued too.
                runs = standalone.api("GET", "/dags/dblog_capture/dagRuns",
                                      params=[("state", "running"), ("state", "queued")]).json()
                return not runs["dag_runs"] and capture_health(store, src.source_id).state == STOPPED
            wait_for(stopped, 6 * SLICE_SECONDS, interval=1, what="the paused capture's last slice to end")
        run = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={
            "logical_date": None, "conf": {"source": src.source_id, "tables": ["accounts"], "keys": ["1"]}})
        assert run.status_code == 200, run.text
        run_id = run.json()["dag_run_id"]
        # Sooner than the wait's timeout (900 s here): no capture has run for its grace (3 slices).
        assert standalone.wait_for_run("dblog_dump", run_id, timeout=600) == "failed"
    finally:
        standalone.api("PATCH", "/dags/dblog_capture", json={"is_paused": False})
    log = standalone.task_log("dblog_dump", run_id, f"{src.source_id}.wait_for_capture")
    assert f"the capture of {src.source_id} is not running (stopped" in log
    assert "unpause the dblog_capture DAG" in log
    assert "for the capture to pass sync watermark" in log  # the state, logged while it waited

