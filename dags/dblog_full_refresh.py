"""
### dblog_full_refresh: scheduled dump of every table of every source, then a merge

Re-reads everything in watermark chunks while the capture runs, so the warehouse converges even
after lost history or manual edits, without locks or a stalled change stream. Schedule:
`DBLOG_FULL_REFRESH_SCHEDULE` (cron or preset, default `@weekly`; empty = trigger only); chunk size and delay:
`DBLOG_FULL_REFRESH_CHUNK_SIZE` (default: dblog's, `DEFAULT_CHUNK_SIZE`) and `DBLOG_FULL_REFRESH_DELAY` (seconds, default 0).
Each source's tables run in its `dblog_dump_<source>` pool.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from dblog.config import DEFAULT_CHUNK_SIZE, source_ids
from dblog_airflow.groups import dump_source
from dblog_airflow.operators.merge import MergeOperator

with DAG(
    dag_id="dblog_full_refresh",
    doc_md=__doc__,
    schedule=os.environ.get("DBLOG_FULL_REFRESH_SCHEDULE", "@weekly") or None,  # empty: no schedule (trigger only)
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "dump"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
) as dag:
    chunk_size = int(os.environ.get("DBLOG_FULL_REFRESH_CHUNK_SIZE", DEFAULT_CHUNK_SIZE))
    delay = float(os.environ.get("DBLOG_FULL_REFRESH_DELAY", "0"))
    [dump_source(s, chunk_size=chunk_size, delay_seconds=delay) for s in source_ids()] >> MergeOperator(
        task_id="merge", trigger_rule="none_failed_min_one_success")
