"""What the Airflow adapters build from their connections and params: the merge task's spark-submit
(arguments, conf, environment, and the private file that carries the connections), the ZooKeeper
URI, a dump's spec, the wait's trigger. Connections here come from AIRFLOW_CONN_* variables, one
of the places Airflow looks; tests/dags/test_airflow_connections.py uses the metadata database."""
from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-pw"
ZK_JSON = json.dumps({"conn_type": "zookeeper", "host": "zk1:2181,zk2:2181", "schema": "prod",
                      "extra": {"session_timeout": 7}})


@pytest.fixture
def connections(airflow_home, monkeypatch):
    """A source and a ZooKeeper known to Airflow, shared roots, and no local fallback."""
    monkeypatch.delenv("DBLOG_LOCAL", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SRC_A", f"mysql://cap:{SECRET}@db.example:3306/shop")
    monkeypatch.setenv("AIRFLOW_CONN_ZK_PROD", ZK_JSON)
    monkeypatch.setenv("DBLOG_STAGING", "/shared/staging")
    monkeypatch.setenv("DBLOG_WAREHOUSE", "/shared/warehouse")


def merge_job():
    spec = importlib.util.spec_from_file_location("merge_job", ROOT / "spark_jobs" / "merge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_merge_task_shows_spark_submit_no_secret_and_hands_the_job_its_connections_in_a_private_file(
        connections, tmp_path):
    from dblog_airflow.operators.merge import MergeOperator
    task = MergeOperator(task_id="merge", sources="src_a", tables="shop.accounts", bucket_rows=1000,
                         zookeeper_conn_id="zk_prod", conf={"spark.sql.shuffle.partitions": "4"})
    report = task.prepare_submit(str(tmp_path), ["src_a"])

    settings = str(tmp_path / "settings.json")
    assert task.application_args == ["--source", "src_a", "--table", "shop.accounts", "--bucket-rows", "1000",
                                     "--report", report, "--settings", settings]
    assert task.conf["spark.log.level"] == "WARN" and task.conf["spark.sql.shuffle.partitions"] == "4"
    assert f"-Dlog4j2.configurationFile=file:{tmp_path}" in task.conf["spark.driver.extraJavaOptions"]
    assert task.env_vars == {"PYSPARK_PYTHON": sys.executable}
    assert SECRET not in json.dumps([task.application_args, task.conf, task.env_vars])

    assert stat.S_IMODE(os.stat(settings).st_mode) == 0o600
    assert json.loads(Path(settings).read_text()) == {
        "AIRFLOW_CONN_SRC_A": f"mysql://cap:{SECRET}@db.example:3306/shop",
        "AIRFLOW_CONN_DBLOG_ZOOKEEPER": "zookeeper://zk1:2181,zk2:2181/prod?session_timeout=7",
        "DBLOG_STAGING": "/shared/staging", "DBLOG_WAREHOUSE": "/shared/warehouse"}


def test_the_job_takes_its_settings_from_the_file_and_removes_it(connections, monkeypatch, tmp_path):
    from dblog import connections
    from dblog_airflow.operators.merge import MergeOperator
    task = MergeOperator(task_id="merge", zookeeper_conn_id="zk_prod")
    task.prepare_submit(str(tmp_path), ["src_a"])
    for name in ("AIRFLOW_CONN_SRC_A", "AIRFLOW_CONN_DBLOG_ZOOKEEPER", "DBLOG_STAGING", "DBLOG_WAREHOUSE"):
        monkeypatch.setenv(name, "stale")  # what the job's own environment held; restored after the test

    argv = merge_job().apply_settings(list(task.application_args))

    assert "--settings" not in argv and not (tmp_path / "settings.json").exists()
    source, zk = connections.source("src_a"), connections.zookeeper()
    assert source.settings["host"] == "db.example" and source.settings["passwd"] == SECRET
    assert (zk.hosts, zk.chroot, zk.session_timeout) == ("zk1:2181,zk2:2181", "/prod", 7.0)
    assert (connections.staging_root(), connections.warehouse_root()) == ("/shared/staging", "/shared/warehouse")


def test_the_job_refuses_a_settings_file_that_would_set_more_than_dblog(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"DBLOG_STAGING": "/s", "PATH": "/tmp/evil"}))
    with pytest.raises(ValueError, match="not dblog settings: PATH"):
        merge_job().apply_settings(["--settings", str(path)])
    assert os.environ.get("DBLOG_STAGING") != "/s"


def test_the_merge_task_refuses_to_submit_without_a_warehouse_root_and_writes_no_settings(
        connections, monkeypatch, tmp_path):
    from dblog.connections import ConfigError
    from dblog_airflow.operators.merge import MergeOperator
    monkeypatch.delenv("DBLOG_WAREHOUSE")
    with pytest.raises(ConfigError, match="DBLOG_WAREHOUSE is not set.*DBLOG_LOCAL=1"):
        MergeOperator(task_id="merge", zookeeper_conn_id="zk_prod").prepare_submit(str(tmp_path), ["src_a"])
    assert list(tmp_path.iterdir()) == []


def test_a_source_airflow_does_not_know_fails_the_merge_before_spark_submit(connections, tmp_path):
    from airflow.sdk.exceptions import AirflowNotFoundException

    from dblog_airflow.operators.merge import MergeOperator
    with pytest.raises(AirflowNotFoundException, match="src_b"):
        MergeOperator(task_id="merge", zookeeper_conn_id="zk_prod").prepare_submit(str(tmp_path), ["src_b"])
    assert list(tmp_path.iterdir()) == []


