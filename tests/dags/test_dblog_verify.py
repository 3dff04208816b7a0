"""dblog_verify through `dag.test()`: drift is found and repaired by a key-list dblog_dump run."""
from __future__ import annotations

import pytest

from conftest import assert_warehouse_equals_source


def errors_logged(capfd) -> list[str]:
    """What the run logged at error level or raised: the reason a repair trigger failed, if it did."""
    out = capfd.readouterr().out
    return [line for line in out.splitlines() if "[error" in line or "Error" in line or "Exception" in line][-20:]


def dag_model(dag_id: str) -> str:
    """What the execution API checks before it triggers a run of `dag_id` (it answers 404 / 400 otherwise)."""
    from airflow.models.dag import DagModel
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session
    with create_session() as session:
        dm = session.query(DagModel).filter_by(dag_id=dag_id).one_or_none()
        errors = [(e.filename, (e.stacktrace or "")[-300:]) for e in session.query(ParseImportError).all()]
        if dm is None:
            return f"{dag_id}: no DagModel; import errors {errors}"
        return (f"{dag_id}: stale {dm.is_stale}, import errors {dm.has_import_errors}, allowed run types "
                f"{dm.allowed_run_types}, file {dm.relative_fileloc} in bundle {dm.bundle_name}; {errors}")


def triggered_runs(dag_id: str) -> list:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    with create_session() as session:
        return [(r.run_id, r.conf) for r in session.query(DagRun).filter_by(dag_id=dag_id).all()
                if r.run_id.startswith("manual__") and r.triggered_by and "OPERATOR" in str(r.triggered_by).upper()]


def test_verify_triggers_a_repair_dump_of_exactly_the_drifted_keys_and_it_converges(mariadb, deploy, warehouse,
                                                                                    capfd):
    mariadb.workload(seed=31, rows=400).create()
    mariadb.start_capture()
    airflow = deploy(mariadb)
    # This one sets up through dblog_dump's own run: the repair it triggers must land on that DAG.
    states, run = airflow.run("dblog_dump", {"source": mariadb.source_id, "chunk_size": 150})
    assert str(run.state) == "success", states
    # Drift behind the capture's back: these changes never reach the binlog.
    mariadb.sql("SET sql_log_bin = 0", f"UPDATE {mariadb.table('accounts')} SET name = 'drift' WHERE id IN (3, 4)")

    states, run = airflow.run("dblog_verify")
    assert states["verify"] == "success" and states.get("repair[0]") == "success", \
        f"{states}\n{dag_model('dblog_dump')}\n" + "\n".join(errors_logged(capfd))
    assert "repair[1]" not in states
    [(_, conf)] = triggered_runs("dblog_dump")
    assert conf == {"source": mariadb.source_id, "tables": [mariadb.table("accounts")], "keys": [[3], [4]],
                    "chunk_size": 1000}

    states, run = airflow.run("dblog_dump", conf)  # what the scheduler would run
    assert str(run.state) == "success", states
    assert_warehouse_equals_source(mariadb, warehouse)


# `make test-full` only (22 s): the run's `tables` param is checked by the integrity tests, and a
# verify that finds and repairs drift is the test above.
@pytest.mark.long
def test_a_verify_triggered_for_one_table_checks_and_repairs_only_that_table(mariadb, deploy, capfd):
    mariadb.workload(seed=33, rows=200).create()
    mariadb.start_capture()
    airflow = deploy(mariadb)
    # Set up through dblog_dump's own run, as the test above: the repair it triggers lands on that DAG.
    states, run = airflow.run("dblog_dump", {"source": mariadb.source_id, "chunk_size": 150})
    assert str(run.state) == "success", states
    mariadb.sql("SET sql_log_bin = 0", f"UPDATE {mariadb.table('accounts')} SET name = 'drift' WHERE id = 3",
                f"UPDATE {mariadb.table('order_lines')} SET sku = 'drift' WHERE order_id = 2")

    states, run = airflow.run("dblog_verify", {"source": mariadb.source_id, "tables": ["order_lines"],
                                               "chunk_size": 77})
    assert str(run.state) == "success" and states.get("repair[0]") == "success", \
        f"{states}\n" + "\n".join(errors_logged(capfd))
    assert "repair[1]" not in states, "a table that was not asked for was repaired"
    [conf] = [c for _, c in triggered_runs("dblog_dump") if c["source"] == mariadb.source_id]
    assert conf["tables"] == [mariadb.table("order_lines")] and conf["chunk_size"] == 77, conf
    assert conf["keys"] and all(k[0] == 2 for k in conf["keys"]), conf


def test_a_verify_run_with_a_misspelled_key_fails_at_start_and_checks_nothing(mariadb, deploy, capfd):
    states, run = deploy(mariadb).run("dblog_verify", {"table": ["accounts"]})
    assert str(run.state) == "failed" and states["start"] == "failed", states
    assert states["verify"] == "upstream_failed" and "repair[0]" not in states, states
    errors = [line for line in capfd.readouterr().out.splitlines() if "[error" in line and "VerifyStartOperator" in line]
    assert errors and "unknown param 'table' (did you mean 'tables'?)" in errors[0], errors
