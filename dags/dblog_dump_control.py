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

from airflow.sdk import DAG, Param

from dblog.config import source_ids
from dblog.settings import DUMP_ID, settings
from dblog_airflow.groups import source_param
from dblog_airflow.operators.dump import DumpControlOperator

SOURCES = source_ids()
TUNED = settings()

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
        "dump_id": Param("", type="string", pattern=DUMP_ID.pattern, title="Dump id",
                         description="The id a dblog_dump run's start task logged (XCom `dump`), or `dblog status`."),
        "action": Param("status", type="string", enum=list(DumpControlOperator.ACTIONS), title="Action",
                        description="pause or resume the table tasks, cancel the dump, throttle it (new chunk "
                                    "size, parallelism and/or delay), or only show its progress (status)."),
        "chunk_size": Param(None, type=["null", "integer"], title="New chunk size (throttle)",
                            description=f"Rows per chunk, {TUNED.range_text('dump.chunk_size')}; empty keeps "
                                        "the current one."),
        "parallelism": Param(None, type=["null", "integer"], title="New parallelism (throttle)",
                             description=f"Key ranges a window reads at once, {TUNED.range_text('dump.parallelism')}; "
                                         "empty keeps the current one."),
        "delay_seconds": Param(None, type=["null", "number"], title="New delay between chunks (throttle)",
                               description=f"0 to {TUNED.dump.max_delay_seconds} seconds; empty keeps the "
                                           "current one."),
    },
) as dag:
    DumpControlOperator(task_id="control", source_conn_id="{{ params.source }}", dump_id="{{ params.dump_id }}",
                        action="{{ params.action }}", chunk_size="{{ params.chunk_size }}",
                        delay_seconds="{{ params.delay_seconds }}", parallelism="{{ params.parallelism }}")
