"""
### dblog_merge_continuous: keep every warehouse table seconds behind its source

A `@continuous` DAG: each run is one slice (`merge_slice_seconds`) of `dblog merge --continuous`, one
warm Spark session (submitted through the `spark_default` connection) that merges what the capture
has checkpointed, table by table, every `every_seconds`; the next run resumes from each table's
last Iceberg commit. A cycle with nothing new commits nothing. The task log has a line per table
per commit (log events, chunks, rows, how long its oldest change waited to become visible).

This is the merge to run when `DBLOG_MERGE_MODE` is `continuous` (the default); `dblog_merge`
then only runs when triggered. Merges of one table are serialized by a ZooKeeper lock, so a
dump run's own merge, a triggered `dblog_merge` or a second deployment never commit over each
other. At the end of a slice, one Asset event per table that committed (alias `dblog_warehouse`,
extra: `snapshot_id`, `rows`, `upto`). A table whose merge kept failing is logged as an error
all along while the other tables keep merging; at the end of the slice the `check` task fails
naming it and why (the `merge` task succeeds, so the tables that merged keep their events).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dblog.settings import settings
from dblog_airflow.operators.merge import ContinuousMergeOperator, SliceCheckOperator
from dblog_airflow.params import every_seconds_param, merge_slice_seconds_param

TUNED = settings()

with DAG(
    dag_id="dblog_merge_continuous",
    doc_md=__doc__,
    description="Merge the staged change stream into the warehouse every few seconds, in one warm Spark session "
                "per slice",
    schedule="@continuous" if TUNED.merge.mode == "continuous" else None,
    start_date=datetime(2026, 1, 1),   # without one, every run after the first gets the same logical date
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "merge", "continuous"],
    default_args={"retries": 3, "retry_delay": timedelta(seconds=10)},
    params={
        "merge_slice_seconds": merge_slice_seconds_param(),
        "every_seconds": every_seconds_param(),
    },
) as dag:
    merge = ContinuousMergeOperator(task_id="merge", slice_seconds="{{ params.merge_slice_seconds }}",
                                    every_seconds="{{ params.every_seconds }}")
    merge >> SliceCheckOperator(task_id="check", merge_task_id="merge")
