"""
### dblog_capture: the continuous change capture of every configured source

A `@continuous` DAG: each run captures every source for one time slice (`slice_seconds`), and the
next run resumes from the ZooKeeper checkpoint, for as long as the deployment runs. A killed
worker is replaced by a retry or the next run. Each source has a ZooKeeper lease: when two Airflow
deployments share the ZooKeeper, one captures and the other's tasks stand by and take over within
a ZooKeeper session timeout of the leader's death.

Between two slices the change stream waits for the scheduler to start the next run (the handover,
measured in docs/airflow.md: a few seconds); slices are long so that this happens rarely. Task logs
show the leader, position, lag and what each slice staged; the **DBLog** page shows it live.
Sources: `DBLOG_SOURCES` (connection ids, comma-separated); default slice length:
`DBLOG_CAPTURE_SLICE_SECONDS`.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dblog.connections import source_ids
from dblog_airflow.operators.capture import CaptureOperator
from dblog_airflow.params import slice_seconds_param

with DAG(
    dag_id="dblog_capture",
    doc_md=__doc__,
    description="Continuous change capture (binlog / replication slot) into the staged log, in time slices",
    schedule="@continuous",
    # Without a start date the first run's data interval is empty ([t0, t0]) and every later run
    # would get the same logical date t0: the scheduler then skips it for ever ("run already exists").
    start_date=datetime(2026, 1, 1),
    max_active_runs=1,
    catchup=False,
    tags=["dblog", "capture"],
    default_args={"retries": 3, "retry_delay": timedelta(seconds=5)},
    params={"slice_seconds": slice_seconds_param()},
) as dag:
    for source in source_ids():
        CaptureOperator(task_id=f"capture_{source}", source_conn_id=source,
                        slice_seconds="{{ params.slice_seconds }}")
