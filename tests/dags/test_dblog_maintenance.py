"""dblog_maintenance without services: the DAG's shape as parsed, and its task run in process on an
Iceberg table built without Spark (ZooKeeper's lease stood in for, metrics recorded)."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from maintenance_tables import SRC, TABLE, FakeStore, merge, plant, rows

pytestmark = pytest.mark.offline


def parsed(monkeypatch, sources: str, schedule: str | None = None):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_fixtures import ROOT
    monkeypatch.setenv("DBLOG_SOURCES", sources)
    if schedule is not None:
        monkeypatch.setenv("DBLOG_MAINTENANCE_SCHEDULE", schedule)
    bag = DagBag(str(ROOT / "dags" / "dblog_maintenance.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags["dblog_maintenance"]


def test_the_dag_has_one_maintain_task_per_configured_source_and_params_defaulting_to_the_settings(
        airflow_home, monkeypatch):
    from dblog.settings import settings
    dag = parsed(monkeypatch, "shop_a,shop_b")
    assert {t.task_id: (type(t).__name__, t.source_conn_id) for t in dag.tasks} == {
        "shop_a.maintain": ("MaintainOperator", "shop_a"), "shop_b.maintain": ("MaintainOperator", "shop_b")}
    assert not dag.tasks[0].upstream_task_ids, "sources are maintained independently"
    tuned = settings().warehouse
    assert dag.schedule == tuned.maintenance_schedule == "@daily" and dag.max_active_runs == 1 and not dag.catchup
    assert {name: dag.params[name] for name in dag.params} == {
        "source": "all", "tables": [], "keep_seconds": tuned.keep_seconds,
        "orphan_grace_seconds": tuned.orphan_grace_seconds, "compact_min_files": tuned.compact_min_files,
        "log_retention_seconds": settings().retention.window_seconds, "dry_run": False}
    assert dag.params["log_retention_seconds"] == 7 * 86_400, "a week of staged changes by default"


def test_an_empty_maintenance_schedule_leaves_the_dag_to_manual_runs(airflow_home, monkeypatch):
    assert parsed(monkeypatch, "shop_a", schedule="").schedule is None
    assert parsed(monkeypatch, "shop_a", schedule="0 3 * * *").schedule == "0 3 * * *"


class SentMetrics:
    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    def incr(self, name, count=1, rate=1, tags=None):
        self.sent.append((name, count))

    def timing(self, name, dt, tags=None):
        self.sent.append((name, dt.total_seconds()))

    def gauge(self, name, value, rate=1, delta=False, tags=None):
        self.sent.append((name, value))


@pytest.fixture
def task_env(airflow_home, tmp_path, monkeypatch):
    """A source with one warehouse table of two merges and an old orphan, a staged log of two
    segments; the hook's warehouse, staged log and store replaced (no ZooKeeper), metrics recorded."""
    from dblog.stagedlog.staged_log import StagedLog
    from dblog.warehouse.tables import Warehouse
    from dblog_airflow import metrics
    from dblog_airflow.hooks.dblog import DBLogHook
    monkeypatch.delenv("DBLOG_ICEBERG_CATALOG", raising=False)
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    staged = StagedLog(str(tmp_path / "staging"))
    segments = [plant(str(tmp_path / "staging" / SRC / "log" / TABLE / f"p{n}_p{n}.parquet"), 60) for n in (1, 2)]
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    merge(warehouse, {0: [1, 3]}, upto="p2")
    location = warehouse.load(SRC, TABLE).metadata.location.removeprefix("file://")
    orphan = plant(f"{location}/data/_dblog_bucket=0/killed-merge-0.parquet", 7200)
    store, sent = FakeStore(), SentMetrics()
    monkeypatch.setattr(DBLogHook, "warehouse", staticmethod(lambda: warehouse))
    monkeypatch.setattr(DBLogHook, "staged", staticmethod(lambda: staged))
    monkeypatch.setattr(DBLogHook, "store", lambda self: store)
    monkeypatch.setattr(metrics, "_stats", lambda: sent)
    return SimpleNamespace(warehouse=warehouse, store=store, sent=sent, orphan=orphan, segments=segments)


