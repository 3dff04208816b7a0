"""PostgreSQL: capture through a pgoutput logical replication slot, chunks through psycopg2."""
from __future__ import annotations

import select
import time
from typing import Iterator

import psycopg2
import psycopg2.extras
import pyarrow as pa

from ..events import DELETE, INSERT, UPDATE, ChangeEvent
from ..positions import encode as encode_position
from ..positions import int_to_lsn, lsn_to_int, postgres_position
from ..schema import Column, decimal_type, normalize_key
from .base import (WATERMARK_SCHEMA, WATERMARK_TABLE, Dialect, HistoryLost, Source, SourceError,
                   SourceUnavailable, Transaction)
from .pgoutput import Begin, Commit, Decoder, RowChange


_OPS = {"I": INSERT, "U": UPDATE, "D": DELETE}


def arrow_type(type_name: str, precision, scale) -> pa.DataType:
    t = type_name.lower()
    if t in ("smallint", "integer", "bigint", "oid"):
        return pa.int64()
    if t == "numeric":
        return decimal_type(precision, scale)
    if t in ("real", "double precision"):
        return pa.float64()
    if t == "boolean":
        return pa.bool_()
    if t == "bytea":
        return pa.binary()
    if t == "date":
        return pa.date32()
    if t == "timestamp without time zone":
        return pa.timestamp("us")
    if t == "timestamp with time zone":
        return pa.timestamp("us", tz="UTC")
    return pa.string()  # text, varchar, uuid, json(b), time, interval, arrays...: exact as text


_SHUTDOWN = {"57P01", "57P02", "57P03"}  # admin shutdown, crash shutdown, cannot connect now
_GONE = ("connection refused", "server closed the connection", "terminating connection", "shutting down",
         "starting up", "could not receive data", "could not send data", "no connection to the server",
         "connection already closed", "timeout expired", "ssl syscall")


def estimate_from_stats(reltuples: float | None, live: int | None) -> int | None:
    """A table's row estimate: the planner's reltuples once analyzed, else the live-tuple count,
    else 0 only for a table both call empty (reltuples 0 is ambiguous before PostgreSQL 14)."""
    if reltuples is not None and reltuples > 0:
        return int(reltuples)
    if live:
        return int(live)
    return 0 if reltuples == 0 and live == 0 else None


