"""MariaDB / MySQL: binlog capture through mysql-replication, chunks through PyMySQL."""
from __future__ import annotations

import datetime as dt
import logging
import random
import re
from collections.abc import Iterator
from typing import Any

import MySQLdb
import MySQLdb.cursors
import pyarrow as pa
import pymysql  # the binlog reader's errors (mysql-replication connects with it)
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.bitmap import BitGet
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
    HeartbeatLogEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from ..model.events import ChangeEvent, RepairNeed, SourceNote
from ..model.positions import binlog_file_index, mysql_position
from ..model.positions import encode as encode_position
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
    UnreadableEvent,
    unique_keys,
)
from .binlog_rows import fast_rows
from .mysql_statements import commits_by_itself, read_ddl, statement_writes, strip_sql_comments
from .native import MySQLNative, NativeReads

log = logging.getLogger("dblog.source")

_INTS = {"tinyint", "smallint", "mediumint", "int", "integer", "year"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# Read by connectorx as they are, to the Python driver's values (sources/native.py); DOUBLE but
# not FLOAT (a FLOAT's Python value comes from its shortest text, connectorx's from its bits).
_NATIVE_AS_IS = _INTS | _BINARY | {"bigint", "double", "date", "datetime", "char", "varchar", "tinytext", "text",
                                   "mediumtext", "longtext"}


# Can't connect (2002: libmariadb, TCP included; 2003: PyMySQL, the binlog reader's driver), unknown
# host (2005: a stopped container's name stops resolving), server gone, lost connection (2055: with
# the system error), server shutdown, connection killed.
_GONE = {2002, 2003, 2005, 2006, 2013, 2055, 1053, 1927}


_BIT = re.compile(r"bit\((\d+)\)")


class MySQLDialect(Dialect):
    quote_char = "`"

    def key_bound(self, columns: tuple[str, ...], op: str, key: tuple) -> tuple[str, list[Any]]:
        """A composite bound spelled out column by column, `a > x OR (a = x AND b > y)`: MariaDB
        (10.11) makes no range of a row-value comparison, so every chunk of a composite key walked
        the key index from the table's first key; this form is a range on it."""
        if len(columns) == 1:
            return super().key_bound(columns, op, key)
        first, (rest, params) = self.quote(columns[0]), self.key_bound(columns[1:], op, key[1:])
        strict = op[0]   # > or <: past the bound on the first column, whatever the rest
        return f"({first} {strict} %s OR ({first} = %s AND {rest}))", [key[0], key[0], *params]

    def select_list(self, schema: TableSchema) -> str:
        """BIT columns as the zero-padded bit string the binlog decoder gives (the driver returns
        raw bytes), so a dumped and a captured row stage the same value. Aliased apart, so ORDER
        BY a key column still sorts by its own type."""
        out = []
        for i, c in enumerate(schema.columns):
            bits = _BIT.fullmatch(c.source_type.lower())
            out.append(f"LPAD(BIN({self.quote(c.name)}), {int(bits.group(1))}, '0') AS `_dblog_bit_{i}`" if bits
                       else self.quote(c.name))
        return ", ".join(out)

    def native_column(self, quoted: str, column: Column) -> str | None:
        """DECIMAL (and BIGINT UNSIGNED, staged as DECIMAL(20,0)) as its text, parsed by Arrow at
        its scale (connectorx rounds past 10 decimals); TIMESTAMP as its stored instant in
        microseconds, whatever the session's zone (0 is the zero date, which drivers give as NULL)."""
        kind = re.split(r"[ (]", column.source_type.lower(), maxsplit=1)[0]
        if pa.types.is_decimal(column.arrow_type):
            return f"CAST({quoted} AS CHAR)"
        if kind == "timestamp":
            return (f"CASE WHEN UNIX_TIMESTAMP({quoted}) = 0 THEN NULL "
                    f"ELSE CAST(UNIX_TIMESTAMP({quoted}) * 1000000 AS SIGNED) END")
        return quoted if kind in _NATIVE_AS_IS else None


def arrow_type(data_type: str, column_type: str, precision, scale) -> pa.DataType:
    unsigned = "unsigned" in column_type
    if data_type in _INTS:
        return pa.int64()
    if data_type == "bigint":
        return pa.decimal128(20, 0) if unsigned else pa.int64()
    if data_type == "decimal":
        return decimal_type(precision, scale)
    if data_type in ("float", "double", "real"):
        return pa.float64()
    if data_type in _BINARY:
        return pa.binary()
    if data_type == "date":
        return pa.date32()
    if data_type == "datetime":
        return pa.timestamp("us")
    if data_type == "timestamp":
        return pa.timestamp("us", tz="UTC")
    return pa.string()


def _default(default: str | None, generated: str | None) -> str | None:
    # MariaDB spells a NULL default as the text NULL (MySQL as SQL NULL).
    if generated:
        return f"generated: {generated}"
    return None if default is None or default.upper() == "NULL" else default


class MySQLSource(Source):
    kind = "mysql"
    dialect = MySQLDialect()

    def __init__(self, name: str, host: str, port: int, user: str, password: str, database: str,
                 server_id: int | None = None):
        super().__init__(name)
        self.settings: dict[str, Any] = dict(host=host, port=port, user=user, passwd=password)
        self.database = self.namespace = database
        self.server_id = server_id or random.randint(10_000, 2**31 - 1)

    # -- plain SQL ------------------------------------------------------------------------------
    def connect(self) -> MySQLdb.Connection:
        """mysqlclient (C): the same Python values as PyMySQL for every column type, read ~3.5x
        faster, which is most of a dump's time on this source."""
        try:
            conn = MySQLdb.connect(host=self.settings["host"], port=self.settings["port"],
                                   user=self.settings["user"], password=self.settings["passwd"],
                                   autocommit=True, charset="utf8mb4", connect_timeout=10)
        except MySQLdb.OperationalError as exc:
            error = SourceUnavailable if exc.args and exc.args[0] in _GONE else SourceError
            raise error(f"{self.name}: cannot connect to MySQL at {self.settings['host']}:"
                        f"{self.settings['port']} as {self.settings['user']}: {exc.args[-1]}. "
                        "Check the connection (host, port, user, password) and that the server runs.") from exc
        with conn.cursor() as cur:
            # TIMESTAMP values in UTC, as the binlog decoder returns them; one-statement READ COMMITTED reads.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return conn

    # The binlog reader's driver (PyMySQL) raises its own classes for the same failures.
    _disconnects = (MySQLdb.OperationalError, MySQLdb.InterfaceError, pymysql.err.OperationalError,
                    pymysql.err.InterfaceError)

    def _lost_connection(self, exc: BaseException) -> bool:
        return isinstance(exc, (MySQLdb.InterfaceError, pymysql.err.InterfaceError)) or bool(
            exc.args and exc.args[0] in _GONE)

    def _streaming_cursor(self, conn):
        return conn.cursor(MySQLdb.cursors.SSCursor)   # rows as fetched (mysql_use_result), not all at once

    def _usable(self, conn) -> bool:
        try:
            conn.ping()  # fails on a connection the server dropped: _run then opens a new one
            return True
        except MySQLdb.Error:
            return False

    def _native_reads(self) -> NativeReads:
        if self._native is None:
            self._native = MySQLNative(self.settings["host"], self.settings["port"], self.settings["user"],
                                       self.settings["passwd"], self.database)
        return self._native

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- catalog ---------------------------------------------------------------------------------
    @property
    def user(self) -> str:
        return self.settings["user"]

    def _catalog_columns(self, schema_name: str, name: str) -> list[Column]:
        cols = self._run(
            "SELECT column_name, data_type, column_type, numeric_precision, numeric_scale, is_nullable, "
            "column_default, generation_expression FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position", [schema_name, name])
        return [Column(c[0], c[2], arrow_type(c[1].lower(), c[2].lower(), c[3], c[4]), c[5] == "YES",
                       _default(c[6], c[7])) for c in cols]

    def _catalog_key(self, schema_name: str, name: str) -> list[str]:
        return [r[0] for r in self._run(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
            "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            [schema_name, name])]

    def _catalog_unique_keys(self, schema_name: str, name: str) -> list[tuple[str, list[str]]]:
        rows = self._run(
            "SELECT s.index_name, s.column_name, c.is_nullable FROM information_schema.statistics s "
            "JOIN information_schema.columns c ON c.table_schema = s.table_schema AND c.table_name = s.table_name "
            "AND c.column_name = s.column_name WHERE s.table_schema = %s AND s.table_name = %s AND s.non_unique = 0 "
            "AND s.index_name <> 'PRIMARY' ORDER BY s.index_name, s.seq_in_index", [schema_name, name])
        return unique_keys(rows)

    def estimate_rows(self, schema) -> int | None:
        # InnoDB's TABLE_ROWS is its sampled statistic: off by some percent, and read without a scan.
        database, _, name = schema.name.partition(".")
        rows = self._run("SELECT table_rows FROM information_schema.tables WHERE table_schema = %s "
                         "AND table_name = %s", [database, name])
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    # -- set-up ---------------------------------------------------------------------------------
    def preflight(self, create: bool = True, first_use: bool = True) -> list[str]:
        (log_bin, fmt, image, metadata), = self._run(
            "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
        compressed = [name for name, value in self._run(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin_compress', 'binlog_transaction_compression')")
            if str(value).upper() in ("ON", "1")]
        fixes = [f"{name} is ON, and the binlog reader cannot decode compressed events: {_COMPRESSION_FIX}"
                 for name in compressed]
        if not int(log_bin):
            fixes.append("the binary log is off: start the server with --log-bin")
        if fmt != "ROW":
            fixes.append(f"binlog_format is {fmt}: set binlog_format=ROW")
        if image != "FULL":
            fixes.append(f"binlog_row_image is {image}: set binlog_row_image=FULL")
        if metadata != "FULL":
            fixes.append(f"binlog_row_metadata is {metadata}: set binlog_row_metadata=FULL")
        if fixes:
            raise SourceError(f"{self.name}: the binlog cannot feed change capture: " + "; ".join(fixes) +
                              " (server options or SET GLOBAL, then restart the capture).")
        gaps = []
        try:
            self._run("SHOW BINARY LOGS")
        except MySQLdb.OperationalError as exc:
            if self._lost_connection(exc):
                raise
            gaps.append((f"it may not read the binlog ({exc.args[-1]})", self._sql_replication()))
        (readable,), = self._run("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s",
                                 [self.database])
        if not readable:  # a database is listed to users with some privilege on it
            gaps.append((f"it may not read database {self.database} (or there is none)", self._sql_read()))
        notes: list[str] = []
        gaps += self._watermark_gaps(create, notes)
        if gaps:
            raise self.needs_administrator(gaps, "as root (or another user who may grant these)")
        return notes

    # The administrator's statements, one home for each: the printed set-up and the errors use them.
    # The watermark table: `dblog setup` creates it where the capture user may, else an administrator.
    WATERMARK_DDL = (f"CREATE TABLE IF NOT EXISTS `{WATERMARK_SCHEMA}`.`watermarks` (id VARCHAR(64) PRIMARY KEY, "
                     "value CHAR(36) NOT NULL, written_at DATETIME(6) NOT NULL) ENGINE=InnoDB")

    def setup_sql(self) -> list[str]:
        try:
            account, server = self._account(), self._run("SELECT VERSION()")[0][0]
        except (SourceError, MySQLdb.MySQLError):
            account, server = self._literal(self.user) + "@'%'", "not reachable as this user yet"
        return [f"-- {self.name}: capture user {account}, database {self.database} ({server}).",
                "-- 0. Server options (then restart): log_bin, binlog_format=ROW, binlog_row_image=FULL, "
                "binlog_row_metadata=FULL.",
                "-- 1. An administrator runs:",
                f"-- (if the user does not exist yet: CREATE USER {account} IDENTIFIED BY '<password>';)",
                *self._sql_replication(account), *self._sql_read(account), *self._sql_watermark_table(account),
                f"-- 2. Then `dblog setup` (as {self.user}) checks the binlog settings and these privileges."]

    @staticmethod
    def _literal(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"

    def _account(self) -> str:
        """The capture user as the server matched it ('dblog'@'%'), for GRANT statements."""
        user, _, host = self._run("SELECT CURRENT_USER()")[0][0].rpartition("@")
        return f"{self._literal(user)}@{self._literal(host)}"

    def _sql_replication(self, account: str | None = None) -> list[str]:
        # MariaDB 10.5+ needs BINLOG MONITOR for SHOW BINARY LOGS / MASTER STATUS; MySQL calls it REPLICATION CLIENT.
        return [f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {account or self._account()};  "
                "-- MySQL: REPLICATION SLAVE, REPLICATION CLIENT"]

    def _sql_read(self, account: str | None = None) -> list[str]:
        return [f"GRANT SELECT ON {self.dialect.quote(self.database)}.* TO {account or self._account()};"]

    def _sql_watermark_table(self, account: str | None = None) -> list[str]:
        return [f"CREATE DATABASE IF NOT EXISTS `{WATERMARK_SCHEMA}`;", f"{self.WATERMARK_DDL};",
                *self._sql_watermark_grants(account)]

    def _sql_watermark_grants(self, account: str | None = None) -> list[str]:
        return [f"GRANT SELECT, INSERT, UPDATE ON `{WATERMARK_SCHEMA}`.`watermarks` TO {account or self._account()};"]

    def _watermark_gaps(self, create: bool, notes: list[str]) -> list[tuple[str, list[str]]]:
        table = f"`{WATERMARK_SCHEMA}`.`watermarks`"
        (exists,), = self._run("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s "
                               "AND table_name = 'watermarks'", [WATERMARK_SCHEMA])
        if not exists and create:
            try:
                self._run(f"CREATE DATABASE IF NOT EXISTS `{WATERMARK_SCHEMA}`", fetch=False)
                self._run(self.WATERMARK_DDL, fetch=False)
                notes.append(f"created {WATERMARK_TABLE}")
                return []
            except MySQLdb.MySQLError as exc:
                if self._lost_connection(exc):
                    raise
        if not exists:  # (information_schema lists only tables the user has some privilege on)
            return [(f"it cannot see a watermark table {WATERMARK_TABLE} (there is none, or it has no privilege "
                     "on it)", self._sql_watermark_table())]
        try:
            # Privilege probes that match no row, so they write nothing (not even to the binlog).
            self._run(f"INSERT INTO {table} (id, value, written_at) SELECT id, value, written_at FROM {table} "
                      "WHERE FALSE", fetch=False)
            self._run(f"UPDATE {table} SET value = value WHERE FALSE", fetch=False)
        except MySQLdb.MySQLError as exc:
            if self._lost_connection(exc):
                raise
            return [(f"it may not write the watermark table {WATERMARK_TABLE} ({exc.args[-1]})",
                     self._sql_watermark_grants())]
        return []

    def write_watermark(self, slot: str, value: str) -> int:
        # Its affected rows (1 inserted, 2 updated) are the handler writes it counts.
        return self._run(
            f"INSERT INTO `{WATERMARK_SCHEMA}`.`watermarks` (id, value, written_at) VALUES (%s, %s, NOW(6)) "
            "ON DUPLICATE KEY UPDATE value = VALUES(value), written_at = VALUES(written_at)",
            [self.watermark_id(slot), value], fetch=False)

    def head(self) -> dict:
        row = self._run("SHOW MASTER STATUS")[0]
        return {"log_file": row[0], "log_pos": int(row[1]),
                "position": mysql_position(row[0], int(row[1]), 0).encode()}

    def rows_written(self) -> int | None:
        # The server's handler counters: every engine's row writes, in memory and current at once;
        # any user may read them. MariaDB counts internal temporary tables apart (Handler_tmp_*);
        # MySQL counts them here too, which only keeps windows at their size more often.
        rows = self._run("SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write', 'Handler_update', "
                         "'Handler_delete')")
        return sum(int(value) for _, value in rows) if len(rows) == 3 else None

    def start_point(self) -> dict:
        head = self.head()
        return {"log_file": head["log_file"], "log_pos": head["log_pos"]}

    def acknowledge(self, resume: dict) -> None:
        pass  # binlog retention is the server's (expire_logs_days); the checkpoint lives in ZooKeeper

    # -- change stream --------------------------------------------------------------------------
    def stream(self, resume: dict | None, idle_timeout: float = 1.0) -> Iterator[Transaction | None]:
        reader = self._open_binlog(resume or self.head(), idle_timeout)
        pending: list[ChangeEvent] = []
        needs: list[SourceNote] = []
        captured = self.tables()
        piece_rows, opened = settings().capture.piece_rows, False   # opened: a piece of it was yielded
        try:
            for ev in reader:
                if isinstance(ev, HeartbeatLogEvent):
                    if not pending and not opened:
                        yield None
                    continue
                if isinstance(ev, (RotateEvent, NotImplementedEvent)):   # nothing to stage, unless unreadable
                    self._refuse_unreadable(ev)
                    continue
                if isinstance(ev, ExecuteLoadQueryEvent):
                    needs.extend(self._statement_writes(reader.log_file, ev, captured))
                    continue
                if isinstance(ev, QueryEvent) and ev.query.strip().upper() != "COMMIT":
                    captured, changed = self._after_ddl(reader.log_file, ev, captured)
                    needs.extend([*changed, *self._statement_writes(reader.log_file, ev, captured)])
                    if needs and not pending and commits_by_itself(strip_sql_comments(ev.query).strip()):
                        # DDL commits by itself (no XID follows): hand the repair over now.
                        yield Transaction([], {"log_file": reader.log_file, "log_pos": ev.packet.log_pos},
                                          dt.datetime.fromtimestamp(ev.timestamp, dt.UTC), needs)
                        needs = []
                    continue
                if isinstance(ev, (XidEvent, QueryEvent)):
                    # non-transactional tables end their group with a COMMIT query instead of an XID
                    yield self._commit(reader.log_file, ev, pending, needs)
                    pending, needs, opened = [], [], False
                    continue
                events, partial = self._row_events(reader.log_file, ev)
                pending.extend(self.own_watermarks(events))
                needs.extend(partial)
                if len(pending) > piece_rows:  # the last event stays for the commit's part (see Transaction)
                    yield self._piece(ev, pending[:-1])
                    pending, opened = pending[-1:], True
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == 1236:
                raise HistoryLost(f"{self.name}: the server cannot serve the binlog from the checkpoint "
                                  f"({exc.args[-1]}). Fix: reset the capture checkpoint and run a full dump.") from exc
            raise
        finally:
            reader.close()

    def _open_binlog(self, start: dict, idle_timeout: float) -> BinLogStreamReader:
        available = {r[0] for r in self._run("SHOW BINARY LOGS")}
        if start["log_file"] not in available:
            raise HistoryLost(f"{self.name}: binlog {start['log_file']} at the capture checkpoint was purged; "
                              "changes since then are lost to capture. Fix: reset the capture checkpoint "
                              "(`dblog capture --reset`) and run a full dump of every table.")
        # is_mariadb=False: with True, log_file/log_pos are ignored (see SETUP-NOTES).
        return BinLogStreamReader(
            connection_settings=self.settings, server_id=self.server_id, resume_stream=True,
            log_file=start["log_file"], log_pos=start["log_pos"], blocking=True,
            only_events=[WriteRowsEvent, UpdateRowsEvent, PartialUpdateRowsEvent, DeleteRowsEvent, XidEvent,
                         RotateEvent, QueryEvent, ExecuteLoadQueryEvent, HeartbeatLogEvent, NotImplementedEvent],
            filter_non_implemented_events=False,   # so a compressed event stops the capture (_refuse_unreadable)
            only_schemas=[self.database, WATERMARK_SCHEMA], is_mariadb=False,
            slave_heartbeat=max(idle_timeout, 0.1), enable_logging=False)

    def _refuse_unreadable(self, ev) -> None:
        """A compressed event (MariaDB's `log_bin_compress`, MySQL's `binlog_transaction_compression`)
        holds rows or DDL the binlog reader cannot decode: it would skip them, silently."""
        if ev.event_type in _COMPRESSED:
            raise UnreadableEvent(
                f"{self.name}: the binlog holds a compressed event ({_COMPRESSED[ev.event_type]}), which the "
                "binlog reader cannot decode, so the capture stopped before skipping its changes. Fix: "
                f"{_COMPRESSION_FIX}, then reset the capture checkpoint (`dblog capture --reset`) and run a full "
                "dump of every table, since the changes in compressed events are not in the staged log.")

    def _after_ddl(self, log_file: str, ev, captured: list[str]) -> tuple[list[str], list[SourceNote]]:
        """The captured tables once the statement `ev` ran, and the repairs its schema changes need:
        DDL may have added, dropped, renamed, re-created or changed tables (see
        dblog.model.schema_changes). Which tables a statement names is read from the statement
        itself: the catalog may already be past later DDL when the capture is behind."""
        query = strip_sql_comments(ev.query).strip()
        now = self.tables()
        default = ev.schema.decode() if isinstance(ev.schema, bytes) else (ev.schema or "")
        ddl = read_ddl(query, default, self.database, {*captured, *now})
        if ddl is None:
            return captured, []
        position = encode_position(binlog_file_index(log_file), ev.packet.log_pos, 0)
        needs: list[SourceNote] = []
        if ddl.replaced:   # what it dropped or replaced is another table from now on
            for t in ddl.replaced:
                self._schemas.pop(t, None)
                self._keyless.discard(t)
            fresh = sorted({*(ddl.created & set(now)), *(t for t in now if t not in captured)})
            gone = ddl.replaced
        else:
            renamed = ddl.renamed & set(now)
            changed = sorted(ddl.named & set(captured) & set(now) - renamed)
            if ddl.partition_write:   # rows gone or swapped in, without row events
                needs += [RepairNeed(t, f"partition DDL (no row events): {query[:120]}", position) for t in changed]
            needs += [n for t in changed for n in self.schema_changed(t, position, readded=ddl.readded, ddl=True,
                                                                   renamed=ddl.renamed_columns)]
            fresh = sorted({*(t for t in now if t not in captured), *renamed})
            gone = ddl.named - set(now)
        needs += self.new_tables(fresh, position, "new in the captured database (created, re-created or renamed)")
        for t in sorted(gone - set(fresh)):
            log.info("%s: %s is gone from the source (dropped or renamed away); its warehouse table stays as last "
                     "merged (`dblog warehouse drop` removes it)", self.name, t)
        return now, needs

    @staticmethod
    def _commit(log_file: str, ev, pending: list[ChangeEvent], needs: list[SourceNote]) -> Transaction:
        """The transaction `ev` (an XID, or a COMMIT query) ends: its events get its commit time and id."""
        ts = dt.datetime.fromtimestamp(ev.timestamp, dt.UTC)
        txid = str(getattr(ev, "xid", "")) or None
        for e in pending:
            e.commit_ts, e.txid = ts, txid
        return Transaction(pending, {"log_file": log_file, "log_pos": ev.packet.log_pos}, ts, needs)

    @staticmethod
    def _piece(ev, pending: list[ChangeEvent]) -> Transaction:
        """Events read before their commit: the binlog names the transaction (its XID) and its
        commit time only at its end, so these carry the time their statement ran and no id."""
        ts = dt.datetime.fromtimestamp(ev.timestamp, dt.UTC)
        for e in pending:
            e.commit_ts = ts
        return Transaction.piece(pending)

    def _row_events(self, log_file: str, ev) -> tuple[list[ChangeEvent], list[SourceNote]]:
        table = f"{ev.schema}.{ev.table}"
        names = [c.name for c in ev.columns or ()]
        file_index, log_pos = binlog_file_index(log_file), ev.packet.log_pos
        # First sight of the table in this process: the catalog may be past DDL the log holds
        # further on (the capture is behind), so compare with what the staged log has now.
        changed = self.schema_changed(table, encode_position(file_index, log_pos, 0)) \
            if table not in self._schemas and table not in self._keyless else []
        schema = self.schema_for_event(table, names)
        if schema is None:
            return [], changed
        first = absent(names, ev.columns_present_bitmap)
        second = absent(names, getattr(ev, "columns_present_bitmap2", None))
        if isinstance(ev, PartialUpdateRowsEvent):
            # MySQL 8 binlog_row_value_options=PARTIAL_JSON: a JSON column may hold a diff, not a value.
            second |= {c.name for c in ev.columns if c.type == FIELD_TYPE.JSON}
        sets = {c.name: c.set_values for c in ev.columns or () if c.type == FIELD_TYPE.SET and c.set_values}
        out: list[ChangeEvent] = []
        partial: list[ChangeEvent] = []
        misread: list[ChangeEvent] = []

        # Only a TIME column can be misread; most tables have none (one check per event, not per value).
        times = any(c.type in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2) for c in ev.columns or ())

        def image(values_key: str, sources_key: str, row: dict) -> tuple[dict | None, set[str]]:
            values = set_texts(row[values_key], row.get(sources_key), sets)
            return without_misread(values, table, schema.key) if times else (values, set())

        rows = fast_rows(ev)
        for i, row in enumerate(ev.rows if rows is None else rows):
            pos = encode_position(file_index, log_pos, i)
            if isinstance(ev, WriteRowsEvent):
                after, bad = image("values", "none_sources", row)
                event = row_event(self.name, schema, Op.INSERT, pos, None, after, set(), first | bad)
            elif isinstance(ev, UpdateRowsEvent):
                before, bad_before = image("before_values", "before_none_sources", row)
                after, bad = image("after_values", "after_none_sources", row)
                event = row_event(self.name, schema, Op.UPDATE, pos, before, after, first | bad_before, second | bad)
            else:
                before, bad_before = image("values", "none_sources", row)
                bad = set()
                event = row_event(self.name, schema, Op.DELETE, pos, before, None, first | bad_before, set())
            out.append(event)
            if bad:
                misread.append(event)
            elif event.unchanged and event.op != Op.DELETE:
                partial.append(event)
        # The merge fills what it can from the row's previous version; a repair dump re-reads the
        # rows, so no value rests on a guess.
        needs = changed
        if partial:
            needs.append(RepairNeed(table, f"partial row image (binlog_row_image MINIMAL or NOBLOB in the writing "
                                           f"session): {', '.join(partial[0].unchanged)} not in the event",
                                    partial[0].position, tuple(dict.fromkeys(e.key for e in partial))))
        if misread:
            needs.append(RepairNeed(table, "a negative TIME with fractional seconds, which the binlog decoder "
                                           f"misreads by up to a second: {', '.join(misread[0].unchanged)}",
                                    misread[0].position, tuple(dict.fromkeys(e.key for e in misread))))
        return out, needs

    def _statement_writes(self, log_file: str, ev, tables: list[str]) -> list[RepairNeed]:
        """Captured tables a statement in the log may have changed: a write logged as SQL text
        (binlog_format STATEMENT or MIXED in the writing session, LOAD DATA, a TRUNCATE) never
        reaches the log as row events."""
        position = encode_position(binlog_file_index(log_file), ev.packet.log_pos, 0)
        names = [t.partition(".")[2] for t in tables]
        if isinstance(ev, ExecuteLoadQueryEvent):  # carries no table name: any captured table
            hits, query = names, "LOAD DATA"
        else:
            query = strip_sql_comments(ev.query).strip()
            default = ev.schema.decode() if isinstance(ev.schema, bytes) else (ev.schema or "")
            hits = statement_writes(query, default, self.database, names)
        reason = f"statement-logged write (binlog_format STATEMENT/MIXED in the writing session): {query[:120]}"
        return [RepairNeed(f"{self.database}.{t}", reason, position) for t in hits]


# Event types the binlog reader does not know and whose content the capture needs.
_COMPRESSED = {40: "a MySQL transaction payload", 165: "a compressed MariaDB query", 166: "compressed MariaDB rows",
               167: "compressed MariaDB rows", 168: "compressed MariaDB rows", 169: "compressed MariaDB rows",
               170: "compressed MariaDB rows", 171: "compressed MariaDB rows"}
_COMPRESSION_FIX = ("turn binlog compression off (MariaDB: SET GLOBAL log_bin_compress=OFF and in the server's "
                    "options; MySQL: binlog_transaction_compression=OFF)")

def absent(names: list[str], bitmap) -> set[str]:
    """Columns a rows event's image leaves out (its columns-present bitmap; FULL images carry all)."""
    if bitmap is None:
        return set()
    return {n for i, n in enumerate(names) if not BitGet(bitmap, i)}


def set_texts(image: dict | None, none_sources: dict | None, sets: dict[str, list[str]]) -> dict | None:
    """SET values as the server's text form, which a chunk read gets: members in definition
    order, the empty set as '' (the binlog decoder gives a Python set, and None for empty)."""
    if not sets or image is None:
        return image
    out = dict(image)
    for name, members in sets.items():
        value = out.get(name)
        if isinstance(value, set):
            out[name] = ",".join(m for m in members if m in value)
        elif value is None and (none_sources or {}).get(name) == "empty set":
            out[name] = ""
    return out


def without_misread(image: dict | None, table: str, key: tuple[str, ...]) -> tuple[dict | None, set[str]]:
    """A row image without its negative TIME values with fractional seconds, and their columns:
    mysql-replication decodes those wrong (-12:34:56.000001 as -12:34:56.999999), so they are
    staged as values the event leaves out and the row is re-read, never staged misread."""
    bad = {c for c, v in (image or {}).items()
           if isinstance(v, dt.timedelta) and v < dt.timedelta(0) and v.microseconds}
    if not bad or image is None:
        return image, set()
    if bad & set(key):
        raise UnreadableEvent(f"a row event of {table} carries a negative TIME with fractional seconds in its "
                              f"primary key ({', '.join(sorted(bad & set(key)))}), which the binlog decoder "
                              "misreads: dblog cannot tell which row changed, so it stopped before staging it. "
                              "Fix: exclude the table from the capture, or use a key without such values.")
    return {**image, **{c: None for c in bad}}, bad


def row_event(source: str, schema, op: str, pos: str, before: dict | None, after: dict | None,
              before_absent: set[str], after_absent: set[str]) -> ChangeEvent:
    """One row of a rows event as a ChangeEvent, from what its images carry. A partial image
    (a session's binlog_row_image MINIMAL / NOBLOB) is never staged as if it were full: the
    columns it leaves out are listed in `unchanged`, a partial before image is not staged, and
    an image without the key stops the capture (UnreadableEvent)."""
    if not before_absent and not after_absent:  # FULL images, the usual case (the capture's hot path)
        key = normalize_key(schema.key_of(after if after is not None else before), schema)
        old_key = None
        if op == Op.UPDATE:
            prior = normalize_key(schema.key_of(before), schema)
            old_key = prior if prior != key else None
        return ChangeEvent(source, schema.name, op, pos, key, after, before=before, old_key=old_key)
    key_cols = set(schema.key)
    columns = schema.column_set
    if after is not None and not key_cols & after_absent:
        key = normalize_key(schema.key_of(after), schema)
    elif before is not None and not key_cols & before_absent:
        # MINIMAL leaves the unchanged key columns out of the after image (all of them, or the
        # ones a composite key update did not set): the before image has them.
        if after is not None:
            after = {**after, **{c: before[c] for c in schema.key if c in after_absent}}
            after_absent = after_absent - key_cols
        key = normalize_key(schema.key_of(after if after is not None else before), schema)
    else:
        raise UnreadableEvent(
            f"{source}: a {Op(op).name.lower()} of {schema.name} "
            f"at position {pos} does not carry the primary key ({', '.join(schema.key)}): a session wrote with a "
            "partial binlog_row_image and dblog cannot tell which row changed, so it stopped before staging it. "
            "Fix: keep binlog_row_image=FULL for every client (it is a session variable: revoke SUPER / BINLOG "
            "ADMIN from applications), then `dblog capture --reset` and a full dump of the table.")
    old_key = None
    if op == Op.UPDATE and not key_cols & before_absent:
        prior = normalize_key(schema.key_of(before), schema)
        old_key = prior if prior != key else None
    if op == Op.DELETE:
        missing = sorted((before_absent & columns) - key_cols)
        return ChangeEvent(source, schema.name, op, pos, key, None, before=before, unchanged=missing)
    missing = sorted((after_absent & columns) - key_cols)
    staged_before = before if before is not None and not before_absent & columns else None
    return ChangeEvent(source, schema.name, op, pos, key, after, before=staged_before, old_key=old_key,
                       unchanged=missing)
