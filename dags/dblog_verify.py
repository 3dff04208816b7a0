"""
### dblog_verify: drift check of warehouse tables, with targeted repair dumps

Per source: write a sync watermark and wait for the capture to pass it, merge, then compare each
warehouse table with its source per primary-key range (row count and row hash; `dblog verify`).
Every drifted table triggers a **dblog_dump** run for exactly its drifted keys (or the whole
table past `DBLOG_MAX_KEYS` keys), in chunks of `chunk_size`. Rows written while the check runs may show
as drift; their repair is a harmless re-read. Schedule: `DBLOG_VERIFY_SCHEDULE` (default `@daily`;
empty = trigger only); scheduled runs check every table of every source. Triggered, `source` and
`tables` narrow the check to one source or some tables; a bad conf fails the `start` task.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, TaskGroup

from dblog.connections import source_ids
from dblog.settings import settings
from dblog_airflow.groups import wait_for_capture
from dblog_airflow.operators.merge import MergeOperator
from dblog_airflow.operators.verify import VerifyOperator, VerifyStartOperator
from dblog_airflow.params import chunk_size_param, source_param, tables_param

SOURCES = source_ids()
TUNED = settings().verify

with DAG(
    dag_id="dblog_verify",
    doc_md=__doc__,
    description="Compare warehouse tables with their sources per key range; re-dump exactly the drifted keys",
    schedule=TUNED.schedule or None,  # empty: no schedule (trigger only)
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "verify"],
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={
        "source": source_param(SOURCES, every=True),
        "tables": tables_param("checks"),
        "chunk_size": chunk_size_param(TUNED.chunk_size, title="Chunk size of repair dumps (rows)"),
    },
) as dag:
    start = VerifyStartOperator(task_id="start", source_conn_ids=SOURCES, selected_source="{{ params.source }}",
                                tables="{{ params.tables }}", chunk_size="{{ params.chunk_size }}")
    waits = []
    for source in SOURCES:
        with TaskGroup(group_id=source):
            waits.append(wait_for_capture(source))
    verify = VerifyOperator(task_id="verify", source_conn_ids=SOURCES, selected_source="{{ params.source }}",
                            tables="{{ params.tables }}", chunk_size="{{ params.chunk_size }}")
    merge = MergeOperator(task_id="merge", sources="{{ params.source }}", tables="{{ params.tables }}",
                          trigger_rule="none_failed_min_one_success")
    start >> waits >> merge >> verify
    TriggerDagRunOperator.partial(task_id="repair", trigger_dag_id="dblog_dump").expand(conf=verify.output)
