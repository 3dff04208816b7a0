"""Watermark chunk dumps as tasks: start (check the run's conf, validate, register), one task per
table; control.

Bad input fails the start task at once (no retry) with a message naming the problem and the fix,
before anything is written: a conf key the DAG does not declare (a misspelling would otherwise
fall back to the param's default), a value out of range, an unknown table, a malformed key list.
Table tasks resume from their ZooKeeper progress when retried.

Numeric params carry their range in their description, not as JSON-schema `minimum`/`maximum`:
Airflow's trigger form hands those to its number input, which clamps an out-of-range entry on
blur (0 became 1 silently); the range is enforced here instead, where it can say what to fix.
"""
from __future__ import annotations

import difflib
import json
from typing import Any, Callable, NoReturn, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from dblog.settings import settings
from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook

ALL_SOURCES = "all"   # the `source` param of the DAGs that cover every source by default


def fail(log, message: str) -> NoReturn:
    """Fail the task for good (no retry), its reason logged at ERROR level first.

    Airflow 3.3 lists a failed task's ERROR lines on the DAG's overview ("Recent Failed Task
    Logs") and in the log view's error filter; a task cannot write its run's note (the Task SDK
    and execution API have no call for it), so this line is where the reason shows."""
    log.error("%s", message)
    raise AirflowFailException(message) from None  # the message says it all: no chained traceback


def _passes(check: str, value: Any) -> bool:
    """The engine's own rule (`dblog.dump_spec.check_*`), so a form, the CLI and the page agree."""
    from dblog import dump_spec
    try:
        getattr(dump_spec, check)(value)
        return True
    except dump_spec.DumpError:
        return False


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_rules() -> dict[str, tuple[Callable[[Any], bool], str]]:
    """param name -> (accepted?, what to set instead), with the ranges of the settings in force.
    None values are left to the params' types."""
    s = settings()
    low, high = s.bounds("capture.slice_seconds")
    return {
        "chunk_size": (lambda v: _passes("check_chunk_size", v),
                       f"a chunk reads {s.range_text('dump.chunk_size')} rows; set a whole number in that range "
                       f"(default {s.dump.chunk_size})"),
        "parallelism": (lambda v: _passes("check_parallelism", v),
                        f"a window reads {s.range_text('dump.parallelism')} key ranges at once, each on its own "
                        f"connection; set a whole number in that range (default {s.dump.parallelism})"),
        "delay_seconds": (lambda v: _passes("check_delay", v),
                          f"set 0 (no pause) to {s.dump.max_delay_seconds} seconds between chunks"),
        "slice_seconds": (lambda v: _number(v) and low <= v <= high,
                          f"a capture slice lasts {s.range_text('capture.slice_seconds')} seconds; each handover "
                          "pauses the stream a few seconds"),
        "tables": (lambda v: isinstance(v, list) and all(isinstance(t, str) and t.strip() for t in v),
                   "list table names (`table` or `schema.table`), one per line; leave it empty for every table"),
        "exclude": (lambda v: isinstance(v, list) and all(isinstance(t, str) and t.strip() for t in v),
                    "list the table names to leave out of a dump of every table, one per line"),
        **_maintenance_rules(s),
    }


def _maintenance_rules(s) -> dict[str, tuple[Callable[[Any], bool], str]]:
    """dblog_maintenance's numbers, bounded as the settings that give their defaults."""
    def within(name: str, whole: bool = False) -> Callable[[Any], bool]:
        low, high = s.bounds(name)
        return lambda v: _number(v) and (not whole or float(v).is_integer()) and low <= v <= high
    return {
        "keep_seconds": (within("warehouse.keep_seconds"), f"keep replaced snapshots "
                         f"{s.range_text('warehouse.keep_seconds')} seconds (default {s.warehouse.keep_seconds:g})"),
        "orphan_grace_seconds": (within("warehouse.orphan_grace_seconds"), "delete unreferenced files once older "
                                 f"than {s.range_text('warehouse.orphan_grace_seconds')} seconds (default "
                                 f"{s.warehouse.orphan_grace_seconds:g}); a running merge's files are that young"),
        "compact_min_files": (within("warehouse.compact_min_files", whole=True), "compact buckets of more files "
                              f"than a whole number from {s.range_text('warehouse.compact_min_files')} (default "
                              f"{s.warehouse.compact_min_files})"),
        "merge_slice_seconds": (within("merge.continuous_slice_seconds"), "a continuous merge slice lasts "
                                f"{s.range_text('merge.continuous_slice_seconds')} seconds (default "
                                f"{s.merge.continuous_slice_seconds}); each handover starts Spark anew"),
        "every_seconds": (within("merge.continuous_every_seconds"), "merge cycles come every "
                          f"{s.range_text('merge.continuous_every_seconds')} seconds (default "
                          f"{s.merge.continuous_every_seconds:g})"),
        "log_retention_seconds": (within("retention.window_seconds"), "keep merged changes and finished dumps in "
                                  f"the staged log {s.range_text('retention.window_seconds')} seconds (default "
                                  f"{s.retention.window_seconds:g})"),
    }


