"""Maintenance of one source (`dblog maintain`): its warehouse tables (expire old snapshots, compact
buckets of many files, delete files no snapshot references; each table under its merge lock),
then its staged log (retention, finished dumps, compaction of small segments)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.params import check_run, covers, fail


class MaintainOperator(BaseOperator):
    """Maintains the tables of `source_conn_id` (`tables`: empty = every warehouse table, the whole
    staged log and its finished dumps; a named table the warehouse lacks fails the task), then its
    staged log, and returns `{"tables": one report per table, "staged_log": the staged log's}`.
    Skips when the run's `selected_source` names another source. None options: the `DBLOG_*`
    settings. A bad run conf or value fails the task at once, before anything is maintained.

    :param source_conn_id: Connection id of the source whose tables and staged log are maintained.
    :param selected_source: The run's `source` param: a task of another source skips; empty or
        `all`: every source (templated).
    :param tables: `table` or `schema.table` names; empty: every warehouse table, and the whole staged
        log with its finished dumps (templated).
    :param keep_seconds: Expire snapshots older than this (templated).
    :param orphan_grace_seconds: Delete unreferenced files once older than this (templated).
    :param compact_min_files: Compact a bucket holding more data files than this (templated).
    :param log_retention_seconds: Remove merged staged changes and finished dumps once older than
        this (templated).
    :param dry_run: Only report what would be done; change nothing (templated, as `only_report`:
        `BaseOperator.dry_run` is a method).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the merge locks.
    """

    template_fields: Sequence[str] = ("selected_source", "tables", "keep_seconds", "orphan_grace_seconds",
                                      "compact_min_files", "log_retention_seconds", "only_report")

    def __init__(self, *, source_conn_id: str, selected_source: str | None = None, tables: Any = None,
                 keep_seconds: Any = None, orphan_grace_seconds: Any = None, compact_min_files: Any = None,
                 log_retention_seconds: Any = None, dry_run: Any = False,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.selected_source, self.tables = source_conn_id, selected_source, tables
        self.keep_seconds, self.orphan_grace_seconds = keep_seconds, orphan_grace_seconds
        self.compact_min_files, self.zookeeper_conn_id = compact_min_files, zookeeper_conn_id
        self.log_retention_seconds = log_retention_seconds
        self.only_report = dry_run   # not `self.dry_run`: BaseOperator.dry_run() is a method

    def execute(self, context) -> dict:
        from dblog.operations.staged_maintenance import maintain_staged
        from dblog.warehouse.table_maintenance import maintain_source
        if not covers(self.selected_source, self.source_conn_id):
            raise AirflowSkipException(f"this run maintains {self.selected_source} only")
        opts = {"keep_seconds": self.keep_seconds, "orphan_grace_seconds": self.orphan_grace_seconds,
                "compact_min_files": self.compact_min_files}
        check_run(self, context, tables=self.tables, log_retention_seconds=self.log_retention_seconds, **opts)
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        warehouse = hook.warehouse()
        tables = self._tables(hook, warehouse)
        with hook.store() as store:
            reports = maintain_source(store, warehouse, self.source_conn_id, tables, dry_run=bool(self.only_report),
                                      **{k: v for k, v in opts.items() if v is not None})
            for r in reports:
                self.log.info("%s", r.line())
            staged = maintain_staged(store, hook.staged(), warehouse, self.source_conn_id, tables=tables,
                                     window_seconds=self.log_retention_seconds, dry_run=bool(self.only_report))
            self.log.info("%s", staged.line())
        if not self.only_report:
            self._send(reports, staged)
        self._maintained = [(r.source, r.table) for r in reports if not r.dry_run]
        return {"tables": [asdict(r) for r in reports], "staged_log": asdict(staged)}

    def get_openlineage_facets_on_complete(self, task_instance):
        """The warehouse tables (and change tables) it compacted and expired, read and rewritten."""
        from dblog_airflow.lineage import warehouse_lineage
        return warehouse_lineage(DBLogHook(self.source_conn_id, self.zookeeper_conn_id).warehouse(),
                                 getattr(self, "_maintained", []), {}, rewritten=True)

    @staticmethod
    def _send(reports: list, staged) -> None:
        for r in reports:
            subject, tags = (r.source, r.table), {"source": r.source, "table": r.table}
            metrics.incr("maintenance.files_removed", r.files_removed, subject, **tags)
            metrics.incr("maintenance.bytes_removed", r.bytes_removed, subject, **tags)
            metrics.timing("maintenance.seconds", r.seconds, subject, **tags)
        source = (staged.source,)
        removed = staged.segments_removed + staged.chunk_files_removed + staged.replaced_removed
        metrics.incr("staged.files_removed", removed, source, source=staged.source)
        metrics.incr("staged.bytes_removed", staged.bytes_removed, source, source=staged.source)
        metrics.incr("staged.segments_compacted", staged.segments_compacted, source, source=staged.source)
        metrics.incr("staged.dumps_removed", staged.dumps_removed, source, source=staged.source)
        metrics.gauge("staged.files", staged.files, source, source=staged.source)
        metrics.gauge("staged.bytes", staged.bytes, source, source=staged.source)
        metrics.timing("staged.seconds", staged.seconds, source, source=staged.source)

    def _tables(self, hook: DBLogHook, warehouse) -> list[str] | None:
        """The named tables as `schema.table` (None: every table), each one the warehouse has."""
        if not self.tables:
            return None
        named = list(self.tables)
        if any("." not in t for t in named):   # a bare name is in the source's own schema
            source = hook.get_source()
            named = [t if "." in t else f"{source.namespace}.{t}" for t in named]
            source.close()
        available = warehouse.tables(self.source_conn_id)
        missing = [t for t in named if t not in available]
        if missing:
            fail(self.log, f"{self.source_conn_id} has no warehouse table {', '.join(missing)} (it has "
                           f"{', '.join(available) or 'none yet'}): merge it first, or pick the source that has it")
        return named
