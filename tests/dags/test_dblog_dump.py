"""dblog_dump through `dag.test()` against the real services."""
from __future__ import annotations



def test_bad_input_fails_the_run_at_once_and_writes_nothing(mariadb, deploy):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.start_capture()
    states, run = deploy(mariadb).run("dblog_dump", {"source": mariadb.source_id, "tables": ["no_such_table"]})
    assert str(run.state) == "failed"
    start = f"{mariadb.source_id}.start"
    assert states[start] == "failed" and states["merge"] == "upstream_failed", states
    with mariadb.store() as store:
        assert store.children(f"/{mariadb.source_id}/dumps") == []
    assert not (mariadb.staging / mariadb.source_id / "chunks").exists(), "a chunk was staged"


def test_a_table_without_primary_key_and_malformed_keys_fail_with_the_reason(mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.sql(f"CREATE TABLE {mariadb.table('nokey')} (a INT)")
    mariadb.start_capture()
    airflow = deploy(mariadb)
    for conf, reason in (({"tables": ["nokey"]}, "primary key"),
                         ({"tables": ["accounts"], "keys": [["x", "y"]]}, "malformed key list")):
        states, run = airflow.run("dblog_dump", {"source": mariadb.source_id, **conf})
        assert states[f"{mariadb.source_id}.start"] == "failed", states
        failure = [line for line in capfd.readouterr().out.splitlines() if "AirflowFailException: dump not started: " in line]
        assert failure and reason in failure[0], failure  # the task log, as dag.test() prints it
    with mariadb.store() as store:
        assert store.children(f"/{mariadb.source_id}/dumps") == []
