"""
### dblog_maintenance: expire old snapshots, compact buckets, delete files nothing references; keep the staged log bounded

One task per source (`<source>.maintain`, in the worker's process, no Spark), each running
`dblog maintain` on every warehouse table of the source, then on its staged log. Each table is
maintained under its merge lock, so it never races a merge of that table (other tables keep merging):

1. snapshots older than `keep_seconds` are expired (never a branch head: main and the tombstone
   branch stay readable; time travel reaches back that far);
2. a bucket holding more than `compact_min_files` data files (or tombstone files) is rewritten
   as one file, sorted by the key; rows and the merge state are unchanged;
3. files under the table's location that no kept snapshot references and that are older than
   `orphan_grace_seconds` are deleted: those of expired snapshots, and those a killed merge left.

Then the staged log (without a `tables` choice: all of it, and the source's finished dumps):
segments every table has merged past and older than `log_retention_seconds` are removed (the
reach of `dblog export --from`; a chunk not merged yet, a dump still running keep what they
need), finished dumps older than that with all their chunks merged go with their chunk files,
and runs of small segments are rewritten as larger ones (`DBLOG_LOG_COMPACT_*`).

Schedule: `DBLOG_MAINTENANCE_SCHEDULE` (default `@daily`; empty = trigger only); scheduled runs
use the `DBLOG_WAREHOUSE_KEEP_SECONDS`, `DBLOG_ORPHAN_GRACE_SECONDS` and `DBLOG_COMPACT_MIN_FILES`
settings (and `DBLOG_LOG_RETENTION_SECONDS`). Triggered, `source` and `tables` narrow the run and
`dry_run` only reports. Each table's line, and the staged log's, in the task log says what was
done; metrics `dblog.maintenance.files_removed`, `.bytes_removed` and `.seconds` per source and
table, `dblog.staged.*` per source.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, TaskGroup

from dblog.connections import source_ids
from dblog.settings import settings
from dblog_airflow.operators.maintain import MaintainOperator
from dblog_airflow.params import (
    compact_min_files_param,
    dry_run_param,
    keep_seconds_param,
    log_retention_seconds_param,
    orphan_grace_seconds_param,
    source_param,
    tables_param,
)

SOURCES = source_ids()
TUNED = settings()

with DAG(
    dag_id="dblog_maintenance",
    doc_md=__doc__,
    description="Warehouse upkeep: expire old Iceberg snapshots, compact buckets of many files, delete "
                "unreferenced files; staged log retention and compaction",
    schedule=TUNED.warehouse.maintenance_schedule or None,  # empty: no schedule (trigger only)
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "maintenance"],
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        "source": source_param(SOURCES, every=True),
        "tables": tables_param("maintains"),
        "keep_seconds": keep_seconds_param(),
        "orphan_grace_seconds": orphan_grace_seconds_param(),
        "compact_min_files": compact_min_files_param(),
        "log_retention_seconds": log_retention_seconds_param(),
        "dry_run": dry_run_param(),
    },
) as dag:
    for source in SOURCES:
        with TaskGroup(group_id=source, tooltip=f"maintain {source}'s warehouse tables"):
            MaintainOperator(task_id="maintain", source_conn_id=source, selected_source="{{ params.source }}",
                             tables="{{ params.tables }}", keep_seconds="{{ params.keep_seconds }}",
                             orphan_grace_seconds="{{ params.orphan_grace_seconds }}",
                             compact_min_files="{{ params.compact_min_files }}",
                             log_retention_seconds="{{ params.log_retention_seconds }}", dry_run="{{ params.dry_run }}")
