"""Compare warehouse tables with their sources (`dblog verify`) and plan targeted repairs."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.standard.operators.branch import BaseBranchOperator
from airflow.sdk import BaseOperator

from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.params import check_run, covers, fail


def selected_sources(source_conn_ids: Sequence[str], selected: str | None) -> list[str]:
    """The sources a run covers: the one its `source` param names, or all (empty or `all`)."""
    return [s for s in source_conn_ids if covers(selected, s)]


class VerifyStartOperator(BaseBranchOperator):
    """The first task of a verify run: checks the run's conf and values as a dump's start task does
    (failing at once, saying what to fix), then follows `<source>.<branch_task>` of the selected
    sources only; the other sources' tasks skip.

    :param source_conn_ids: Connection ids of every source the DAG has a task group for.
    :param selected_source: The run's `source` param: one of them, or empty / `all` (templated).
    :param tables: The run's `tables` param, checked here (templated).
    :param chunk_size: The run's `chunk_size` param, checked here (templated).
    :param branch_task: Task id, inside each source's group, that the selected sources follow.
    """

    template_fields: Sequence[str] = ("selected_source", "tables", "chunk_size")

    def __init__(self, *, source_conn_ids: Sequence[str], selected_source: str | None = None, tables: Any = None,
                 chunk_size: Any = None, branch_task: str = "wait_for_capture", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_ids, self.selected_source = list(source_conn_ids), selected_source
        self.tables, self.chunk_size, self.branch_task = tables, chunk_size, branch_task

    def choose_branch(self, context) -> list[str]:
        check_run(self, context, tables=self.tables, chunk_size=self.chunk_size)
        sources = selected_sources(self.source_conn_ids, self.selected_source)
        self.log.info("verifying %s: %s", ", ".join(sources), ", ".join(self.tables or []) or "every table")
        return [f"{s}.{self.branch_task}" for s in sources]


class VerifyOperator(BaseOperator):
    """Returns one `dblog_dump` run conf per drifted table: its drifted keys (or the whole table
    when there are too many), ready for `TriggerDagRunOperator.partial(...).expand(conf=...)`.

    `selected_source` (a connection id, or empty / `all`) and `tables` (empty: every warehouse
    table) narrow what is compared; a named table the warehouse does not have fails the task.

    :param source_conn_ids: Connection ids of the sources to compare (templated).
    :param selected_source: The run's `source` param: one source, or empty / `all` (templated).
    :param tables: `table` or `schema.table` names; empty: every warehouse table (templated).
    :param page: Rows per compared key range; None: `DBLOG_VERIFY_PAGE_ROWS` (templated).
    :param chunk_size: Chunk size of the repair dumps; None: `DBLOG_VERIFY_CHUNK_SIZE` (templated).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble of the sources' state.
    """

    template_fields: Sequence[str] = ("source_conn_ids", "selected_source", "tables", "page", "chunk_size")

    def __init__(self, *, source_conn_ids: Any, selected_source: str | None = None, tables: Any = None,
                 page: Any = None, chunk_size: Any = None, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_ids, self.selected_source, self.tables = source_conn_ids, selected_source, tables
        self.page, self.chunk_size, self.zookeeper_conn_id = page, chunk_size, zookeeper_conn_id

    def execute(self, context) -> list[dict]:
        from dblog.operations.verify import compare_warehouse
        from dblog.settings import settings
        tuned = settings().verify
        page = tuned.page_rows if self.page is None else int(self.page)
        chunk_size = tuned.chunk_size if self.chunk_size is None else self.chunk_size
        repairs = []
        for conn_id in selected_sources(self.source_conn_ids, self.selected_source):
            hook = DBLogHook(conn_id, self.zookeeper_conn_id)
            source, warehouse = hook.get_source(), hook.warehouse()
            available = warehouse.tables(source.name)
            wanted = [t if "." in t else f"{source.namespace}.{t}" for t in self.tables or []] or available
            missing = [t for t in wanted if t not in available]
            if missing:
                source.close()
                fail(self.log, f"{conn_id} has no warehouse table {', '.join(missing)} (it has "
                               f"{', '.join(available) or 'none yet'}): dump it first (dblog_dump), or pick the "
                               "source that has it")
            for table in wanted:
                diff = compare_warehouse(source, warehouse, table, page)
                self.log.info("%s %s: %s - source %d rows, warehouse %d rows, %d of %d key ranges differ",
                              conn_id, table, "equal" if diff.equal else "DRIFT", diff.source_rows,
                              diff.staged_rows, len(diff.drifted), diff.ranges)
                for r in diff.drifted:
                    self.log.warning("  keys %s .. %s: source %d rows, warehouse %d rows", r.first, r.last,
                                     r.source_rows, r.copy_rows)
                plan = diff.repair()
                if plan:
                    repairs.append({"source": conn_id, "chunk_size": chunk_size, **plan})
            source.close()
        self.log.info("%d table(s) to repair", len(repairs))
        return repairs