def conf_problems(declared: Sequence[str], conf: dict | None, values: dict[str, Any]) -> list[str]:
    """What is wrong with a run: conf keys the DAG does not declare, and `values` (param name ->
    value the task would use) that break `value_rules()`. Each problem names its fix."""
    names = sorted(declared)
    rules = value_rules()
    problems = []
    for key in sorted(set(conf or {}) - set(names)):
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        problems.append(f"unknown param {key!r} " + (f"(did you mean {close[0]!r}?)" if close else
                                                     f"(the params are {', '.join(names)})"))
    for name, value in values.items():
        ok, fix = rules[name]
        if value is not None and not ok(value):
            problems.append(f"{name} = {value!r}: {fix}")
    return problems


def check_run(task: BaseOperator, context, **values: Any) -> None:
    """Fail `task` (see `fail`) when its run's conf or `values` are not acceptable."""
    dag_run = context.get("dag_run")
    problems = conf_problems(list(task.dag.params) if task.has_dag() else [],
                             getattr(dag_run, "conf", None), values)
    if problems:
        fail(task.log, f"{task.dag_id} run refused, nothing was started: {'; '.join(problems)}. "
                       "Trigger a new run with a corrected conf.")


def _input_errors() -> tuple[type[Exception], ...]:
    from dblog.config import ConfigError
    from dblog.dump_spec import DumpError
    from dblog.sources.base import SourceError
    return DumpError, SourceError, ConfigError


def _keys(keys: Any) -> list | None:
    """Keys from a JSON conf, or one per line from the UI form: `7`, `"abc"` or `[1, "a"]`; an
    unquoted line that is not JSON is taken as a string key."""
    if not keys:
        return None
    if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        out = []
        for line in (k.strip() for k in keys if k.strip()):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append(line)
        return out
    return keys


def dump_spec(tables: Any = None, keys: Any = None, chunk_size: Any = None, delay_seconds: Any = 0.0,
              dump_id: str | None = None, exclude: Any = None, parallelism: Any = None):
    """The engine's DumpSpec from a run's rendered params (the form leaves empty fields as None or "")."""
    from dblog.dump_spec import DumpSpec
    return DumpSpec(tables=list(tables or []), keys=_keys(keys), chunk_size=chunk_size, delay_s=delay_seconds,
                    dump_id=dump_id or None, exclude=list(exclude or []), parallelism=parallelism)


class StartDumpOperator(BaseOperator):
    """Check the run, validate and register a dump; returns one `{"dump_id", "table"}` per table
    for mapping, and pushes XCom `dump` (`dump_id`, `source`, `tables`, `summary`), which the XCom
    tab of the task shows and the merge of the run reads.

    `selected_source`: when set to another source than this operator's (and not `all`), the task
    skips (DAGs with one task group per source use it to run only the group the user picked)."""

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
        from dblog.dump import create_dump
        from dblog.state import dump_path
        check_run(self, context, tables=self.tables, chunk_size=self.chunk_size, delay_seconds=self.delay_seconds,
                  exclude=self.exclude, parallelism=self.parallelism)
        if self.selected_source and self.selected_source not in (ALL_SOURCES, self.source_conn_id):
            raise AirflowSkipException(f"this run dumps {self.selected_source}, not {self.source_conn_id}")
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        spec = dump_spec(self.tables, self.keys, self.chunk_size, self.delay_seconds, self.dump_id, self.exclude,
                         self.parallelism)
        try:
            source = hook.get_source()
            with hook.store() as store:
                # Validates, then sets up the capture checkpoint, then registers: bad input writes nothing.
                dump_id = create_dump(store, source, spec)
                scope = store.get(dump_path(source.name, dump_id))
        except _input_errors() as exc:
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
    """Dump one table of a registered dump, chunk by chunk, logging progress per chunk."""

    template_fields: Sequence[str] = ("source_conn_id", "dump_id", "table")

    def __init__(self, *, source_conn_id: str, dump_id: str, table: str,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.dump_id, self.table = source_conn_id, dump_id, table
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> dict:
        from dataclasses import asdict

        from dblog.config import zookeeper
        from dblog.dump import CANCELLED, TableDump
        from dblog.status import progress_fraction
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


class DumpControlOperator(BaseOperator):
    """Pause, resume, cancel or re-throttle a running dump (its table tasks obey within a chunk)."""

    template_fields: Sequence[str] = ("source_conn_id", "dump_id", "action", "chunk_size", "delay_seconds",
                                      "parallelism")
    ACTIONS = ("status", "pause", "resume", "cancel", "throttle")

    def __init__(self, *, source_conn_id: str, dump_id: str, action: str, chunk_size: Any = None,
                 delay_seconds: Any = None, parallelism: Any = None, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.dump_id, self.action = source_conn_id, dump_id, action
        self.chunk_size, self.delay_seconds, self.parallelism = chunk_size, delay_seconds, parallelism
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> dict:
        from dblog.dump import control_changes, dump_status, set_control
        from dblog.dump_spec import DumpError
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
