"""PostgreSQL: capture through a pgoutput logical replication slot, chunks through psycopg2."""
from __future__ import annotations

import hashlib
import re
import select
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.extras
import pyarrow as pa

from ..model.events import ChangeEvent, RepairNeed, SourceNote
from ..model.positions import int_to_lsn, lsn_to_int, postgres_encode, postgres_encoder, postgres_position
from ..model.schema import Column, TableSchema, decimal_type, normalize_key
from ..model.staged_format import Op
from ..settings import settings
from .base import (
    WATERMARK_SCHEMA,
    WATERMARK_TABLE,
    Dialect,
    HistoryLost,
    Source,
    SourceError,
    SourceUnavailable,
    Transaction,
    unique_keys,
)
from .native import NativeReads, PostgresNative
from .pgoutput import STREAM_MESSAGES, Begin, Commit, Decoder, Relation, RowChange, Truncate, stream_xid
from .spool import StreamedTransactions, spool_root


class SlotInUse(SourceError):
    """Another consumer streams from this source's replication slot."""


_OPS = {"I": Op.INSERT, "U": Op.UPDATE, "D": Op.DELETE}


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


# Read by ADBC as they are, to psycopg2's values (sources/native.py): not REAL (psycopg2's value
# comes from its shortest text, ADBC's from its bits), nor the types staged as their server text.
_NATIVE_AS_IS = {"smallint", "integer", "bigint", "double precision", "boolean", "bytea", "date",
                 "timestamp without time zone", "timestamp with time zone", "text", "character varying", "character"}


class PostgresDialect(Dialect):
    def native_column(self, quoted: str, column: Column) -> str | None:
        """NUMERIC(p,s) as its text, parsed by Arrow at its scale."""
        if pa.types.is_decimal(column.arrow_type):
            return f"{quoted}::text"
        return quoted if column.source_type.lower() in _NATIVE_AS_IS else None


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


# Types staged as strings that psycopg2 would otherwise parse into Python objects whose string form
# is not the server's text (json key order and escapes, arrays as lists, intervals, ranges, time
# with a zone): read as the text output itself, the form pgoutput streams them in, so a dumped
# row stages what the capture stages for it.
_AS_TEXT = ("SELECT array_agg(oid::int) FROM pg_type WHERE typcategory IN ('A', 'R') "
            "OR typname IN ('json', 'jsonb', 'interval', 'time', 'timetz')")


def _server_text(value, cursor):
    return value


