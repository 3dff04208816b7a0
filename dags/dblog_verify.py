"""
### dblog_verify: drift check of every warehouse table, with targeted repair dumps

Per source: write a sync watermark and wait for the capture to pass it, merge, then compare each
warehouse table with its source per primary-key range (row count and row hash; `dblog verify`).
Every drifted table triggers a **dblog_dump** run for exactly its drifted keys (or the whole
table past 100,000 keys). Rows written while the check runs may show as drift; their repair is
a harmless re-read. Schedule: `DBLOG_VERIFY_SCHEDULE` (default `@daily`; empty = trigger only).
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, TaskGroup

from dblog.config import source_ids
from dblog_airflow.groups import wait_for_capture
from dblog_airflow.operators.merge import MergeOperator
from dblog_airflow.operators.verify import VerifyOperator

SOURCES = source_ids()

with DAG(
    dag_id="dblog_verify",
    doc_md=__doc__,
    schedule=os.environ.get("DBLOG_VERIFY_SCHEDULE", "@daily") or None,  # empty: no schedule (trigger only)
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "verify"],
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
) as dag:
    waits = []
    for source in SOURCES:
        with TaskGroup(group_id=source):
            waits.append(wait_for_capture(source))
    verify = VerifyOperator(task_id="verify", source_conn_ids=SOURCES)
    waits >> MergeOperator(task_id="merge") >> verify
    TriggerDagRunOperator.partial(task_id="repair", trigger_dag_id="dblog_dump").expand(conf=verify.output)
