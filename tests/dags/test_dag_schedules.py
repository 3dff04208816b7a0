"""Every scheduled DAG can be scheduled again and again: consecutive automatic runs get distinct
logical dates (a repeated one makes the scheduler skip the run for ever: "run already exists")."""
from __future__ import annotations

import datetime as dt

import pytest

pytestmark = pytest.mark.offline


@pytest.fixture(scope="module")
def dags(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_fixtures import ROOT
    bag = DagBag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags


def _automatic_runs(dag, monkeypatch, count: int, every: dt.timedelta) -> list:
    """The data intervals the scheduler would create, one run finishing every `every`."""
    from airflow._shared.timezones import timezone
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the scheduler holds
    clock = [timezone.datetime(2026, 11, 23, 12, 0, 0)]
    monkeypatch.setattr(timezone, "utcnow", lambda: clock[0])
    restriction = TimeRestriction(earliest=serialized.start_date, latest=None, catchup=serialized.catchup)
    runs, last = [], None
    for _ in range(count):
        info = serialized.timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None:
            break
        runs.append(info)
        last = info.data_interval
        clock[0] = max(clock[0], info.run_after) + every
    return runs


@pytest.mark.parametrize("dag_id", ["dblog_capture", "dblog_merge_continuous", "dblog_full_refresh", "dblog_verify",
                                    "dblog_maintenance"])
def test_consecutive_automatic_runs_of_a_scheduled_dag_get_distinct_logical_dates(dags, dag_id, monkeypatch):
    runs = _automatic_runs(dags[dag_id], monkeypatch, 5, dt.timedelta(seconds=20))
    assert len(runs) == 5, f"{dag_id} stopped scheduling after {len(runs)} runs"
    dates = [r.logical_date for r in runs]
    assert len(set(dates)) == len(dates), f"{dag_id} repeats a logical date: {dates}"


def test_the_capture_is_continuous_one_run_at_a_time(dags):
    dag = dags["dblog_capture"]
    assert type(dag.timetable).__name__ == "ContinuousTimetable" and dag.max_active_runs == 1 and not dag.catchup
