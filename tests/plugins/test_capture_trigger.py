"""The deferred wait for the capture (CaptureReachedTrigger) against real ZooKeeper and MariaDB:
it ends with the position once the capture passes the mark, logs the capture's state while it
waits, and ends with the reason (and the fix) when the capture does not run."""
from __future__ import annotations

import asyncio
import re


def _events(src, mark: str, **kwargs) -> list[dict]:
    from dblog_airflow.triggers.capture import CaptureReachedTrigger
    trigger = CaptureReachedTrigger(src.source_id, mark, src.zk_uri, str(src.staging), poll_interval=0.2, **kwargs)

    async def collect():
        return [e.payload async for e in trigger.run()]
    return asyncio.run(collect())


def test_the_wait_ends_with_the_marks_position_once_a_running_capture_passes_it(mariadb):
    from dblog.capture.capture_loop import sync_point
    mariadb.workload(seed=3, rows=50).create()
    mariadb.start_capture()
    mark = sync_point(mariadb.source())
    [event] = _events(mariadb, mark, timeout=120)
    assert event["position"] and not event.get("error")


def test_the_wait_for_a_stopped_capture_logs_its_state_and_fails_with_the_reason_and_the_fix(mariadb, capfd):
    from dblog.capture.capture_loop import sync_point
    mariadb.workload(seed=4, rows=50).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)  # a checkpoint, no capture
    mark = sync_point(mariadb.source())
    capfd.readouterr()
    [event] = _events(mariadb, mark, timeout=3, log_every=1)
    assert event["position"] is None
    assert f"the capture of {mariadb.source_id} is not running (stopped" in event["error"]
    assert "s, position mysql-bin." in event["error"] and "unpause the dblog_capture DAG" in event["error"]
    waiting = [line for line in capfd.readouterr().out.splitlines() if "for the capture to pass" in line]
    assert len(waiting) >= 2 and all("capture stopped" in m for m in waiting), waiting


def test_the_wait_for_a_capture_that_has_not_run_for_its_grace_fails_before_its_timeout(mariadb):
    from dblog.capture.capture_loop import sync_point
    mariadb.workload(seed=5, rows=50).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    mark = sync_point(mariadb.source())
    [event] = _events(mariadb, mark, timeout=600, stopped_grace=1)
    assert event["position"] is None
    assert f"the capture of {mariadb.source_id} is not running (stopped" in event["error"], event["error"]
    waited = int(re.search(r"after (\d+) s of waiting", event["error"])[1])
    assert waited < 600, "the wait ran to its timeout instead of failing once the capture had not run for its grace"
