"""Task groups shared by the dump, full-refresh and verify DAGs (their params: `dblog_airflow.params`).

One group per source, because a pool is fixed when a task is defined: `dblog_dump_<source>`
bounds how many tables of that source are dumped at once (create it with `make airflow`, or
`airflow pools set dblog_dump_<source> 2 "dblog dumps"`).
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import TaskGroup

from dblog_airflow.operators.dump import DumpTableOperator, StartDumpOperator
from dblog_airflow.operators.wait import WaitForCaptureOperator


def dump_pool(source_id: str) -> str:
    return f"dblog_dump_{source_id}"


def dump_source(source_id: str, *, selected_source: str | None = None, tables: Any = None, keys: Any = None,
                chunk_size: Any = None, delay_seconds: Any = 0.0, dump_id: Any = None,
                exclude: Any = None, parallelism: Any = None) -> TaskGroup:
    """start (check the run, validate, register) -> one throttled dump task per table -> wait for the
    capture. The start task of each group checks the run's conf, so a bad conf fails every group."""
    with TaskGroup(group_id=source_id, tooltip=f"dump {source_id}") as group:
        start = StartDumpOperator(task_id="start", source_conn_id=source_id, selected_source=selected_source,
                                  tables=tables, keys=keys, chunk_size=chunk_size, delay_seconds=delay_seconds,
                                  dump_id=dump_id, exclude=exclude, parallelism=parallelism)
        dumps = DumpTableOperator.partial(task_id="dump_table", source_conn_id=source_id, pool=dump_pool(source_id),
                                          map_index_template="{{ task.table }}").expand_kwargs(start.output)
        start >> dumps >> wait_for_capture(source_id)
    return group


def wait_for_capture(source_id: str) -> WaitForCaptureOperator:
    return WaitForCaptureOperator(task_id="wait_for_capture", source_conn_id=source_id)
