"""MariaDB / MySQL: binlog capture through mysql-replication, chunks through PyMySQL."""
from __future__ import annotations

import datetime as dt
import random
from typing import Iterator

import pyarrow as pa
import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from ..events import DELETE, INSERT, UPDATE, ChangeEvent
from ..positions import binlog_file_index, mysql_position
from ..positions import encode as encode_position
from ..schema import Column, decimal_type, normalize_key
from .base import (WATERMARK_SCHEMA, WATERMARK_TABLE, Dialect, HistoryLost, Source, SourceError,
                   SourceUnavailable, Transaction)

_INTS = {"tinyint", "smallint", "mediumint", "int", "integer", "year"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


# Can't connect, server gone, lost connection, server shutdown, connection killed.
_GONE = {2003, 2006, 2013, 1053, 1927}


class MySQLDialect(Dialect):
    quote_char = "`"


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


class MySQLSource(Source):
    kind = "mysql"
    dialect = MySQLDialect()

    def __init__(self, name: str, host: str, port: int, user: str, password: str, database: str,
                 server_id: int | None = None):
        super().__init__(name)
        self.settings = dict(host=host, port=port, user=user, passwd=password)
        self.database = self.namespace = database
        self.server_id = server_id or random.randint(10_000, 2**31 - 1)

    # -- plain SQL ------------------------------------------------------------------------------
    def connect(self) -> pymysql.Connection:
        try:
            conn = pymysql.connect(host=self.settings["host"], port=self.settings["port"],
                                   user=self.settings["user"], password=self.settings["passwd"],
                                   autocommit=True, charset="utf8mb4", connect_timeout=10)
        except pymysql.err.OperationalError as exc:
            error = SourceUnavailable if exc.args and exc.args[0] in _GONE else SourceError
            raise error(f"{self.name}: cannot connect to MySQL at {self.settings['host']}:"
                        f"{self.settings['port']} as {self.settings['user']}: {exc.args[-1]}. "
                        "Check the connection (host, port, user, password) and that the server runs.") from exc
        with conn.cursor() as cur:
            # TIMESTAMP values in UTC, as the binlog decoder returns them; one-statement READ COMMITTED reads.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return conn

    _disconnects = (pymysql.err.OperationalError, pymysql.err.InterfaceError)

    def _lost_connection(self, exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.InterfaceError) or bool(exc.args and exc.args[0] in _GONE)

    def _usable(self, conn) -> bool:
        try:
            conn.ping()  # reconnects a connection the server dropped
            return True
        except pymysql.err.Error:  # ("Already closed" after a failed reconnect)
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- catalog ---------------------------------------------------------------------------------
    @property
    def user(self) -> str:
        return self.settings["user"]

    def _catalog_columns(self, schema_name: str, name: str) -> list[Column]:
        cols = self._run(
            "SELECT column_name, data_type, column_type, numeric_precision, numeric_scale "
            "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "ORDER BY ordinal_position", [schema_name, name])
        return [Column(c[0], c[2], arrow_type(c[1].lower(), c[2].lower(), c[3], c[4])) for c in cols]

    def _catalog_key(self, schema_name: str, name: str) -> list[str]:
        return [r[0] for r in self._run(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
            "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            [schema_name, name])]

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
        fixes = []
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
        try:
            self._run("SHOW BINARY LOGS")
        except pymysql.err.OperationalError as exc:
            raise SourceError(f"{self.name}: user {self.settings['user']} may not read the binlog ({exc.args[-1]}). "
                              "Fix: GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO the capture user.") from exc
        notes = []
        if create:
            notes += self._ensure_watermark_table()
        return notes

    def _ensure_watermark_table(self) -> list[str]:
        try:
            self._run(f"CREATE DATABASE IF NOT EXISTS `{WATERMARK_SCHEMA}`", fetch=False)
            self._run(
                f"CREATE TABLE IF NOT EXISTS `{WATERMARK_SCHEMA}`.`watermarks` (id VARCHAR(64) PRIMARY KEY, "
                "value CHAR(36) NOT NULL, written_at DATETIME(6) NOT NULL) ENGINE=InnoDB", fetch=False)
        except pymysql.err.OperationalError as exc:
            raise SourceError(f"{self.name}: cannot create the watermark table {WATERMARK_TABLE} ({exc.args[-1]}). "
                              f"Fix: CREATE DATABASE {WATERMARK_SCHEMA}; GRANT ALL ON {WATERMARK_SCHEMA}.* "
                              "TO the capture user.") from exc
        return []

    def write_watermark(self, slot: str, value: str) -> None:
        self._run(
            f"INSERT INTO `{WATERMARK_SCHEMA}`.`watermarks` (id, value, written_at) VALUES (%s, %s, NOW(6)) "
            "ON DUPLICATE KEY UPDATE value = VALUES(value), written_at = VALUES(written_at)",
            [slot, value], fetch=False)

    def head(self) -> dict:
        row = self._run("SHOW MASTER STATUS")[0]
        return {"log_file": row[0], "log_pos": int(row[1]),
                "position": mysql_position(row[0], int(row[1]), 0).encode()}

    def start_point(self) -> dict:
        head = self.head()
        return {"log_file": head["log_file"], "log_pos": head["log_pos"]}

    def acknowledge(self, resume: dict) -> None:
        pass  # binlog retention is the server's (expire_logs_days); the checkpoint lives in ZooKeeper

    # -- change stream --------------------------------------------------------------------------
    def stream(self, resume: dict | None, idle_timeout: float = 1.0) -> Iterator[Transaction | None]:
        start = resume or self.head()
        available = {r[0] for r in self._run("SHOW BINARY LOGS")}
        if start["log_file"] not in available:
            raise HistoryLost(f"{self.name}: binlog {start['log_file']} at the capture checkpoint was purged; "
                              "changes since then are lost to capture. Fix: reset the capture checkpoint "
                              "(`dblog capture --reset`) and run a full dump of every table.")
        # is_mariadb=False: with True, log_file/log_pos are ignored (see SETUP-NOTES).
        reader = BinLogStreamReader(
            connection_settings=self.settings, server_id=self.server_id, resume_stream=True,
            log_file=start["log_file"], log_pos=start["log_pos"], blocking=True,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, RotateEvent,
                         QueryEvent, HeartbeatLogEvent],
            only_schemas=[self.database, WATERMARK_SCHEMA], is_mariadb=False,
            slave_heartbeat=max(idle_timeout, 0.1), enable_logging=False)
        pending: list[ChangeEvent] = []
        try:
            for ev in reader:
                if isinstance(ev, HeartbeatLogEvent):
                    if not pending:
                        yield None
                    continue
                if isinstance(ev, RotateEvent):
                    continue
                if isinstance(ev, QueryEvent):
                    if ev.query.strip().upper().startswith(("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE")):
                        self._schemas.clear()  # DDL: re-read the catalog on the next event
                    if ev.query.strip().upper() != "COMMIT":
                        continue
                    # non-transactional tables end their group with a COMMIT query instead of an XID
                if isinstance(ev, (XidEvent, QueryEvent)):
                    ts = dt.datetime.fromtimestamp(ev.timestamp, dt.timezone.utc)
                    for e in pending:
                        e.commit_ts = ts
                        e.txid = str(getattr(ev, "xid", "")) or None
                    yield Transaction(pending, {"log_file": reader.log_file, "log_pos": ev.packet.log_pos}, ts)
                    pending = []
                    continue
                pending.extend(self._row_events(reader.log_file, ev))
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == 1236:
                raise HistoryLost(f"{self.name}: the server cannot serve the binlog from the checkpoint "
                                  f"({exc.args[-1]}). Fix: reset the capture checkpoint and run a full dump.") from exc
            raise
        finally:
            reader.close()

    def _row_events(self, log_file: str, ev) -> list[ChangeEvent]:
        table = f"{ev.schema}.{ev.table}"
        schema = self.schema_for_event(table, [c.name for c in ev.columns or ()])
        out = []
        file_index, log_pos = binlog_file_index(log_file), ev.packet.log_pos
        for i, row in enumerate(ev.rows):
            pos = encode_position(file_index, log_pos, i)
            if isinstance(ev, WriteRowsEvent):
                after, before, op = row["values"], None, INSERT
            elif isinstance(ev, UpdateRowsEvent):
                after, before, op = row["after_values"], row["before_values"], UPDATE
            else:
                after, before, op = None, row["values"], DELETE
            image = after if after is not None else before
            key = normalize_key(schema.key_of(image), schema)
            old_key = None
            if before is not None and after is not None:
                prior = normalize_key(schema.key_of(before), schema)
                old_key = prior if prior != key else None
            out.append(ChangeEvent(self.name, table, op, pos, key, after, before=before, old_key=old_key))
        return out
