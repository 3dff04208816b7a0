"""Compare every warehouse table with its source (`dblog verify`) and plan targeted repairs."""
from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from dblog_airflow.hooks.dblog import DBLogHook


class VerifyOperator(BaseOperator):
    """Returns one `dblog_dump` run conf per drifted table: its drifted keys (or the whole table
    when there are too many), ready for `TriggerDagRunOperator.partial(...).expand(conf=...)`."""

    template_fields: Sequence[str] = ("source_conn_ids", "page")

    def __init__(self, *, source_conn_ids: Any, page: int = 5000, chunk_size: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_ids, self.page, self.chunk_size = source_conn_ids, page, chunk_size

    def execute(self, context) -> list[dict]:
        from dblog.dump import MAX_KEYS
        from dblog.verify import compare_warehouse
        repairs = []
        for conn_id in self.source_conn_ids:
            hook = DBLogHook(conn_id)
            source, warehouse = hook.get_source(), hook.warehouse()
            for table in warehouse.tables(source.name):
                diff = compare_warehouse(source, warehouse, table, int(self.page))
                self.log.info("%s %s: %s - source %d rows, warehouse %d rows, %d of %d key ranges differ",
                              conn_id, table, "equal" if diff.equal else "DRIFT", diff.source_rows,
                              diff.staged_rows, len(diff.drifted), diff.ranges)
                for r in diff.drifted:
                    self.log.warning("  keys %s .. %s: source %d rows, warehouse %d rows", r.first, r.last,
                                     r.source_rows, r.copy_rows)
                plan = diff.repair(MAX_KEYS)
                if plan:
                    repairs.append({"source": conn_id, "chunk_size": self.chunk_size, **plan})
            source.close()
        self.log.info("%d table(s) to repair", len(repairs))
        return repairs
