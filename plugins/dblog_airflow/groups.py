"""Task groups and params shared by the dump, full-refresh and verify DAGs.

One group per source, because a pool is fixed when a task is defined: `dblog_dump_<source>`
bounds how many tables of that source are dumped at once (create it with `make airflow`, or
`airflow pools set dblog_dump_<source> 2 "dblog dumps"`).
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import Param, TaskGroup

from dblog.settings import settings
from dblog_airflow.operators.dump import ALL_SOURCES, DumpTableOperator, StartDumpOperator
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
                                  dump_id=dump_id, exclude=exclude, parallelism=parallelism, retries=0)
        dumps = DumpTableOperator.partial(task_id="dump_table", source_conn_id=source_id, pool=dump_pool(source_id),
                                          map_index_template="{{ task.table }}").expand_kwargs(start.output)
        start >> dumps >> wait_for_capture(source_id)
    return group


def wait_for_capture(source_id: str) -> WaitForCaptureOperator:
    return WaitForCaptureOperator(task_id="wait_for_capture", source_conn_id=source_id)


# -- params: the same names, types and descriptions in every DAG that takes them -----------------
# No `minimum`/`maximum` on numbers: the trigger form clamps an out-of-range entry to them without a
# word (0 became 1); the start task checks the range and says what to fix.
def source_param(sources: list[str], *, every: bool = False) -> Param:
    if every:
        return Param(ALL_SOURCES, type="string", enum=[ALL_SOURCES, *sources], title="Source",
                     values_display={ALL_SOURCES: "all sources"},
                     description="Connection id of one source database, or all of them.")
    return Param(sources[0], type="string", enum=sources, title="Source connection",
                 description="Connection id of the source database.")


def tables_param(what: str = "dumps") -> Param:
    return Param([], type=["array", "null"], items={"type": "string", "minLength": 1}, title="Tables",
                 description=f"`table` or `schema.table`, one per line; empty {what} every table.")


def exclude_param() -> Param:
    return Param([], type=["array", "null"], items={"type": "string", "minLength": 1}, title="Leave out",
                 description="With every table (Tables empty): `table` or `schema.table` to leave out, one per "
                             "line (`schema.table` for a table of one source when the run covers several). Tables "
                             "that cannot be dumped (no primary key) are skipped and listed anyway.")


def chunk_size_param(default: int | None = None, title: str = "Chunk size (rows)") -> Param:
    s = settings()
    return Param(s.dump.chunk_size if default is None else default, type="integer", title=title,
                 description=f"Rows per chunk, {s.range_text('dump.chunk_size')}: one short SELECT between a low "
                             "and a high watermark.")


def parallelism_param(default: int | None = None) -> Param:
    s = settings()
    return Param(s.dump.parallelism if default is None else default, type="integer", title="Parallelism",
                 description=f"Key ranges a window reads at once, {s.range_text('dump.parallelism')}, each on its "
                             "own source connection: a window reads about chunk size x parallelism rows between "
                             "its low and high watermark. Higher dumps faster and loads the source more.")


def delay_param(default: float = 0.0) -> Param:
    return Param(default, type="number", title="Delay between chunks (s)",
                 description=f"Pause after each chunk, 0 to {settings().dump.max_delay_seconds} seconds, to spare "
                             "a busy source.")
