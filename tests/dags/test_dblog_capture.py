"""dblog_capture through `dag.test()`: a slice stages changes; a second deployment stays standby."""
from __future__ import annotations

from conftest import wait_for


def test_a_capture_slice_stages_changes_and_logs_position_and_lag(mariadb, deploy, capfd):
    from dblog.coordination.checkpoint import checkpoint_path
    mariadb.workload(seed=5, rows=200).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    mariadb.spawn_workload(seconds=3600, seed=6, rows=200)
    states, run = deploy(mariadb).run("dblog_capture", {"slice_seconds": 5})
    assert states == {f"capture_{mariadb.source_id}": "success"}
    log = capfd.readouterr().out
    assert "slice done:" in log and ", lag " in log
    with mariadb.store() as store:
        assert store.get(checkpoint_path(mariadb.source_id))["position"]
    assert mariadb.staged().read_log(mariadb.source_id, mariadb.table("accounts")).num_rows > 0


def test_while_another_deployment_captures_the_task_stays_standby_and_succeeds(mariadb, deploy, capfd):
    from dblog.coordination import store as paths
    mariadb.workload(seed=7, rows=50).create()
    leader = mariadb.start_capture()
    with mariadb.store() as store:
        holders = wait_for(lambda: store.lock_holders(paths.capture_lock(mariadb.source_id)), 30,
                           what="the other deployment's capture to lead")
        states, run = deploy(mariadb).run("dblog_capture", {"slice_seconds": 5})
        assert states == {f"capture_{mariadb.source_id}": "success"}
        assert "standby" in capfd.readouterr().out
        assert store.lock_holders(paths.capture_lock(mariadb.source_id)) == holders
    assert leader.poll() is None, "the leader was disturbed"
