"""Connections defined only in Airflow (here its metadata database, as the UI stores them) reach
every task, and through the merge task the Spark job it submits: no AIRFLOW_CONN_* variable and
no DBLOG_LOCAL fallback in the environment. (The test's writer and checks reach the source
directly. The fields and extras of a PostgreSQL connection: tests/unit/test_adapter_arguments.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import assert_warehouse_equals_source, settle, wait_for


def test_capture_dump_and_merge_runs_use_connections_that_only_the_metadata_database_holds(
        mariadb, deploy, warehouse, monkeypatch, tmp_path):
    from dblog.coordination.health import CAPTURING, capture_health
    mariadb.workload(seed=91, rows=400).create()
    airflow = deploy(mariadb, in_metadata_db=True)
    monkeypatch.delenv("DBLOG_LOCAL")
    for name in [k for k in os.environ if k.startswith("AIRFLOW_CONN_") and k != "AIRFLOW_CONN_SPARK_DEFAULT"]:
        monkeypatch.delenv(name)
    sid = mariadb.source_id

    # The capture DAG in a process of its own, as a worker runs it while the other DAGs run.
    capture_log = tmp_path / "capture.log"
    with open(capture_log, "w") as out:
        capture = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "dags", "test", "dblog_capture",
                                    "-c", json.dumps({"slice_seconds": 900})], env=dict(os.environ), stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with mariadb.store() as store:
            def capturing():
                assert capture.poll() is None, capture_log.read_text()[-3000:]
                return capture_health(store, sid).state == CAPTURING
            wait_for(capturing, 180, interval=0.5, what="the dblog_capture task to capture")
        # Writes the capture task stages, done before the dump so that its one merge task (the
        # spark-submit job) lands both them and the dump's chunks.
        mariadb.workload(seed=92, rows=400).run(seconds=3, rate=100)
        settle(mariadb)

        states, run = airflow.run("dblog_dump", {"source": sid, "chunk_size": 150})
        assert str(run.state) == "success", (states, capture_log.read_text()[-3000:])
        assert states["merge"] == "success" and states[f"{sid}.dump_table[1]"] == "success", states
    finally:
        os.killpg(capture.pid, signal.SIGKILL)
        capture.wait()
    assert_warehouse_equals_source(mariadb, warehouse)
