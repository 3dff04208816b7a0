"""
### dblog_dump_control: pause, resume, cancel or re-throttle a running dump

The dump's table tasks read these settings between chunks, so a change takes effect within one
chunk: `pause` holds them (without a worker slot being freed: pause for minutes, cancel for
longer), `resume` continues from the last chunk, `cancel` ends the dump (its tasks end skipped),
`throttle` sets a new chunk size and/or delay. `status` only prints the progress.
Dump ids are in the `dblog_dump` run's `start` task log (or `dblog status`).
"""
from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from dblog.config import source_ids
from dblog_airflow.operators.dump import DumpControlOperator

SOURCES = source_ids()

with DAG(
    dag_id="dblog_dump_control",
    doc_md=__doc__,
    schedule=None,
    tags=["dblog", "dump"],
    render_template_as_native_obj=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},
    params={
        "source": Param(SOURCES[0], type="string", enum=SOURCES, title="Source connection"),
        "dump_id": Param("", type="string", minLength=1, maxLength=64, title="Dump id"),
        "action": Param("status", type="string", enum=list(DumpControlOperator.ACTIONS), title="Action"),
        "chunk_size": Param(None, type=["null", "integer"], minimum=1, maximum=100_000,
                            title="New chunk size (throttle)"),
        "delay_seconds": Param(None, type=["null", "number"], minimum=0, maximum=3600,
                               title="New delay between chunks (throttle)"),
    },
) as dag:
    DumpControlOperator(task_id="control", source_conn_id="{{ params.source }}", dump_id="{{ params.dump_id }}",
                        action="{{ params.action }}", chunk_size="{{ params.chunk_size }}",
                        delay_seconds="{{ params.delay_seconds }}")
