"""
### dblog_capture: the continuous change capture of every configured source

A `@continuous` DAG: each run captures every source for one time slice (`slice_seconds`) and
the next run resumes from the ZooKeeper checkpoint, so the change stream never stops for long and
a crashed worker is replaced by the next run (or a retry). Each source has a ZooKeeper lease:
when two Airflow deployments share the ZooKeeper, one captures and the other's tasks wait as
standby and take over within a session timeout of the leader's death.

Task logs show the checkpoint position, the capture lag and what each slice staged.
Sources: the `DBLOG_SOURCES` environment variable (connection ids, comma-separated).
"""
from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from dblog.config import source_ids
from dblog_airflow.operators.capture import CaptureOperator

with DAG(
    dag_id="dblog_capture",
    doc_md=__doc__,
    schedule="@continuous",
    max_active_runs=1,
    catchup=False,
    tags=["dblog", "capture"],
    default_args={"retries": 3, "retry_delay": timedelta(seconds=10)},
    params={"slice_seconds": Param(300, type="integer", minimum=5, maximum=3600,
                                   title="Seconds per capture slice")},
) as dag:
    for source in source_ids():
        CaptureOperator(task_id=f"capture_{source}", source_conn_id=source,
                        slice_seconds="{{ params.slice_seconds }}")
