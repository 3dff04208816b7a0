"""Watermark chunk dumps as tasks: start (check the run's conf, validate, register), one task per
table; control.

Bad input fails the start task at once (no retry) with a message naming the problem and the fix,
before anything is written: a conf key the DAG does not declare, a value out of range (the run's
checks: `dblog_airflow.params`), an unknown table, a malformed key list. Table tasks resume from
their ZooKeeper progress when retried.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.params import DUMP_ACTIONS, check_run, covers, dump_spec, fail


def _input_errors() -> tuple[type[Exception], ...]:
    from dblog.connections import ConfigError
    from dblog.snapshot.dump_spec import DumpError
    from dblog.sources.base import SourceError
    return DumpError, SourceError, ConfigError


class StartDumpOperator(BaseOperator):
    """Check the run, validate and register a dump; returns one `{"dump_id", "table"}` per table
    for mapping, and pushes XCom `dump` (`dump_id`, `source`, `tables`, `summary`), which the XCom
    tab of the task shows and the merge of the run reads.

    Bad input fails the task at once, before anything is written (`dblog_airflow.params.check_run`,
    then the engine's validation). Empty values (None, "") take the `DBLOG_*` settings.

    :param source_conn_id: Connection id of the source database (templated).
    :param tables: `table` or `schema.table` names; empty: every table (templated).
    :param keys: Primary keys to re-read (a repair) of exactly one table: JSON values, or one per
        line as the trigger form gives them (`dblog_airflow.params.dump_keys`) (templated).
    :param chunk_size: Rows per chunk (templated).
    :param delay_seconds: Pause after each chunk, in seconds (templated).
    :param dump_id: Name of the dump; empty: a generated id (templated).
    :param selected_source: The run's `source` param: when it names another source than this
        operator's (and is not `all`), the task skips; DAGs with one task group per source use it to
        run only the group the user picked (templated).
    :param exclude: With every table: the tables to leave out (templated).
    :param parallelism: Key ranges a window reads at once, each on its own connection (templated).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the dump's state.
    """

    template_fields: Sequence[str] = ("source_conn_id", "selected_source", "tables", "keys", "chunk_size",
                                      "delay_seconds", "parallelism", "dump_id", "exclude")

    def __init__(self, *, source_conn_id: str, tables: Any = None, keys: Any = None, chunk_size: Any = None,
                 delay_seconds: Any = 0.0, dump_id: str | None = None, selected_source: str | None = None,
                 exclude: Any = None, parallelism: Any = None, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.selected_source = source_conn_id, selected_source
        self.tables, self.keys, self.exclude = tables, keys, exclude
        self.chunk_size, self.delay_seconds, self.dump_id = chunk_size, delay_seconds, dump_id
        self.parallelism = parallelism
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> list[dict]:
        from dblog.coordination.store import dump_path
        from dblog.errors import TransientError
        from dblog.snapshot.dump import create_dump, new_dump_id
        check_run(self, context, tables=self.tables, chunk_size=self.chunk_size, delay_seconds=self.delay_seconds,
                  exclude=self.exclude, parallelism=self.parallelism)
        if not covers(self.selected_source, self.source_conn_id):
            raise AirflowSkipException(f"this run dumps {self.selected_source}, not {self.source_conn_id}")
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        # A retry (its worker died mid-registration) names the same dump and finishes registering it;
        # this task cleared is a new request, so a new dump. The first try of the current clear is
        # Airflow's own formula (its max_tries grows by the retries each clear); the run's
        # clear_number would also count a clear of another task of the run.
        run, ti = context["dag_run"], context["ti"]
        first_try = ti.max_tries - (self.retries or 0) + 1
        request = f"{run.dag_id}/{run.run_id}/{first_try}/{self.source_conn_id}"
        spec = dump_spec(self.tables, self.keys, self.chunk_size, self.delay_seconds,
                         self.dump_id or new_dump_id(run.run_after, salt=request), self.exclude, self.parallelism)
        spec.request = request
        try:
            source = hook.get_source()
            with hook.store() as store:
                # Validates, then sets up the capture checkpoint, then registers: bad input writes nothing.
                dump_id = create_dump(store, source, spec)
                scope = store.get(dump_path(source.name, dump_id))
        except _input_errors() as exc:
            if isinstance(exc, TransientError):   # a source down for now: Airflow's retry, not bad input
                raise
            fail(self.log, f"dump not started: {exc}")
        tables, skipped = scope["tables"], scope.get("skipped", [])
        for s in skipped:  # WARNING: the log view's filter and the task's log show what was left out
            self.log.warning("skipped %s: %s", s["table"], s["reason"])
        summary = (f"dump {dump_id} on {source.name}: {len(tables)} table(s) {', '.join(tables)}, chunk size "
                   f"{spec.chunk_size}, parallelism {spec.parallelism}, delay {spec.delay_s}s" + (f", {len(spec.keys)} keys" if spec.keys else "")
                   + (f"; skipped {', '.join(s['table'] for s in skipped)}" if skipped else ""))
        self.log.info("%s", summary)
        self.log.info("dump id: %s (pause, resume, cancel or throttle it with dblog_dump_control)", dump_id)
        context["ti"].xcom_push(key="dump", value={"dump_id": dump_id, "source": source.name, "tables": tables,
                                                   "skipped": skipped, "summary": summary})
        return [{"dump_id": dump_id, "table": t} for t in tables]


class DumpTableOperator(BaseOperator):
    """Dump one table of a registered dump, chunk by chunk, logging progress per chunk and sending
    the dump's metrics; resumes from its ZooKeeper progress when retried, and ends skipped when the
    dump is cancelled. Returns the table's result (status, chunks, rows, rows/s).

    :param source_conn_id: Connection id of the source database (templated).
    :param dump_id: Id of the dump, as `StartDumpOperator` registered it (templated).
    :param table: The table to dump, `schema.table` (templated).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the dump's state.
    """

    template_fields: Sequence[str] = ("source_conn_id", "dump_id", "table")

    def __init__(self, *, source_conn_id: str, dump_id: str, table: str,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.dump_id, self.table = source_conn_id, dump_id, table
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> dict:
        from dataclasses import asdict

        from dblog.connections import zookeeper
        from dblog.operations.status import progress_fraction
        from dblog.snapshot.dump import CANCELLED, TableDump
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source = hook.get_source()
        subject, tags = (source.name, self.table), {"source": source.name, "table": self.table, "dump_id": self.dump_id}

        def progress(p, rows: int) -> None:
            self.log.info("%s: chunk %d done, %d rows (%d in all, now %s rows/s)", p.table, p.chunks, rows,
                          p.rows, p.recent_rows_per_s)
            metrics.incr("dump.rows", rows, subject, **tags)
            if p.recent_rows_per_s is not None:  # the engine's rate: pauses and throttle delays excluded
                metrics.gauge("dump.rows_per_second", p.recent_rows_per_s, subject, **tags)
            if p.fallback_chunks:  # slower, same values: the native reader gave up on these chunks
                metrics.gauge("dump.fallback_chunks", p.fallback_chunks, subject, **tags)
            fraction = progress_fraction(p.rows, p.estimated_rows, p.status)  # what the DBLog page shows
            if fraction is not None:
                metrics.gauge("dump.progress_percent", round(100 * fraction, 1), subject, **tags)

        # A retry after a crash waits for the dead worker's lease to go with its ZooKeeper session.
        wait = zookeeper(hook.zookeeper_uri()).takeover_wait
        with hook.store() as store:
            result = TableDump(store, source, hook.staged(), self.dump_id, self.table, progress).run(wait)
        self.log.info("%s: %s after %d chunks, %d rows, %.0f rows/s", result.table, result.status, result.chunks,
                      result.rows, result.rows_per_s)
        if result.status == CANCELLED:
            raise AirflowSkipException(f"dump {self.dump_id} was cancelled")
        return asdict(result)

    def get_openlineage_facets_on_complete(self, task_instance):
        """The table read and the warehouse table it lands in (`dblog_airflow.lineage`)."""
        from dblog_airflow.lineage import dump_lineage
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source = hook.get_source()
        try:
            return dump_lineage(source, hook.warehouse(), hook.source_uri(), self.table)
        finally:
            source.close()


class DumpControlOperator(BaseOperator):
    """Pause, resume, cancel or re-throttle a running dump (its table tasks obey within a chunk),
    or only show its progress; returns the dump's status. A bad run conf, action or value, or an
    unknown dump fails the task at once, and nothing changes.

    :param source_conn_id: Connection id of the dump's source database (templated).
    :param dump_id: Id of a registered dump (templated).
    :param action: One of `ACTIONS`: status, pause, resume, cancel, throttle (templated).
    :param chunk_size: With `throttle`: the new rows per chunk; None keeps the current one (templated).
    :param delay_seconds: With `throttle`: the new pause between chunks; None keeps it (templated).
    :param parallelism: With `throttle`: the new key ranges per window; None keeps it (templated).
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble holding the dump's state.
    """

    template_fields: Sequence[str] = ("source_conn_id", "dump_id", "action", "chunk_size", "delay_seconds",
                                      "parallelism")
    ACTIONS = DUMP_ACTIONS

    def __init__(self, *, source_conn_id: str, dump_id: str, action: str, chunk_size: Any = None,
                 delay_seconds: Any = None, parallelism: Any = None, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.dump_id, self.action = source_conn_id, dump_id, action
        self.chunk_size, self.delay_seconds, self.parallelism = chunk_size, delay_seconds, parallelism
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> dict:
        from dblog.snapshot.dump import control_changes, dump_status, set_control
        from dblog.snapshot.dump_spec import DumpError
        check_run(self, context, chunk_size=self.chunk_size, delay_seconds=self.delay_seconds,
                  parallelism=self.parallelism)
        if self.action not in self.ACTIONS:
            fail(self.log, f"action {self.action!r} is not one of {', '.join(self.ACTIONS)}")
        try:
            changes = {} if self.action == "status" else control_changes(self.action, self.chunk_size,
                                                                        self.delay_seconds, self.parallelism)
        except DumpError as exc:
            fail(self.log, f"{exc}; set one and trigger again")
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        with hook.store() as store:
            try:
                if changes:
                    set_control(store, self.source_conn_id, self.dump_id, **changes)
                status = dump_status(store, self.source_conn_id, self.dump_id)
            except DumpError as exc:
                fail(self.log, str(exc))
        if status.get("error"):  # a record this version cannot read: say so (a cancel still took)
            self.log.warning("dump %s on %s: %s (state %s)", self.dump_id, self.source_conn_id, status["error"],
                             status["control"].get("state"))
            return status
        if not status["tables"]:
            fail(self.log, f"no dump {self.dump_id!r} on {self.source_conn_id}: the dump id is in the XCom `dump` "
                           "and the log of a dblog_dump run's start task (or `dblog status`)")
        self.log.info("dump %s on %s: %s (chunk size %s, parallelism %s, delay %ss)", self.dump_id,
                      self.source_conn_id, status["state"], status["control"].get("chunk_size"),
                      status["control"].get("parallelism", 1), status["control"].get("delay_s"))
        for table, p in status["tables"].items():
            self.log.info("  %s: %s, %d chunks, %d rows", table, p["status"], p["chunks"], p["rows"])
        return status
