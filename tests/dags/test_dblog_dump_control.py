"""dblog_dump_control through `dag.test()`: pause, throttle, resume and cancel reach the dump."""
from __future__ import annotations


def test_the_control_dag_pauses_throttles_resumes_and_cancels_a_dump(mariadb, deploy):
    from dblog.coordination import store as paths
    mariadb.workload(seed=41, rows=50).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    dump_id = mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", "--create-only",
                            check=True).stdout.strip()
    airflow = deploy(mariadb)
    steps = (("pause", {}, {"state": "paused"}),
             ("throttle", {"chunk_size": 7, "delay_seconds": 0.5, "parallelism": 3},
              {"state": "paused", "chunk_size": 7, "delay_s": 0.5, "parallelism": 3}),
             ("resume", {}, {"state": "running", "chunk_size": 7}),
             ("status", {}, {"state": "running"}),
             ("cancel", {}, {"state": "cancelled"}))
    with mariadb.store() as store:
        for action, extra, expected in steps:
            states, _ = airflow.run("dblog_dump_control", {"source": mariadb.source_id, "dump_id": dump_id,
                                                           "action": action, **extra})
            assert states == {"control": "success"}, (action, states)
            control = store.get(paths.control_path(mariadb.source_id, dump_id))
            assert expected.items() <= control.items(), (action, control)
    states, _ = airflow.run("dblog_dump_control", {"source": mariadb.source_id, "dump_id": "no-such-dump",
                                                   "action": "pause"})
    assert states == {"control": "failed"}


def test_a_misspelled_control_key_fails_the_task_naming_the_right_key_and_changes_nothing(mariadb, deploy, capfd):
    from dblog.coordination import store as paths
    mariadb.workload(seed=41, rows=50).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    dump_id = mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", "--create-only",
                            check=True).stdout.strip()
    with mariadb.store() as store:
        before = store.get(paths.control_path(mariadb.source_id, dump_id))
    states, _ = deploy(mariadb).run("dblog_dump_control", {"source": mariadb.source_id, "dump_id": dump_id,
                                                           "action": "throttle", "chunksize": 5})
    assert states == {"control": "failed"}
    errors = [line for line in capfd.readouterr().out.splitlines() if "[error" in line and "DumpControlOperator" in line]
    assert errors and "unknown param 'chunksize' (did you mean 'chunk_size'?)" in errors[0], errors
    with mariadb.store() as store:
        assert store.get(paths.control_path(mariadb.source_id, dump_id)) == before
