"""
### dblog_full_refresh: scheduled dump of every table of every source, then a merge

Re-reads everything in watermark chunks while the capture runs, so the warehouse converges even
after lost history or manual edits, without locks or a stalled change stream. Schedule:
`DBLOG_FULL_REFRESH_SCHEDULE` (cron or preset, default `@weekly`; empty = trigger only). Scheduled
runs take the defaults: every source, every table, chunk size `DBLOG_FULL_REFRESH_CHUNK_SIZE`
(default: dblog's, `DBLOG_CHUNK_SIZE`) and delay `DBLOG_FULL_REFRESH_DELAY` (seconds, default 0).
Triggered, it re-syncs what the params name: one `source` (or all), some `tables` (empty = all),
with its own `chunk_size` and `delay_seconds`; `exclude` leaves tables out of an every-table run.
Tables that cannot be dumped (no primary key) are skipped, each logged with the reason (WARNING;
XCom `dump` lists them). Each source's tables run in its `dblog_dump_<source>` pool; a bad conf
fails the `start` tasks and nothing is written.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dblog.connections import source_ids
from dblog.settings import settings
from dblog_airflow.groups import dump_source
from dblog_airflow.operators.merge import MergeOperator
from dblog_airflow.params import (
    chunk_size_param,
    delay_param,
    exclude_param,
    parallelism_param,
    source_param,
    tables_param,
)

SOURCES = source_ids()
TUNED = settings().full_refresh

with DAG(
    dag_id="dblog_full_refresh",
    doc_md=__doc__,
    description="Re-read every table (or the chosen ones) in watermark chunks, then merge: the warehouse converges",
    schedule=TUNED.schedule or None,  # empty: no schedule (trigger only)
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "dump", "full-refresh"],
    render_template_as_native_obj=True,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=settings().dump.retry_delay_seconds)},
    params={
        "source": source_param(SOURCES, every=True),
        "tables": tables_param("re-reads"),
        "exclude": exclude_param(),
        "chunk_size": chunk_size_param(TUNED.chunk_size),
        "parallelism": parallelism_param(),
        "delay_seconds": delay_param(TUNED.delay_seconds),
    },
) as dag:
    groups = [dump_source(s, selected_source="{{ params.source }}", tables="{{ params.tables }}",
                          chunk_size="{{ params.chunk_size }}", delay_seconds="{{ params.delay_seconds }}",
                          exclude="{{ params.exclude }}", parallelism="{{ params.parallelism }}")
              for s in SOURCES]
    groups >> MergeOperator(task_id="merge", sources="{{ params.source }}", tables="{{ params.tables }}",
                            trigger_rule="none_failed_min_one_success")
