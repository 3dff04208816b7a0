"""Chunk reads decoded straight into Arrow by a native driver: connectorx (Rust) for MySQL and
MariaDB, ADBC's libpq driver (C, binary COPY format) for PostgreSQL. A dump's rows then never
become Python objects, which is most of a Python-decoded dump's time (Performance).

The Python drivers' values stay the contract (they are what the capture's values are held to):
a column is read natively only where the native value is that value, which
`tests/engine/test_native_reads.py` checks type by type. DECIMAL travels as its text and Arrow
parses it at the declared scale (connectorx would round past 10 decimals). A MySQL TIMESTAMP
travels as its stored instant in microseconds, whatever the session's zone. A table with any
other column (MySQL BIT, ENUM, SET, JSON, TIME, FLOAT; PostgreSQL types staged as their text,
REAL) is read by the Python driver, whole. A value the
native driver cannot give exactly (a zero DATETIME, an infinite PostgreSQL timestamp) fails the
chunk's native read: that chunk is then read by the Python driver (`Source.select_chunk_table`).
"""
from __future__ import annotations

import abc
import re
from typing import Any, Callable
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from ..schema import Column, TableSchema
from ..staged import arrow_schema

# What Python's datetime holds (year 1 to 9999), the range the Python drivers give.
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_DAYS = (-719_162, 2_932_896)


class NativeUnfit(ValueError):
    """The native read of a chunk cannot give the Python driver's values: read it with that."""


class NativeReads(abc.ABC):
    """A source's native chunk reader; it holds at most one connection (`close`)."""

    def select_list(self, schema: TableSchema, quote_name: Callable[[str], str]) -> str | None:
        """The chunk SELECT's columns in schema order, or None if a column is not read exactly."""
        out = []
        for c in schema.columns:
            expr = self.expression(c, quote_name(c.name))
            if expr is None:
                return None
            out.append(expr)
        return ", ".join(out)

    @abc.abstractmethod
    def expression(self, column: Column, quoted: str) -> str | None:
        """How the SELECT reads `column` natively, or None where the native value would differ."""

    @abc.abstractmethod
    def fetch(self, sql: str) -> pa.Table:
        """Run one SELECT (its values already in it) and return its result."""

    def read(self, schema: TableSchema, sql: str) -> pa.Table:
        """The chunk's rows in the staged column types."""
        got = self.fetch(sql)
        target = arrow_schema(schema, [])
        arrays = []
        for field, values in zip(target, got.columns):
            _check_range(field, values)
            try:
                arrays.append(values.cast(field.type))  # safe casts: one that would lose a digit raises
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise NativeUnfit(f"column {field.name}: {exc}") from exc
        return pa.Table.from_arrays(arrays, schema=target)

    def close(self) -> None:  # noqa: B027 - a reader without a connection has nothing to close
        """Let go of the connection, if the reader keeps one."""


def _check_range(field: pa.Field, values: pa.ChunkedArray) -> None:
    if not (pa.types.is_timestamp(values.type) or pa.types.is_date32(values.type)) or values.null_count == len(values):
        return
    raw = values.cast(pa.int64() if pa.types.is_timestamp(values.type) else pa.int32())
    low, high = _MICROS if pa.types.is_timestamp(values.type) else _DAYS
    extremes = pc.min_max(raw)
    if extremes["min"].as_py() < low or extremes["max"].as_py() > high:
        raise NativeUnfit(f"column {field.name} holds a value outside years 1-9999 (an infinite or zero date)")


_MYSQL_PLAIN = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year", "double", "date", "datetime",
                "char", "varchar", "tinytext", "text", "mediumtext", "longtext",
                "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


class MySQLNative(NativeReads):
    """connectorx, a connection per chunk (its pools are per call): a few milliseconds a chunk."""

    def __init__(self, host: str, port: int, user: str, password: str, database: str):
        self.url = f"mysql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(database, safe='')}"

    def expression(self, column: Column, quoted: str) -> str | None:
        if pa.types.is_decimal(column.arrow_type):  # DECIMAL, and BIGINT UNSIGNED staged as DECIMAL(20,0)
            return f"CAST({quoted} AS CHAR) AS {quoted}"
        kind = re.split(r"[ (]", column.source_type.lower(), maxsplit=1)[0]
        if kind == "timestamp":  # the instant as stored; 0 is the zero date, which drivers give as NULL
            return (f"CASE WHEN UNIX_TIMESTAMP({quoted}) = 0 THEN NULL "
                    f"ELSE CAST(UNIX_TIMESTAMP({quoted}) * 1000000 AS SIGNED) END AS {quoted}")
        return quoted if kind in _MYSQL_PLAIN else None

    def fetch(self, sql: str) -> pa.Table:
        import connectorx  # the dump's reads only: the capture and Airflow's parsing never load it

        try:
            return connectorx.read_sql(self.url, sql, return_type="arrow")
        except BaseException as exc:  # a value it cannot convert is a Rust panic, not an Exception
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise NativeUnfit(str(exc).splitlines()[0][:300]) from exc


_POSTGRES_PLAIN = {"smallint", "integer", "bigint", "double precision", "boolean", "bytea", "date",
                   "timestamp without time zone", "timestamp with time zone",
                   "text", "character varying", "character"}


class PostgresNative(NativeReads):
    """ADBC's PostgreSQL driver on one autocommit connection (no transaction left open between
    chunks, so no lock outlives its SELECT), opened at the first chunk."""

    def __init__(self, host: str, port: int, user: str, password: str, dbname: str):
        self.url = f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(dbname, safe='')}"
        self._conn: Any = None

    def expression(self, column: Column, quoted: str) -> str | None:
        if pa.types.is_decimal(column.arrow_type):
            return f"{quoted}::text AS {quoted}"
        return quoted if column.source_type.lower() in _POSTGRES_PLAIN else None

    def fetch(self, sql: str) -> pa.Table:
        import adbc_driver_postgresql.dbapi as adbc

        try:
            if self._conn is None:
                self._conn = adbc.connect(self.url, autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetch_arrow_table()
        except adbc.Error as exc:
            self.close()
            raise NativeUnfit(str(exc).splitlines()[0][:300]) from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
