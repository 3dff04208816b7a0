"""
### dblog_dump_control: pause, resume, cancel or re-throttle a running dump

The dump's table tasks read these settings between chunks, so a change takes effect within one
chunk: `pause` holds them (without a worker slot being freed: pause for minutes, cancel for
longer), `resume` continues from the last chunk, `cancel` ends the dump (its tasks end skipped),
`throttle` sets a new chunk size, parallelism and/or delay. `status` only prints the progress.
Dump ids are in the `dblog_dump` run's `start` task log and XCom `dump` (or `dblog status`).
A conf key that is not a param (a misspelling), a value out of range or an unknown dump fails the
`control` task with the reason, and nothing changes.
"""
from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from dblog.connections import source_ids
from dblog_airflow.operators.dump import DumpControlOperator
from dblog_airflow.params import (
    action_param,
    new_chunk_size_param,
    new_delay_param,
    new_parallelism_param,
    running_dump_id_param,
    source_param,
)

SOURCES = source_ids()

with DAG(
    dag_id="dblog_dump_control",
    doc_md=__doc__,
    description="Pause, resume, cancel, re-throttle or show a running dump, by dump id",
    schedule=None,
    tags=["dblog", "dump", "control"],
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},
    params={
        "source": source_param(SOURCES),
        "dump_id": running_dump_id_param(),
        "action": action_param(),
        "chunk_size": new_chunk_size_param(),
        "parallelism": new_parallelism_param(),
        "delay_seconds": new_delay_param(),
    },
) as dag:
    DumpControlOperator(task_id="control", source_conn_id="{{ params.source }}", dump_id="{{ params.dump_id }}",
                        action="{{ params.action }}", chunk_size="{{ params.chunk_size }}",
                        delay_seconds="{{ params.delay_seconds }}", parallelism="{{ params.parallelism }}")