def test_the_maintain_task_maintains_each_table_under_its_lease_then_the_staged_log_and_sends_what_it_removed(
        task_env):
    from dblog_airflow import metrics
    from dblog_airflow.operators.maintain import MaintainOperator
    before = rows(task_env.warehouse)
    out = MaintainOperator(task_id="maintain", source_conn_id=SRC, keep_seconds=3600.0,
                           orphan_grace_seconds=60).execute({})
    [report], staged = out["tables"], out["staged_log"]
    assert (report["source"], report["table"], report["files_removed"], report["snapshots_expired"]) == (
        SRC, TABLE, 1, 0) and not os.path.exists(task_env.orphan)
    assert task_env.store.events == [("take", f"/{SRC}/merge/{TABLE}/lock"), ("release", f"/{SRC}/merge/{TABLE}/lock"),
                                     ("take", f"/{SRC}/staged/lock"), ("release", f"/{SRC}/staged/lock")]
    # No checkpoint yet: nothing of the staged log is known complete, so nothing of it goes.
    assert (staged["files"], staged["oldest"], staged["segments_removed"]) == (2, "p1", 0)
    assert all(os.path.exists(p) for p in task_env.segments)
    sent = dict(task_env.sent.sent)
    assert sent[metrics.name("maintenance.files_removed", SRC, TABLE)] == 1
    assert sent[metrics.name("maintenance.bytes_removed", SRC, TABLE)] == report["bytes_removed"] > 0
    assert metrics.name("maintenance.seconds", SRC, TABLE) in sent
    assert (sent[metrics.name("staged.files", SRC)], sent[metrics.name("staged.files_removed", SRC)]) == (2, 0)
    assert metrics.name("staged.seconds", SRC) in sent
    assert rows(task_env.warehouse) == before


def test_a_dry_run_task_reports_sends_no_metric_and_changes_nothing(task_env):
    from dblog_airflow.operators.maintain import MaintainOperator
    out = MaintainOperator(task_id="maintain", source_conn_id=SRC, tables=[TABLE], keep_seconds=0,
                           orphan_grace_seconds=60, dry_run=True).execute({})
    [report] = out["tables"]
    assert report["dry_run"] and out["staged_log"]["dry_run"] and report["snapshots_expired"] == 1 and report["files_removed"] >= 1
    assert os.path.exists(task_env.orphan) and not task_env.sent.sent
    assert len(task_env.warehouse.load(SRC, TABLE).metadata.snapshots) == 2


def test_a_task_of_a_run_for_another_source_skips(task_env):
    from airflow.sdk.exceptions import AirflowSkipException

    from dblog_airflow.operators.maintain import MaintainOperator
    with pytest.raises(AirflowSkipException):
        MaintainOperator(task_id="maintain", source_conn_id=SRC, selected_source="elsewhere").execute({})
    assert not task_env.store.events


@pytest.mark.parametrize("options, said", [
    ({"keep_seconds": -5}, "keep_seconds = -5: keep replaced snapshots 0 to 31,536,000 seconds (default 14400)"),
    ({"compact_min_files": 2.5}, "compact_min_files = 2.5: compact buckets of more files than a whole number from "
                                 "1 to 100,000 (default 4)"),
    ({"tables": ["shop.nope"]}, f"{SRC} has no warehouse table shop.nope (it has {TABLE})"),
    ({"log_retention_seconds": 60}, "log_retention_seconds = 60: keep merged changes and finished dumps in the "
                                    "staged log 3,600 to 315,360,000 seconds (default 604800)"),
])
def test_a_bad_value_or_an_unknown_table_fails_the_task_for_good_saying_what_to_fix(task_env, options, said):
    from airflow.sdk.exceptions import AirflowFailException

    from dblog_airflow.operators.maintain import MaintainOperator
    with pytest.raises(AirflowFailException) as failed:
        MaintainOperator(task_id="maintain", source_conn_id=SRC, **options).execute({})
    assert said in str(failed.value)
    assert not task_env.store.events and os.path.exists(task_env.orphan)


def test_a_run_conf_with_a_misspelled_param_fails_before_anything_is_maintained(task_env, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException
    [task] = parsed(monkeypatch, SRC).tasks
    task.selected_source = task.tables = task.keep_seconds = task.orphan_grace_seconds = task.log_retention_seconds = None
    task.compact_min_files, task.only_report = None, False   # as rendered from an empty conf
    with pytest.raises(AirflowFailException, match=r"unknown param 'dryrun' \(did you mean 'dry_run'\?\)"):
        task.execute({"dag_run": SimpleNamespace(conf={"dryrun": True})})
    assert not task_env.store.events