class PostgresSource(Source):
    kind = "postgres"
    dialect = PostgresDialect()

    def __init__(self, name: str, host: str, port: int, user: str, password: str, database: str,
                 schema: str = "public", slot: str | None = None, publication: str = "dblog"):
        super().__init__(name)
        self.dsn: dict[str, Any] = dict(host=host, port=port, user=user, password=password, dbname=database)
        self.schema = self.namespace = schema
        self.slot = slot or f"dblog_{name}".replace("-", "_")
        self.publication = publication
        self._repl = self._repl_cursor = None
        self._streams: StreamedTransactions | None = None   # of the stream being read
        self._relation_schemas: dict[int, tuple[Relation, str, TableSchema | None]] = {}   # oid -> see _event
        self._start_tables: set[str] = set()
        self._oids: dict[str, int] = {}   # table -> the oid its last Relation message had
        self._positions: tuple[Begin | None, Callable[[int], str]] = (None, str)    # of the last transaction seen
        self._flushes_stats = True   # the server has pg_stat_force_next_flush (15+): see rows_written

    # -- plain SQL ------------------------------------------------------------------------------
    def connect(self, server_settings: str = "", **extra):
        try:
            conn = psycopg2.connect(**self.dsn, connect_timeout=10, options=f"-c TimeZone=UTC {server_settings}".strip(),
                                    client_encoding="UTF8", **extra)  # UTF-8 as the native reads (and key bounds)
        except psycopg2.OperationalError as exc:
            error = SourceUnavailable if self._lost_connection(exc) else SourceError
            raise error(f"{self.name}: cannot connect to PostgreSQL at {self.dsn['host']}:{self.dsn['port']} "
                        f"as {self.dsn['user']}: {str(exc).strip()}. Check the connection and that "
                        "the server runs.") from exc
        if not extra:
            conn.autocommit = True  # every statement its own READ COMMITTED transaction
            with conn.cursor() as cur:
                cur.execute(_AS_TEXT)
                (oids,), = cur.fetchall()
            psycopg2.extensions.register_type(psycopg2.extensions.new_type(tuple(oids), "DBLOG_TEXT", _server_text),
                                              conn)
        return conn

    _disconnects = (psycopg2.OperationalError, psycopg2.InterfaceError)

    def _lost_connection(self, exc: BaseException) -> bool:
        if getattr(exc, "pgcode", None) in _SHUTDOWN:
            return True
        text = str(exc).lower()  # libpq gives connection failures no SQLSTATE, only a message
        return isinstance(exc, psycopg2.InterfaceError) or any(m in text for m in _GONE)

    def _streaming_cursor(self, conn):
        conn.autocommit = False   # a named (server-side) cursor lives in a transaction; one statement reads it
        return conn.cursor(name="dblog_whole_table")

    def _usable(self, conn) -> bool:
        return not conn.closed  # (bytea arrives as memoryview; staging makes it bytes)

    def clone(self) -> PostgresSource:
        other = super().clone()
        assert isinstance(other, PostgresSource)
        other._repl = other._repl_cursor = other._streams = None  # the stream's connection stays the original's
        return other

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.update(_repl=None, _repl_cursor=None, _streams=None)
        return state

    def _native_reads(self) -> NativeReads:
        if self._native is None:
            self._native = PostgresNative(self.dsn["host"], self.dsn["port"], self.dsn["user"], self.dsn["password"],
                                          self.dsn["dbname"])
        return self._native

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
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
            "SELECT column_name, data_type, numeric_precision, numeric_scale, is_nullable, column_default, "
            "generation_expression, is_identity, ordinal_position FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", [schema_name, name])
        # ordinal_position is the column's attnum (gaps where columns were dropped): its `ident`.
        return [Column(c[0], c[1], arrow_type(c[1], c[2], c[3]), c[4] == "YES",
                       f"generated: {c[6]}" if c[6] else "identity" if c[7] == "YES" else c[5], int(c[8]))
                for c in cols]

    def _catalog_key(self, schema_name: str, name: str) -> list[str]:
        # Real primary keys from pg_index: under REPLICA IDENTITY FULL pgoutput flags every column.
        return [r[0] for r in self._run(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON true "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY k.n",
            [self.dialect.table(f"{schema_name}.{name}")])]

    def _catalog_unique_keys(self, schema_name: str, name: str) -> list[tuple[str, list[str]]]:
        # Key columns only (not INCLUDE ones), of a plain unique index: no predicate, no expression.
        rows = self._run(
            "SELECT ci.relname, a.attname, CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END, i.indisreplident "
            "FROM pg_index i "
            "JOIN pg_class ci ON ci.oid = i.indexrelid "
            "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON k.n <= i.indnkeyatts "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND NOT i.indisprimary AND i.indpred IS NULL "
            "AND i.indexprs IS NULL AND i.indisvalid AND i.indisready ORDER BY ci.relname, k.n",
            [self.dialect.table(f"{schema_name}.{name}")])
        # The replica identity index first: an update's old key (pgoutput's) holds its columns only.
        return unique_keys(r[:3] for r in rows if r[3]) + unique_keys(r[:3] for r in rows if not r[3])

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
    # The order that is not circular: an administrator creates the watermark table and then the
    # publication, which must name it (only a superuser or the tables' owner may create one);
    # then `dblog setup`, as the capture role, checks all of it and creates the replication slot.
    WATERMARK_DDL = (f"CREATE TABLE IF NOT EXISTS {WATERMARK_TABLE} (id VARCHAR(64) PRIMARY KEY, "
                     "value CHAR(36) NOT NULL, written_at TIMESTAMPTZ NOT NULL)")

    def preflight(self, create: bool = True, first_use: bool = True) -> list[str]:
        (wal_level,), = self._run("SHOW wal_level")
        if wal_level != "logical":
            raise SourceError(f"{self.name}: wal_level is {wal_level}; change capture needs logical. "
                              "Fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL.")
        notes: list[str] = []
        gaps = self._role_gaps()
        table_gaps = self._watermark_gaps(create, notes)
        # A publication can only name a table that exists: try to create it only after the table.
        gaps += table_gaps + self._publication_gaps(create and not table_gaps, notes)
        if gaps:
            raise self.needs_administrator(gaps, f"as a superuser, in database {self.dsn['dbname']}")
        notes += self._ensure_slot(create and first_use)
        return notes

    def setup_sql(self) -> list[str]:
        user, db = self._ident(self.user), self.dsn["dbname"]
        try:
            version, tables = self._server_version(), self._captured_tables()
            server = f"PostgreSQL {version // 10000}"
        except (SourceError, psycopg2.Error):
            version, tables, server = None, [], "not reachable as this role yet: assuming PostgreSQL 15 or later"
        return [f"-- {self.name}: capture role {user}, database {db}, schema {self.schema} ({server}).",
                "-- 0. Server setting: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL.",
                f"-- 1. An administrator (a superuser) runs, in database {db}:",
                f"-- (if the role does not exist yet: CREATE ROLE {user} LOGIN PASSWORD '<password>';)",
                *self._sql_replication(), *self._sql_read_schema(), *self._sql_watermark_table(),
                self._sql_publication(version, tables),
                f"-- 2. Then `dblog setup` (as {user}) checks all of this and creates the replication slot "
                f"{self.slot}."]

    # The administrator's statements, one home for each: the printed set-up and the errors use them.
    def _ident(self, name: str) -> str:
        return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else self.dialect.quote(name)

    def _sql_replication(self) -> list[str]:
        return [f"ALTER ROLE {self._ident(self.user)} REPLICATION;"]

    def _sql_read_schema(self) -> list[str]:
        schema, user = self._ident(self.schema), self._ident(self.user)
        return [f"GRANT USAGE ON SCHEMA {schema} TO {user};",
                f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {user};",
                # Default privileges apply to the tables of the role that runs this statement.
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {user};  "
                f"-- as the role that creates {schema}'s tables"]

    def _sql_watermark_table(self) -> list[str]:
        return [f"CREATE SCHEMA IF NOT EXISTS {WATERMARK_SCHEMA};", f"{self.WATERMARK_DDL};",
                *self._sql_watermark_grants()]

    def _sql_watermark_grants(self) -> list[str]:
        user = self._ident(self.user)
        return [f"GRANT USAGE ON SCHEMA {WATERMARK_SCHEMA} TO {user};",
                f"GRANT SELECT, INSERT, UPDATE ON {WATERMARK_TABLE} TO {user};"]

    def _sql_publication(self, version: int | None, tables: list[str]) -> str:
        """Only the captured schema and the watermark table: FOR ALL TABLES would stream every
        table of the database to the capture role, readable or not. Before PostgreSQL 15 a
        publication lists tables one by one, and tables created later must be added to it."""
        pub = self._ident(self.publication)
        if version is None or version >= 150000:
            return f"CREATE PUBLICATION {pub} FOR TABLES IN SCHEMA {self._ident(self.schema)}, TABLE {WATERMARK_TABLE};"
        listed = ", ".join([*(f"{self._ident(self.schema)}.{self._ident(t)}" for t in tables), WATERMARK_TABLE])
        return f"CREATE PUBLICATION {pub} FOR TABLE {listed};  -- later tables: ALTER PUBLICATION {pub} ADD TABLE ..."

    def _server_version(self) -> int:
        return int(self._run("SHOW server_version_num")[0][0])

    def _captured_tables(self) -> list[str]:
        """The schema's tables from the catalog (information_schema hides those the role may not read)."""
        return [r[0] for r in self._run(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relkind = 'r' AND NOT c.relispartition ORDER BY 1", [self.schema])]

    # Each check returns its gaps: (what is wrong, the statements that fix it).
    def _role_gaps(self) -> list[tuple[str, list[str]]]:
        gaps = []
        (can_replicate,), = self._run("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        if not can_replicate:
            gaps.append(("it lacks the REPLICATION attribute", self._sql_replication()))
        readable = self._run(
            "SELECT has_schema_privilege(n.oid, 'USAGE') AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE "
            "c.relnamespace = n.oid AND c.relkind IN ('r', 'p') AND NOT has_table_privilege(c.oid, 'SELECT')) "
            "FROM pg_namespace n WHERE n.nspname = %s", [self.schema])
        if readable and not readable[0][0]:
            gaps.append((f"it may not read schema {self.schema} (USAGE, SELECT)", self._sql_read_schema()))
        return gaps

    def _watermark_gaps(self, create: bool, notes: list[str]) -> list[tuple[str, list[str]]]:
        # Catalog reads only: to_regclass fails outright without USAGE on the schema.
        rows = self._run(
            "SELECT has_schema_privilege(n.oid, 'USAGE'), has_schema_privilege(n.oid, 'CREATE'), "
            "(SELECT c.oid FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'watermarks') "
            "FROM pg_namespace n WHERE n.nspname = %s", [WATERMARK_SCHEMA])
        usage, may_create, table = rows[0] if rows else (False, False, None)
        if table is None and create:
            if not rows:  # no schema yet: creating one takes CREATE on the database
                (may_create,), = self._run("SELECT has_database_privilege(current_database(), 'CREATE')")
            if may_create:
                try:
                    if not rows:
                        self._run(f"CREATE SCHEMA IF NOT EXISTS {WATERMARK_SCHEMA}", fetch=False)
                    self._run(self.WATERMARK_DDL, fetch=False)
                    notes.append(f"created {WATERMARK_TABLE}")
                    return []
                except psycopg2.Error as exc:
                    if self._lost_connection(exc):
                        raise
        if table is None:
            return [(f"there is no watermark table {WATERMARK_TABLE}", self._sql_watermark_table())]
        (writable,), = self._run("SELECT has_table_privilege(%s::oid, 'SELECT') AND has_table_privilege(%s::oid, "
                                 "'INSERT') AND has_table_privilege(%s::oid, 'UPDATE')", [table] * 3)
        if not (usage and writable):
            return [(f"it may not write the watermark table {WATERMARK_TABLE}", self._sql_watermark_grants())]
        return []

    def _publication_gaps(self, create: bool, notes: list[str]) -> list[tuple[str, list[str]]]:
        pub = self.publication
        rows = self._run("SELECT puballtables FROM pg_publication WHERE pubname = %s", [pub])
        if not rows:
            statement = self._sql_publication(self._server_version(), self._captured_tables())
            if create:
                try:
                    self._run(statement.partition("--")[0], fetch=False)
                    notes.append(f"created publication {pub}")
                    return []
                except psycopg2.Error as exc:  # the usual case: only a superuser may
                    if self._lost_connection(exc):
                        raise
            return [(f"publication {pub} is missing", [statement])]
        if rows[0][0]:
            return []  # FOR ALL TABLES (a local or older set-up): covers everything
        gaps = []
        if not self._run("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
                         "AND tablename = 'watermarks'", [pub, WATERMARK_SCHEMA]):
            gaps.append((f"publication {pub} does not include {WATERMARK_TABLE}, so watermarks never reach the "
                         "stream", [f"ALTER PUBLICATION {self._ident(pub)} ADD TABLE {WATERMARK_TABLE};"]))
        listed = {r[0] for r in self._run("SELECT tablename FROM pg_publication_tables WHERE pubname = %s "
                                          "AND schemaname = %s", [pub, self.schema])}
        missing = [t for t in self._captured_tables() if t not in listed]
        if missing:
            tables = ", ".join(f"{self._ident(self.schema)}.{self._ident(t)}" for t in missing)
            gaps.append((f"publication {pub} leaves out {tables}, whose changes would never be captured",
                         [f"ALTER PUBLICATION {self._ident(pub)} ADD TABLE {tables};"]))
        return gaps

    def _ensure_slot(self, create: bool) -> list[str]:
        query = "SELECT plugin, wal_status FROM pg_replication_slots WHERE slot_name = %s"
        rows = self._run(query, [self.slot])
        deadline = time.monotonic() + settings().capture.slot_busy_seconds
        while rows and not rows[0][0] and time.monotonic() < deadline:
            # Listed without its plugin: another process of this deployment is creating it (a
            # logical slot waits for a consistent point first). Its slot is the one to use.
            time.sleep(0.2)
            rows = self._run(query, [self.slot])
        if rows:
            if rows[0][0] != "pgoutput":
                raise SourceError(f"{self.name}: slot {self.slot} uses plugin {rows[0][0]}, not pgoutput. "
                                  "Fix: drop it or configure another slot name (?slot=...).")
            if rows[0][1] == "lost":
                raise HistoryLost(f"{self.name}: replication slot {self.slot} lost WAL it still needed "
                                  "(max_slot_wal_keep_size). Fix: `dblog capture --reset`, then a full dump.")
            return []
        if not create:
            raise self._slot_gone()
        try:
            self._run("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [self.slot])
        except psycopg2.errors.DuplicateObject:
            # Another process of this deployment set up the source at the same moment (a first
            # capture beside a first `dblog sync` or dump): its slot is the one to use.
            return self._ensure_slot(create=False)
        return [f"created replication slot {self.slot}"]

    def _slot_gone(self) -> HistoryLost:
        return HistoryLost(f"{self.name}: replication slot {self.slot} is gone, so changes since the "
                           "checkpoint are lost to capture. Fix: reset the capture checkpoint "
                           "(`dblog capture --reset`), which recreates the slot, and run a full dump.")

    def start_point(self) -> dict | None:
        return None  # the slot remembers where its consumer stopped

    def reset_stream(self) -> None:
        if self.slot_exists():
            self._run("SELECT pg_drop_replication_slot(%s)", [self.slot])
        self._ensure_slot(create=True)

    def slot_exists(self) -> bool:
        return bool(self._run("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", [self.slot]))

    def write_watermark(self, slot: str, value: str) -> int:
        return self._run(f"INSERT INTO {WATERMARK_TABLE} (id, value, written_at) VALUES (%s, %s, now()) "
                  "ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, written_at = EXCLUDED.written_at",
                  [self.watermark_id(slot), value], fetch=False)

    def head(self) -> dict:
        (lsn,), = self._run("SELECT pg_current_wal_lsn()::text")
        return {"lsn": lsn, "position": postgres_position(lsn_to_int(lsn), 0).encode()}

    # A backend reports its writes at most once a second (PGSTAT_MIN_INTERVAL), with some slack.
    ROWS_WRITTEN_DELAY_S = 1.5

    def rows_written(self) -> int | None:
        # This database's statistics. A backend reports its writes there within about a second;
        # this one's own (its watermarks) are flushed first (PostgreSQL 15+), so a late report of
        # them can never hide another's write (`snapshot.window_growth`).
        if self._flushes_stats:
            try:
                self._run("SELECT pg_stat_force_next_flush()")
            except psycopg2.errors.UndefinedFunction:
                self._flushes_stats = False
        (count,), = self._run("SELECT CASE WHEN current_setting('track_counts')::bool THEN tup_inserted + "
                              "tup_updated + tup_deleted END FROM pg_stat_database WHERE datname = current_database()")
        return None if count is None else int(count)   # None: track_counts is off, nothing is counted

    # -- change stream --------------------------------------------------------------------------
    def stream(self, resume: dict | None, idle_timeout: float = 1.0) -> Iterator[Transaction | None]:
        if not self.slot_exists():
            raise self._slot_gone()
        start = lsn_to_int(resume["lsn"]) if resume else 0
        conn, cur = self._start_replication(start)  # SlotInUse while another consumer holds the slot
        self._repl, self._repl_cursor = conn, cur
        decoder, index, piece_rows = Decoder(), 0, settings().capture.piece_rows
        self._start_tables = set(self.tables())   # a table not among them is new (`_relation_changed`)
        pending: list[ChangeEvent] = []
        needs: list[SourceNote] = []
        begin: Begin | None = None
        streams = self._streams = StreamedTransactions(self.name, piece_rows, self.table_schema, self._add_change,
                                                       spool_root(self._spool_name()))
        last_data = time.monotonic()
        try:
            while True:
                msg = self._read_message(cur)
                if msg is None:
                    # Idle: no data for idle_timeout. Keepalives don't count: a server shutting
                    # down sends them back to back until we confirm what it sent.
                    if begin is None and streams.open is None and time.monotonic() - last_data >= idle_timeout:
                        cur.send_feedback()  # keepalive reply, without moving the slot
                        last_data = time.monotonic()
                        yield None
                        continue
                    select.select([cur], [], [], idle_timeout)
                    continue
                last_data = time.monotonic()
                item = decoder.decode(msg.payload)
                if isinstance(item, (RowChange, Truncate)):   # the usual message first
                    if streams.open is not None:
                        yield from streams.change(item, stream_xid(msg.payload))
                        continue
                    self._add_change(item, begin, index, pending, needs)
                    index += 1
                    # BEGIN carries the commit's LSN, time and xid: a piece's events are complete but
                    # for the commit itself (a transaction ending at or before `start` is staged).
                    if len(pending) > piece_rows and begin is not None and begin.final_lsn >= start:
                        yield Transaction.piece(pending[:-1])
                        pending = pending[-1:]
                elif isinstance(item, Begin):
                    begin, index, pending, needs = item, 0, [], []
                elif isinstance(item, STREAM_MESSAGES):
                    yield from streams.handle(item, start)
                elif isinstance(item, Commit):
                    if item.end_lsn > start:
                        yield Transaction(pending, {"lsn": int_to_lsn(item.end_lsn)}, item.commit_ts, needs)
                    begin, pending, needs = None, [], []
        finally:
            conn.close()
            self._repl = None
            streams.discard()

    def _spool_name(self) -> str:
        """The slot on its server: one consumer reads it at a time, so one capture uses its spools."""
        server = f"{self.dsn['host']}:{self.dsn['port']}/{self.dsn['dbname']}"
        return f"{self.slot}-{hashlib.sha1(server.encode()).hexdigest()[:8]}"

    def spooling(self) -> bool:
        return self._streams is not None and bool(self._streams.spools)

    def _read_message(self, cur):
        try:
            return cur.read_message()
        except psycopg2.DatabaseError as exc:
            if "no COPY in progress" not in str(exc):
                raise
            # The server ended the stream cleanly: it is shutting down (we confirmed all).
            raise SourceUnavailable(f"{self.name}: the server ended replication") from exc

    def _start_replication(self, start: int):
        """A replication connection streaming from the slot. A slot serves one consumer at a time:
        a predecessor capture's connection ends within moments of its process, so wait briefly;
        anyone else (another deployment or tool on this slot name) would take the changes this
        capture needs, so then fail, naming the holder and the fix."""
        patience = settings().capture.slot_busy_seconds
        deadline = time.monotonic() + patience
        while True:
            work_mem = settings().capture.pg_decoding_work_mem_kib
            conn = self.connect(f"-c logical_decoding_work_mem={max(64, work_mem)}kB" if work_mem else "",
                                connection_factory=psycopg2.extras.LogicalReplicationConnection)
            cur = conn.cursor()
            try:
                cur.start_replication(slot_name=self.slot, decode=False, start_lsn=start, options=self._protocol())
                return conn, cur
            except psycopg2.errors.ObjectInUse:
                conn.close()
                if time.monotonic() >= deadline:
                    raise SlotInUse(self._slot_in_use(patience)) from None
                time.sleep(0.5)
            except BaseException:
                conn.close()
                raise

    def _protocol(self) -> dict[str, str]:
        """pgoutput's options: version 2 with streaming of large transactions where the server
        has it (PostgreSQL 14+) and `DBLOG_PG_STREAMING` leaves it on, else version 1."""
        if settings().capture.pg_streaming == "on" and self._server_version() >= 140000:
            return {"proto_version": "2", "streaming": "on", "publication_names": self.publication}
        return {"proto_version": "1", "publication_names": self.publication}

    def _slot_in_use(self, waited: float) -> str:
        rows = self._run("SELECT s.active_pid, a.application_name, a.client_addr::text, a.usename "
                         "FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid "
                         "WHERE s.slot_name = %s", [self.slot])
        pid, app, addr, user = rows[0] if rows else (None, None, None, None)
        holder = ", ".join(f"{k} {v}" for k, v in (("pid", pid), ("application", app and repr(app)),
                                                     ("from", addr), ("user", user)) if v)
        return (f"{self.name}: replication slot {self.slot} is in use by another consumer ({holder or 'unknown'}) "
                f"for over {waited:.0f} s. A slot feeds one consumer, and what it hands the other never "
                f"reaches this capture. Fix: stop that consumer (if it is a stale capture: SELECT "
                f"pg_terminate_backend({pid or 'PID'});), or give this source its own slot (?slot=NAME in its "
                "connection URI; `dblog setup` creates it).")

    def acknowledge(self, resume: dict) -> None:
        if self._repl is not None and not self._repl.closed:
            self._repl.cursor().send_feedback(flush_lsn=lsn_to_int(resume["lsn"]), force=True)

    def acknowledge_idle(self) -> None:
        # wal_end is how far the server has sent; with nothing open or unstaged on our side, all
        # of it is safe to confirm. Without this a fast shutdown waits for ever on our walsender.
        if self._repl is not None and not self._repl.closed and self._repl_cursor.wal_end:
            self._repl_cursor.send_feedback(flush_lsn=self._repl_cursor.wal_end)

    def _add_change(self, item: RowChange | Truncate, begin: Begin | None, index: int,
                    pending: list[ChangeEvent], needs: list[SourceNote]) -> None:
        """Add the `index`th change of transaction `begin` to its events, or for a TRUNCATE to its needs."""
        if begin is None:  # pgoutput sends changes only inside BEGIN/COMMIT
            raise SourceError(f"{self.name}: logical replication sent a change outside a "
                              "transaction; it has no position, so it is not staged")
        if isinstance(item, RowChange):
            if item.relation.namespace == self.schema:
                if self._relation_schemas.get(item.relation.oid, (None,))[0] is not item.relation:
                    needs.extend(self._relation_changed(item.relation, postgres_encode(begin.final_lsn, index)))
                if self._relation_schemas[item.relation.oid][2] is not None:   # None: a table without a key
                    pending.append(self._event(item, begin, index))
            elif item.relation.namespace == WATERMARK_SCHEMA:
                pending.extend(self.own_watermarks([self._event(item, begin, index)]))
        else:
            # No row events: the table's rows are gone from the source but not from the
            # warehouse, so the table is repaired whole (see dblog.snapshot.repair).
            position = postgres_encode(begin.final_lsn, index)
            needs.extend(RepairNeed(r.qualified, "TRUNCATE (no row events in the log)", position)
                         for r in item.relations if r.namespace == self.schema)

    def _relation_changed(self, rel: Relation, position: str) -> list[SourceNote]:
        """A Relation message: pgoutput sends one before a table's first row in a session and after
        its schema changed (so a change to a quiet table is seen at its next row change). The
        repairs the change needs (see dblog.model.schema_changes), and the table's schema cached."""
        cached = self._relation_schemas.get(rel.oid)
        recreated = self._oids.get(rel.qualified, rel.oid) != rel.oid   # dropped and created again
        self._oids[rel.qualified] = rel.oid
        if (cached is not None and cached[1] != rel.qualified) or recreated or \
                (cached is None and rel.qualified not in self._start_tables):
            self._schemas.pop(rel.qualified, None)   # (a table of that name before: another one)
            self._keyless.discard(rel.qualified)
            why = f"renamed from {cached[1]}" if cached is not None else \
                "dropped and created again" if recreated else "new in the captured schema"
            needs: list[SourceNote] = [*self.new_tables([rel.qualified], position, why)]
        else:
            needs = self.schema_changed(rel.qualified, position, cached[2] if cached is not None else None,
                                        seen=[c.name for c in rel.columns])
        self._relation_schemas[rel.oid] = (rel, rel.qualified,
                                           self.schema_for_event(rel.qualified, [c.name for c in rel.columns]))
        return needs

    def _event(self, change: RowChange, begin: Begin, index: int) -> ChangeEvent:
        # A row has its relation's columns, and a changed table comes with a new Relation message
        # before its next row: one schema check per Relation (`_relation_changed`), not per row.
        rel = change.relation
        cached = self._relation_schemas.get(rel.oid)
        if cached is None or cached[0] is not rel:   # the watermark table
            cached = self._relation_schemas[rel.oid] = (
                rel, rel.qualified, self.schema_for_event(rel.qualified, [c.name for c in rel.columns]))
        _, table, schema = cached
        assert schema is not None, "a table without a key has no events (`_add_change`)"
        after = change.new
        image = after if after is not None else change.old
        if image is None:  # pgoutput always sends the new row or the old key; fail closed if not
            raise SourceError(f"{self.name}: a {change.kind} event on {table} carries no row")
        key = normalize_key(schema.key_of(image), schema)
        old_key = None
        identity = change.old if change.old is not None else change.old_key
        if change.kind == "U" and identity is not None:
            prior = normalize_key(schema.key_of(identity), schema)
            old_key = prior if prior != key else None
        op = _OPS[change.kind]
        if self._positions[0] is not begin:
            self._positions = (begin, postgres_encoder(begin.final_lsn))
        return ChangeEvent(self.name, table, op, self._positions[1](index), key, after, change.old, old_key,
                           begin.txid, begin.commit_ts, change.unchanged or [])