class PostgresSource(Source):
    kind = "postgres"
    dialect = Dialect()

    def __init__(self, name: str, host: str, port: int, user: str, password: str, database: str,
                 schema: str = "public", slot: str | None = None, publication: str = "dblog"):
        super().__init__(name)
        self.dsn = dict(host=host, port=port, user=user, password=password, dbname=database)
        self.schema = self.namespace = schema
        self.slot = slot or f"dblog_{name}".replace("-", "_")
        self.publication = publication
        self._repl = self._repl_cursor = None

    # -- plain SQL ------------------------------------------------------------------------------
    def connect(self, **extra):
        try:
            conn = psycopg2.connect(**self.dsn, connect_timeout=10, options="-c TimeZone=UTC", **extra)
        except psycopg2.OperationalError as exc:
            error = SourceUnavailable if self._lost_connection(exc) else SourceError
            raise error(f"{self.name}: cannot connect to PostgreSQL at {self.dsn['host']}:{self.dsn['port']} "
                        f"as {self.dsn['user']}: {str(exc).strip()}. Check the connection and that "
                        "the server runs.") from exc
        if not extra:
            conn.autocommit = True  # every statement its own READ COMMITTED transaction
        return conn

    _disconnects = (psycopg2.OperationalError, psycopg2.InterfaceError)

    def _lost_connection(self, exc: BaseException) -> bool:
        if getattr(exc, "pgcode", None) in _SHUTDOWN:
            return True
        text = str(exc).lower()  # libpq gives connection failures no SQLSTATE, only a message
        return isinstance(exc, psycopg2.InterfaceError) or any(m in text for m in _GONE)

    def _usable(self, conn) -> bool:
        return not conn.closed  # (bytea arrives as memoryview; staging makes it bytes)

    def close(self) -> None:
        for c in (self._conn, self._repl):
            if c is not None and not c.closed:
                c.close()
        self._conn = self._repl = None

    # -- catalog ---------------------------------------------------------------------------------
    @property
    def user(self) -> str:
        return self.dsn["user"]

    def _catalog_columns(self, schema_name: str, name: str) -> list[Column]:
        cols = self._run(
            "SELECT column_name, data_type, numeric_precision, numeric_scale FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", [schema_name, name])
        return [Column(c[0], c[1], arrow_type(c[1], c[2], c[3])) for c in cols]

    def _catalog_key(self, schema_name: str, name: str) -> list[str]:
        # Real primary keys from pg_index: under REPLICA IDENTITY FULL pgoutput flags every column.
        return [r[0] for r in self._run(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON true "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY k.n",
            [self.dialect.table(f"{schema_name}.{name}")])]

    def estimate_rows(self, schema) -> int | None:
        # reltuples is what the last ANALYZE / VACUUM saw, -1 if neither ran yet (0 on servers
        # before 14); n_live_tup is the statistics collector's running count, kept without ANALYZE.
        rows = self._run(
            "SELECT c.reltuples, s.n_live_tup FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE c.oid = to_regclass(%s)", [self.dialect.table(schema.name)])
        if not rows:
            return None
        return estimate_from_stats(rows[0][0], rows[0][1])

    # -- set-up ---------------------------------------------------------------------------------
    def preflight(self, create: bool = True, first_use: bool = True) -> list[str]:
        (wal_level,), = self._run("SHOW wal_level")
        if wal_level != "logical":
            raise SourceError(f"{self.name}: wal_level is {wal_level}; change capture needs logical. "
                              "Fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL.")
        (can_replicate,), = self._run(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        if not can_replicate:
            raise SourceError(f"{self.name}: role {self.dsn['user']} lacks the REPLICATION attribute. "
                              f"Fix: ALTER ROLE {self.dsn['user']} REPLICATION;")
        notes: list[str] = []
        if create:
            notes += self._ensure_watermark_table()
        notes += self._ensure_publication(create)
        notes += self._ensure_slot(create and first_use)
        return notes

    def _ensure_watermark_table(self) -> list[str]:
        if self._run("SELECT to_regclass(%s) IS NOT NULL", [WATERMARK_TABLE])[0][0]:
            return []
        try:
            if not self._run("SELECT 1 FROM pg_namespace WHERE nspname = %s", [WATERMARK_SCHEMA]):
                self._run(f"CREATE SCHEMA {WATERMARK_SCHEMA}", fetch=False)
            self._run(f"CREATE TABLE IF NOT EXISTS {WATERMARK_TABLE} (id VARCHAR(64) PRIMARY KEY, "
                      "value CHAR(36) NOT NULL, written_at TIMESTAMPTZ NOT NULL)", fetch=False)
        except psycopg2.Error as exc:
            raise SourceError(f"{self.name}: cannot create the watermark table {WATERMARK_TABLE} "
                              f"({str(exc).strip()}). Fix: CREATE SCHEMA {WATERMARK_SCHEMA} AUTHORIZATION "
                              f"{self.dsn['user']};") from exc
        return []

    def _ensure_publication(self, create: bool) -> list[str]:
        rows = self._run("SELECT puballtables FROM pg_publication WHERE pubname = %s", [self.publication])
        if not rows:
            if not create:
                raise SourceError(f"{self.name}: publication {self.publication} is missing. "
                                  f"Fix: CREATE PUBLICATION {self.publication} FOR ALL TABLES;")
            try:
                self._run(f"CREATE PUBLICATION {self.dialect.quote(self.publication)} FOR ALL TABLES", fetch=False)
            except psycopg2.Error as exc:
                raise SourceError(f"{self.name}: cannot create publication {self.publication} "
                                  f"({str(exc).strip()}). Fix, as a superuser: CREATE PUBLICATION "
                                  f"{self.publication} FOR ALL TABLES;") from exc
            return [f"created publication {self.publication} FOR ALL TABLES"]
        if not rows[0][0]:
            listed = self._run("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
                               "AND tablename = 'watermarks'", [self.publication, WATERMARK_SCHEMA])
            if not listed:
                raise SourceError(f"{self.name}: publication {self.publication} does not include "
                                  f"{WATERMARK_TABLE}, so watermarks never reach the stream. Fix: ALTER "
                                  f"PUBLICATION {self.publication} ADD TABLE {WATERMARK_TABLE};")
        return []

    def _ensure_slot(self, create: bool) -> list[str]:
        rows = self._run("SELECT plugin, wal_status FROM pg_replication_slots WHERE slot_name = %s", [self.slot])
        if rows:
            if rows[0][0] != "pgoutput":
                raise SourceError(f"{self.name}: slot {self.slot} uses plugin {rows[0][0]}, not pgoutput. "
                                  "Fix: drop it or configure another slot name (?slot=...).")
            if rows[0][1] == "lost":
                raise HistoryLost(f"{self.name}: replication slot {self.slot} lost WAL it still needed "
                                  "(max_slot_wal_keep_size). Fix: `dblog capture --reset`, then a full dump.")
            return []
        if not create:
            raise HistoryLost(f"{self.name}: replication slot {self.slot} is gone, so changes since the "
                              "checkpoint are lost to capture. Fix: reset the capture checkpoint "
                              "(`dblog capture --reset`), which recreates the slot, and run a full dump.")
        self._run("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [self.slot])
        return [f"created replication slot {self.slot}"]

    def start_point(self) -> dict | None:
        return None  # the slot remembers where its consumer stopped

    def reset_stream(self) -> None:
        if self.slot_exists():
            self._run("SELECT pg_drop_replication_slot(%s)", [self.slot])
        self._ensure_slot(create=True)

    def slot_exists(self) -> bool:
        return bool(self._run("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", [self.slot]))

    def write_watermark(self, slot: str, value: str) -> None:
        self._run(f"INSERT INTO {WATERMARK_TABLE} (id, value, written_at) VALUES (%s, %s, now()) "
                  "ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, written_at = EXCLUDED.written_at",
                  [slot, value], fetch=False)

    def head(self) -> dict:
        (lsn,), = self._run("SELECT pg_current_wal_lsn()::text")
        return {"lsn": lsn, "position": postgres_position(lsn_to_int(lsn), 0).encode()}

    # -- change stream --------------------------------------------------------------------------
    def stream(self, resume: dict | None, idle_timeout: float = 1.0) -> Iterator[Transaction | None]:
        if not self.slot_exists():
            raise HistoryLost(f"{self.name}: replication slot {self.slot} is gone, so changes since the "
                              "checkpoint are lost to capture. Fix: reset the capture checkpoint "
                              "(`dblog capture --reset`), which recreates the slot, and run a full dump.")
        self._repl = conn = self.connect(connection_factory=psycopg2.extras.LogicalReplicationConnection)
        self._repl_cursor = cur = conn.cursor()
        start = lsn_to_int(resume["lsn"]) if resume else 0
        cur.start_replication(slot_name=self.slot, decode=False, start_lsn=start,
                              options={"proto_version": "1", "publication_names": self.publication})
        decoder, pending, begin, index = Decoder(), [], None, 0
        last_data = time.monotonic()
        try:
            while True:
                try:
                    msg = cur.read_message()
                except psycopg2.DatabaseError as exc:
                    if "no COPY in progress" not in str(exc):
                        raise
                    # The server ended the stream cleanly: it is shutting down (we confirmed all).
                    raise SourceUnavailable(f"{self.name}: the server ended replication") from exc
                if msg is None:
                    # Idle: no data for idle_timeout. Keepalives don't count: a server shutting
                    # down sends them back to back until we confirm what it sent.
                    if begin is None and time.monotonic() - last_data >= idle_timeout:
                        cur.send_feedback()  # keepalive reply, without moving the slot
                        last_data = time.monotonic()
                        yield None
                        continue
                    select.select([cur], [], [], idle_timeout)
                    continue
                last_data = time.monotonic()
                item = decoder.decode(msg.payload)
                if isinstance(item, Begin):
                    begin, index, pending = item, 0, []
                elif isinstance(item, RowChange):
                    if item.relation.namespace in (self.schema, WATERMARK_SCHEMA):
                        pending.append(self._event(item, begin, index))
                    index += 1
                elif isinstance(item, Commit):
                    if item.end_lsn > start:
                        yield Transaction(pending, {"lsn": int_to_lsn(item.end_lsn)}, item.commit_ts)
                    begin, pending = None, []
        finally:
            conn.close()
            self._repl = None

    def acknowledge(self, resume: dict) -> None:
        if self._repl is not None and not self._repl.closed:
            self._repl.cursor().send_feedback(flush_lsn=lsn_to_int(resume["lsn"]), force=True)

    def acknowledge_idle(self) -> None:
        # wal_end is how far the server has sent; with nothing open or unstaged on our side, all
        # of it is safe to confirm. Without this a fast shutdown waits for ever on our walsender.
        if self._repl is not None and not self._repl.closed and self._repl_cursor.wal_end:
            self._repl_cursor.send_feedback(flush_lsn=self._repl_cursor.wal_end)

    def _event(self, change: RowChange, begin: Begin, index: int) -> ChangeEvent:
        table = change.relation.qualified
        schema = self.schema_for_event(table, change.new if change.new is not None else change.old)
        after = change.new
        key = normalize_key(schema.key_of(after if after is not None else change.old), schema)
        old_key = None
        if change.kind == "U" and change.old is not None:
            prior = normalize_key(schema.key_of(change.old), schema)
            old_key = prior if prior != key else None
        op = _OPS[change.kind]
        return ChangeEvent(self.name, table, op, encode_position(begin.final_lsn, index, 0), key, after,
                           before=change.old, old_key=old_key, txid=str(begin.xid), commit_ts=begin.commit_ts,
                           unchanged=change.unchanged or [])
