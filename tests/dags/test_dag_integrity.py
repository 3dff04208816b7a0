"""Every DAG imports without touching the network, documents itself, retries, and validates params."""
from __future__ import annotations

import copy
import socket

import pytest

pytestmark = pytest.mark.offline

DAG_IDS = {"dblog_capture", "dblog_dump", "dblog_dump_control", "dblog_full_refresh", "dblog_merge", "dblog_verify"}


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
def test_every_dag_has_docs_tags_and_retries(dags, dag_id):
    dag = dags[dag_id]
    assert dag.doc_md and dag.doc_md.strip().startswith(f"### {dag_id}")
    assert "dblog" in dag.tags and len(dag.tags) >= 2
    assert dag.default_args.get("retries", 0) >= 1
    start_tasks = [t for t in dag.tasks if t.task_id.endswith(".start")]
    assert all(t.retries == 0 for t in start_tasks), "bad dump input must fail at once, not retry"


def _validate(dag, conf):
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return params.validate()


@pytest.mark.parametrize("conf", [
    {"chunk_size": 0}, {"chunk_size": "big"}, {"tables": "accounts"}, {"source": "nope"},
    {"delay_seconds": -1}, {"keys": "1,2"}, {"dump_id": "bad id; drop"},
])
def test_dump_params_reject_bad_values(dags, conf):
    from airflow.sdk.exceptions import ParamValidationError
    with pytest.raises(ParamValidationError):
        _validate(dags["dblog_dump"], conf)


def test_dump_params_accept_a_key_list_repair(dags):
    out = _validate(dags["dblog_dump"], {"tables": ["accounts"], "keys": [[1], [2, "a"]], "chunk_size": 50})
    assert out["keys"] == [[1], [2, "a"]] and out["chunk_size"] == 50


def test_control_params_reject_an_unknown_action(dags):
    from airflow.sdk.exceptions import ParamValidationError
    with pytest.raises(ParamValidationError):
        _validate(dags["dblog_dump_control"], {"dump_id": "x", "action": "explode"})


def test_operators_store_template_fields_unchanged_and_the_trigger_round_trips():
    from dblog_airflow.operators.dump import StartDumpOperator
    from dblog_airflow.triggers.capture import CaptureReachedTrigger
    op = StartDumpOperator(task_id="t", source_conn_id="s", tables="{{ params.tables }}", chunk_size="{{ x }}")
    assert op.tables == "{{ params.tables }}" and op.chunk_size == "{{ x }}"
    trigger = CaptureReachedTrigger("s", "mark", "zookeeper://127.0.0.1:1/x", "/tmp/staging", 0.5)
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    clone = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert clone.serialize() == (path, kwargs)