def test_the_job_arguments_name_every_source_and_keep_a_bucket_size_of_zero_for_the_job_to_refuse():
    from dblog_airflow.operators.merge import job_arguments
    assert job_arguments(["a", "b"], [], None, "r.json", "s.json") == [
        "--source", "a,b", "--report", "r.json", "--settings", "s.json"]
    assert job_arguments(["a"], ["t", "u"], 0, "r", "s")[:6] == ["--source", "a", "--table", "t,u", "--bucket-rows", "0"]


@pytest.mark.parametrize("fields, uri", [
    (dict(host="zk1:2181,zk2:2181", schema="prod", extra='{"session_timeout": 7}'),
     "zookeeper://zk1:2181,zk2:2181/prod?session_timeout=7"),
    (dict(host="zk", port=2181, schema="/team/a/"), "zookeeper://zk:2181/team/a"),
    (dict(host="zk", port=2181), "zookeeper://zk:2181/dblog"),
])
def test_a_zookeeper_connection_becomes_the_engines_uri(airflow_home, fields, uri):
    from airflow.sdk import Connection

    from dblog_airflow.hooks.dblog import zookeeper_uri_of
    assert zookeeper_uri_of(Connection(conn_id="zk", conn_type="zookeeper", **fields)) == uri


def test_a_zookeeper_connection_without_a_host_is_refused_naming_it(airflow_home):
    from airflow.sdk import Connection

    from dblog.settings import ConfigError
    from dblog_airflow.hooks.dblog import zookeeper_uri_of
    with pytest.raises(ConfigError, match=r"connection zk has no host"):
        zookeeper_uri_of(Connection(conn_id="zk", conn_type="zookeeper", schema="prod"))


def test_a_dump_start_task_builds_its_dump_from_the_form_fields(airflow_home):
    from dblog.snapshot.dump_spec import DumpSpec
    from dblog_airflow.params import dump_spec
    # The form gives one key per line, a line being JSON or a bare string; empty fields come as None or "".
    assert dump_spec(None, ["7", '"abc"', '[1, "a"]', "plain", " "], 500, 0.5, "", None) == DumpSpec(
        tables=[], keys=[7, "abc", [1, "a"], "plain"], chunk_size=500, delay_s=0.5, dump_id=None, exclude=[])
    # A conf sent through the REST API gives the keys as JSON already.
    assert dump_spec(["shop.t"], [[1, "a"]], 20_000, 0, "d1", ["x"]) == DumpSpec(
        tables=["shop.t"], keys=[[1, "a"]], chunk_size=20_000, delay_s=0, dump_id="d1", exclude=["x"])


def test_the_wait_defers_to_a_trigger_that_carries_the_zookeeper_and_staging_root_but_no_credential(connections):
    from dblog_airflow.hooks.dblog import DBLogHook
    from dblog_airflow.operators.wait import WaitForCaptureOperator
    task = WaitForCaptureOperator(task_id="wait", source_conn_id="src_a", zookeeper_conn_id="zk_prod",
                                  timeout_seconds=60)
    path, kwargs = task.trigger(DBLogHook("src_a", "zk_prod"), "src_a", "sync-1").serialize()
    assert path == "dblog_airflow.triggers.capture.CaptureReachedTrigger"
    assert kwargs["zookeeper_uri"] == "zookeeper://zk1:2181,zk2:2181/prod?session_timeout=7"
    assert (kwargs["staging"], kwargs["source"], kwargs["mark"], kwargs["timeout"]) == (
        "/shared/staging", "src_a", "sync-1", 60)
    assert SECRET not in json.dumps(kwargs)


def test_a_verify_run_covers_the_source_its_param_names_or_every_source(airflow_home):
    from dblog_airflow.operators.verify import selected_sources
    assert selected_sources(["a", "b"], "b") == ["b"]
    assert selected_sources(["a", "b"], "all") == selected_sources(["a", "b"], "") == \
        selected_sources(["a", "b"], None) == ["a", "b"]
    assert selected_sources(["a", "b"], "c") == []


def test_a_postgres_source_entered_field_by_field_keeps_its_schema_slot_publication_and_exclusions(connections,
                                                                                                  monkeypatch):
    from dblog_airflow.hooks.dblog import DBLogHook
    # As the UI's form stores it: host, port, login, password, database (Airflow's "schema"), extras.
    monkeypatch.setenv("AIRFLOW_CONN_PG_FORM", json.dumps({
        "conn_type": "postgres", "host": "db.example", "port": 5432, "login": "cap", "password": SECRET,
        "schema": "shop", "extra": {"schema": "sales", "slot": "dblog_s", "publication": "pub1",
                                    "exclude": "accounts.note"}}))
    source = DBLogHook("pg_form", "zk_prod").get_source()
    assert source.dsn == dict(host="db.example", port=5432, user="cap", password=SECRET, dbname="shop")
    assert (source.schema, source.slot, source.publication) == ("sales", "dblog_s", "pub1")
    assert source.exclude == {"sales.accounts": frozenset({"note"})}
    assert source.deployment == "prod"  # named after the ZooKeeper connection's chroot
