"""Watermark chunk dumps as tasks: start (validate + register), one task per table, wait for capture.

Bad input fails the start task at once (no retry) with the engine's message, before anything is
written. Table tasks resume from their ZooKeeper progress when retried.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from dblog.config import DEFAULT_CHUNK_SIZE
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook
from dblog_airflow.triggers.capture import CaptureReachedTrigger


def _input_errors() -> tuple[type[Exception], ...]:
    from dblog.config import ConfigError
    from dblog.dump import DumpError
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


class StartDumpOperator(BaseOperator):
    """Validate and register a dump; returns one `{"dump_id", "table"}` per table for mapping.

    `selected_source`: when set and not this operator's source, the task skips (DAGs with one
    task group per source use it to run only the group the user picked)."""

    template_fields: Sequence[str] = ("source_conn_id", "selected_source", "tables", "keys", "chunk_size",
                                      "delay_seconds", "dump_id")

    def __init__(self, *, source_conn_id: str, tables: Any = None, keys: Any = None, chunk_size: Any = DEFAULT_CHUNK_SIZE,
                 delay_seconds: Any = 0.0, dump_id: str | None = None, selected_source: str | None = None,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.selected_source = source_conn_id, selected_source
        self.tables, self.keys = tables, keys
        self.chunk_size, self.delay_seconds, self.dump_id = chunk_size, delay_seconds, dump_id
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> list[dict]:
        from dblog.capture import ensure_checkpoint
        from dblog.dump import DumpSpec, create_dump
        from dblog.state import dump_path
        if self.selected_source and self.selected_source != self.source_conn_id:
            raise AirflowSkipException(f"this run dumps {self.selected_source}, not {self.source_conn_id}")
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        spec = DumpSpec(tables=list(self.tables or []), keys=_keys(self.keys), chunk_size=self.chunk_size,
                        delay_s=self.delay_seconds, dump_id=self.dump_id or None)
        try:
            source = hook.get_source()
            with hook.store() as store:
                dump_id = create_dump(store, source, spec)  # validates first: bad input writes nothing
                ensure_checkpoint(store, source)  # before any chunk: its watermarks must be captured
                tables = store.get(dump_path(source.name, dump_id))["tables"]
        except _input_errors() as exc:
            raise AirflowFailException(f"dump not started: {exc}") from None
        self.log.info("dump %s on %s: %d table(s) %s, chunk size %s, delay %ss%s", dump_id, source.name,
                      len(tables), ", ".join(tables), spec.chunk_size, spec.delay_s,
                      f", {len(spec.keys)} keys" if spec.keys else "")
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
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source = hook.get_source()

        def progress(p, rows: int) -> None:
            self.log.info("%s: chunk %d done, %d rows (%d in all, %.0f rows/s)", p.table, p.chunks, rows,
                          p.rows, p.rows_per_s)

        # A retry after a crash waits for the dead worker's lease to go with its ZooKeeper session.
        wait = 3 * zookeeper(hook.zookeeper_uri()).session_timeout
        with hook.store() as store:
            result = TableDump(store, source, hook.staged(), self.dump_id, self.table, progress).run(wait)
        self.log.info("%s: %s after %d chunks, %d rows, %.0f rows/s", result.table, result.status, result.chunks,
                      result.rows, result.rows_per_s)
        if result.status == CANCELLED:
            raise AirflowSkipException(f"dump {self.dump_id} was cancelled")
        return asdict(result)


class WaitForCaptureOperator(BaseOperator):
    """Write a sync watermark and wait (deferred) until the capture has checkpointed past it.

    After that, every chunk staged before this task started has its high watermark in the staged
    log below the checkpoint, so the merge that follows includes it."""

    template_fields: Sequence[str] = ("source_conn_id",)

    def __init__(self, *, source_conn_id: str, poll_interval: float = 1.0, timeout_seconds: float = 3600,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.poll_interval = source_conn_id, poll_interval
        self.timeout_seconds, self.zookeeper_conn_id = timeout_seconds, zookeeper_conn_id

    def execute(self, context) -> str:
        from dblog.capture import sync_point
        from dblog.config import staging_root
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        source = hook.get_source()
        mark = sync_point(source)
        source.close()
        self.log.info("%s: sync watermark %s written; waiting for the capture to pass it", source.name, mark)
        self.defer(trigger=CaptureReachedTrigger(source.name, mark, hook.zookeeper_uri(), staging_root(),
                                                 self.poll_interval),
                   method_name="execute_complete", timeout=dt.timedelta(seconds=self.timeout_seconds))

    def execute_complete(self, context, event: dict) -> str:
        self.log.info("%s: capture passed the sync watermark at %s", event["source"], event["position"])
        return event["position"]


class DumpControlOperator(BaseOperator):
    """Pause, resume, cancel or re-throttle a running dump (its table tasks obey within a chunk)."""

    template_fields: Sequence[str] = ("source_conn_id", "dump_id", "action", "chunk_size", "delay_seconds")
    ACTIONS = ("status", "pause", "resume", "cancel", "throttle")

    def __init__(self, *, source_conn_id: str, dump_id: str, action: str, chunk_size: Any = None,
                 delay_seconds: Any = None, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.dump_id, self.action = source_conn_id, dump_id, action
        self.chunk_size, self.delay_seconds = chunk_size, delay_seconds
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> dict:
        from dblog.dump import CANCELLED, PAUSED, RUNNING, DumpError, dump_status, set_control
        if self.action not in self.ACTIONS:
            raise AirflowFailException(f"action {self.action!r} is not one of {', '.join(self.ACTIONS)}")
        changes = {"pause": {"state": PAUSED}, "resume": {"state": RUNNING}, "cancel": {"state": CANCELLED},
                   "throttle": {"chunk_size": self.chunk_size, "delay_s": self.delay_seconds}}.get(self.action, {})
        if self.action == "throttle" and self.chunk_size is None and self.delay_seconds is None:
            raise AirflowFailException("throttle needs chunk_size and/or delay_seconds")
        hook = DBLogHook(self.source_conn_id, self.zookeeper_conn_id)
        with hook.store() as store:
            try:
                if changes:
                    set_control(store, self.source_conn_id, self.dump_id, **changes)
                status = dump_status(store, self.source_conn_id, self.dump_id)
            except DumpError as exc:
                raise AirflowFailException(str(exc)) from None
        if not status["tables"]:
            raise AirflowFailException(f"no dump {self.dump_id!r} on {self.source_conn_id}")
        self.log.info("dump %s on %s: %s (chunk size %s, delay %ss)", self.dump_id, self.source_conn_id,
                      status["state"], status["control"].get("chunk_size"), status["control"].get("delay_s"))
        for table, p in status["tables"].items():
            self.log.info("  %s: %s, %d chunks, %d rows", table, p["status"], p["chunks"], p["rows"])
        return status
