"""
### dblog_merge: merge the staged change stream (and finished dump chunks) into the warehouse

Runs `spark_jobs/merge.py` through the `spark_default` connection every
`DBLOG_MERGE_EVERY_MINUTES` minutes (default 5) when `DBLOG_MERGE_MODE` is `scheduled` (batch
merges: a Spark start per run, data minutes old); in the default `continuous` mode
`dblog_merge_continuous` keeps the tables fresh and this DAG runs only when triggered. One run at
a time; a table's merges are also serialized by a ZooKeeper lock, so a merge started by a dump run
or the continuous merge cannot interleave.

Each table that got a new version emits an Asset event (alias `dblog_warehouse`; asset name
`dblog.<source>.<schema.table>`; extra: `rows`, `version`, `upto` = the source position merged up
to, and the producing `dag_id`, `run_id`, `task_id`): schedule downstream DAGs on
`dblog_airflow.operators.merge.warehouse_asset(source, table)`. The task log has one line per
table (log events, chunks, rows dropped in windows, rows); a failed merge logs its reason as an
error.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dblog.settings import settings
from dblog_airflow.operators.merge import MergeOperator

with DAG(
    dag_id="dblog_merge",
    doc_md=__doc__,
    description="Merge the staged change stream and finished dump chunks into the warehouse (Spark), every few minutes",
    schedule=timedelta(minutes=settings().merge.every_minutes) if settings().merge.mode == "scheduled" else None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "merge"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
) as dag:
    MergeOperator(task_id="merge")
