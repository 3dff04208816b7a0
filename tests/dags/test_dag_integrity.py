"""Every DAG imports without touching the network, documents itself, retries, and validates params;
a run's conf is checked against the DAG's params by its first task."""
from __future__ import annotations

import copy
import socket

import pytest

pytestmark = pytest.mark.offline

DAG_IDS = {"dblog_capture", "dblog_dump", "dblog_dump_control", "dblog_full_refresh", "dblog_maintenance", "dblog_merge",
           "dblog_merge_continuous",
           "dblog_verify"}


@pytest.fixture(scope="module")
def dags(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_fixtures import ROOT

    def refuse(*args, **kwargs):
        raise AssertionError(f"a DAG file opened a network connection at import: {args}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", refuse)
        mp.setattr(socket, "create_connection", refuse)
        bag = DagBag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags


def test_every_dag_imports_without_network_access(dags):
    assert set(dags) == DAG_IDS


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_every_dag_has_docs_a_description_tags_and_retries(dags, dag_id):
    dag = dags[dag_id]
    assert dag.doc_md and dag.doc_md.strip().startswith(f"### {dag_id}")
    assert dag.description and len(dag.description) > 20, "the DAG list shows the description"
    assert "dblog" in dag.tags and len(dag.tags) >= 2
    assert dag.default_args.get("retries", 0) >= 1
    # Every task, start tasks too, is retried when its worker dies with it; bad input fails a task
    # at once all the same (AirflowFailException: tests/dags/test_dblog_dump.py).
    assert all(t.retries >= 1 for t in dag.tasks), [t.task_id for t in dag.tasks if t.retries < 1]
    if dag_id in ("dblog_dump", "dblog_full_refresh"):   # a dump task resumes after its last window
        from datetime import timedelta

        from dblog.settings import settings
        delay = timedelta(seconds=settings().dump.retry_delay_seconds)
        assert all(t.retry_delay == delay for t in dag.tasks), "DBLOG_DUMP_RETRY_DELAY_SECONDS"


def test_the_tags_tell_the_dags_apart(dags):
    tag_sets = {dag_id: frozenset(dag.tags) for dag_id, dag in dags.items()}
    assert len(set(tag_sets.values())) == len(tag_sets), tag_sets


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_every_param_has_a_title_and_a_description(dags, dag_id):
    for name in dags[dag_id].params:
        param = dags[dag_id].params.get_param(name)
        assert param.schema.get("title") and param.description, (dag_id, name)


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_number_params_give_the_trigger_form_no_bounds_to_clamp_an_entry_to(dags, dag_id):
    # The form's number input clamps an out-of-range entry to the schema's minimum/maximum when it
    # loses focus, silently (a typed chunk size 0 ran as 1); the start task checks ranges instead.
    for name in dags[dag_id].params:
        schema = dags[dag_id].params.get_param(name).schema
        assert not {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(schema), (dag_id, name)


@pytest.mark.parametrize("dag_id", ["dblog_verify", "dblog_full_refresh"])
def test_verify_and_full_refresh_take_a_source_tables_and_a_chunk_size_defaulting_to_everything(dags, dag_id):
    params = dags[dag_id].params
    assert {"source", "tables", "chunk_size"} <= set(params)
    assert params["source"] == "all" and not params["tables"]  # what the scheduled runs use
    assert "all" in params.get_param("source").schema["enum"]
    assert ("delay_seconds" in params) == (dag_id == "dblog_full_refresh")


def _validate(dag, conf):
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return params.validate()


@pytest.mark.parametrize("conf", [
    {"chunk_size": "big"}, {"chunk_size": 1.5}, {"tables": "accounts"}, {"source": "nope"},
    {"delay_seconds": "soon"}, {"keys": "1,2"}, {"dump_id": "bad id; drop"},
])
def test_dump_params_reject_values_of_the_wrong_type(dags, conf):
    from airflow.sdk.exceptions import ParamValidationError
    with pytest.raises(ParamValidationError):
        _validate(dags["dblog_dump"], conf)


def test_dump_params_accept_a_key_list_repair(dags):
    out = _validate(dags["dblog_dump"], {"tables": ["accounts"], "keys": [[1], [2, "a"]], "chunk_size": 50})
    assert out["keys"] == [[1], [2, "a"]] and out["chunk_size"] == 50


def test_a_conf_check_names_each_misspelled_key_and_out_of_range_value_with_its_fix(dags):
    from dblog_airflow.params import conf_problems
    declared = list(dags["dblog_dump"].params)
    problems = conf_problems(declared, {"source": "dblog_mariadb", "table": ["accounts"], "chunksize": 5, "zzz": 1},
                             {"chunk_size": 0, "delay_seconds": -1, "tables": ["accounts"]})
    text = "; ".join(problems)
    assert "unknown param 'table' (did you mean 'tables'?)" in text
    assert "unknown param 'chunksize' (did you mean 'chunk_size'?)" in text
    assert ("unknown param 'zzz' (the params are chunk_size, delay_seconds, dump_id, exclude, keys, "
            "parallelism, source, tables)") in text
    assert "chunk_size = 0: a chunk reads 1 to 100,000 rows" in text
    assert "delay_seconds = -1: set 0 (no pause) to 3600 seconds" in text
    assert len(problems) == 5, problems


def test_a_conf_check_accepts_every_declared_key_at_its_bounds(dags):
    from dblog_airflow.params import conf_problems
    params = dags["dblog_dump"].params
    conf = {name: params[name] for name in params}
    assert conf_problems(list(params), conf, {"chunk_size": 1, "delay_seconds": 3600, "tables": []}) == []
    assert conf_problems(list(params), conf, {"chunk_size": 100_000, "delay_seconds": 0.0, "tables": None}) == []
    assert conf_problems(list(params), {}, {"chunk_size": True, "delay_seconds": 0, "tables": [""]}) == [
        "chunk_size = True: a chunk reads 1 to 100,000 rows; set a whole number in that range (default 20000)",
        "tables = ['']: list table names (`table` or `schema.table`), one per line; leave it empty for every table"]


@pytest.mark.parametrize("dag_id", ["dblog_dump", "dblog_full_refresh"])
def test_dags_that_dump_every_table_take_an_exclude_list_the_start_task_checks(dags, dag_id):
    from dblog_airflow.params import conf_problems
    params = dags[dag_id].params
    assert params["exclude"] == [] and params["tables"] in ([], None)  # empty tables: every table
    assert conf_problems(list(params), {"exclude": ["a", " "]}, {"exclude": ["a", " "]}) == [
        "exclude = ['a', ' ']: list the table names to leave out of a dump of every table, one per line"]
    assert _validate(dags[dag_id], {"exclude": ["audit_log"]})["exclude"] == ["audit_log"]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_conf_with_nan_or_infinity_is_refused_by_the_engines_rule(dags, value):
    from dblog_airflow.params import conf_problems
    params = list(dags["dblog_dump_control"].params)
    assert conf_problems(params, {}, {"chunk_size": value, "delay_seconds": value}) == [
        f"chunk_size = {value!r}: a chunk reads 1 to 100,000 rows; set a whole number in that range (default 20000)",
        f"delay_seconds = {value!r}: set 0 (no pause) to 3600 seconds between chunks"]


def test_the_dblog_page_refuses_a_non_finite_throttle_before_it_reaches_zookeeper(monkeypatch):
    from fastapi import HTTPException

    from dblog_airflow.ui import app

    def unreachable():
        raise AssertionError("the throttle reached ZooKeeper")
    monkeypatch.setattr(app.clients, "store", unreachable)
    with pytest.raises(HTTPException) as exc:
        app._act("dblog_mariadb", "d1", "throttle", {"delay_s": float("nan")}, "someone")
    assert exc.value.status_code == 400, exc.value.detail
    assert exc.value.detail == "delay between chunks must be a finite number, got nan"


def test_the_dblog_page_lists_the_staged_log_at_most_once_a_minute_and_shows_the_rest_when_it_cannot(
        monkeypatch, tmp_path):
    from dblog.stagedlog.staged_log import StagedLog
    from dblog_airflow.hooks.dblog import DBLogHook
    from dblog_airflow.ui import app
    listed = []

    class Counted(StagedLog):
        def inventory(self, source):
            listed.append(source)
            return super().inventory(source)
    monkeypatch.setattr(DBLogHook, "staged", staticmethod(lambda: Counted(str(tmp_path))))
    usage = app._Usage()
    assert usage("s1").files == usage("s1").files == 0 and listed == ["s1"], "a refresh every 3 s lists once"

    def unreachable():
        raise OSError("the bucket does not answer")
    monkeypatch.setattr(DBLogHook, "staged", staticmethod(unreachable))
    assert app._Usage()("s1") is None   # the page shows "-" there, and the capture, dumps and tables as ever


def test_control_params_reject_an_unknown_action(dags):
    from airflow.sdk.exceptions import ParamValidationError
    with pytest.raises(ParamValidationError):
        _validate(dags["dblog_dump_control"], {"dump_id": "x", "action": "explode"})


def test_operators_store_template_fields_unchanged_and_the_triggers_round_trip():
    from dblog_airflow.operators.dump import StartDumpOperator
    from dblog_airflow.triggers.capture import CaptureReachedTrigger
    from dblog_airflow.triggers.merge import ContinuousMergeTookTrigger
    op = StartDumpOperator(task_id="t", source_conn_id="s", tables="{{ params.tables }}", chunk_size="{{ x }}")
    assert op.tables == "{{ params.tables }}" and op.chunk_size == "{{ x }}"
    for trigger in (CaptureReachedTrigger("s", "mark", "zookeeper://127.0.0.1:1/x", "/tmp/staging", 0.5),
                    ContinuousMergeTookTrigger([["s", "d1", "shop.t"]], "zookeeper://127.0.0.1:1/x", 120, 600)):
        path, kwargs = trigger.serialize()
        module, name = path.rsplit(".", 1)
        clone = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
        assert clone.serialize() == (path, kwargs)


def test_the_merge_job_writes_the_reason_it_failed_into_its_report(tmp_path, capsys):
    import importlib.util
    import json

    from airflow_fixtures import ROOT
    spec = importlib.util.spec_from_file_location("merge_job", ROOT / "spark_jobs" / "merge.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    report = tmp_path / "report.json"
    assert job.run(["--bucket-rows", "0", "--report", str(report)]) == 2
    said = "--bucket-rows must be from 1 to 1,000,000,000, got 0"
    assert json.loads(report.read_text()) == {"error": said}
    assert f"dblog: error: {said}" in capsys.readouterr().err  # still in the log


def test_a_failed_merge_logs_the_jobs_reason_as_an_error_and_fails_with_it(monkeypatch):
    import json

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException

    from dblog_airflow.operators import merge

    def spark_submit_fails(self, context):
        with open(self.application_args[self.application_args.index("--report") + 1], "w") as f:
            json.dump({"error": "the primary key of shop.t changed from ['id'] to ['k']; ..."}, f)
        raise AirflowException("Cannot execute: spark-submit ... Error code is: 2.")

    errors = []

    class Log:
        def error(self, message, *args):
            errors.append(message % args)

        def warning(self, *args):
            pass

    monkeypatch.setattr(SparkSubmitOperator, "execute", spark_submit_fails)
    monkeypatch.setenv("DBLOG_SOURCES", "t_src")  # connections the task resolves before it submits the job
    monkeypatch.setenv("AIRFLOW_CONN_T_SRC", "mysql://u:p@127.0.0.1:1/db")
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_ZOOKEEPER", "zookeeper://127.0.0.1:1/x")
    monkeypatch.setattr(merge.MergeOperator, "log", Log())
    with pytest.raises(AirflowException, match=r"^merge failed: the primary key of shop.t changed"):
        merge.MergeOperator(task_id="merge").execute({})
    assert errors == ["merge failed: the primary key of shop.t changed from ['id'] to ['k']; ..."]


def test_a_capture_slice_outside_5_seconds_to_a_day_is_refused_with_the_range(dags):
    from dblog_airflow.params import conf_problems
    params = list(dags["dblog_capture"].params)
    assert conf_problems(params, {"slice_seconds": 2}, {"slice_seconds": 2}) == [
        "slice_seconds = 2: a capture slice lasts 5 to 86,400 seconds; each handover pauses the stream a few seconds"]
    assert conf_problems(params, {"slice": 60}, {"slice_seconds": 60}) == [
        "unknown param 'slice' (the params are slice_seconds)"]
