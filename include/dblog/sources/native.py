"""Chunk reads decoded straight into Arrow by a native driver: connectorx (Rust) for MySQL and
MariaDB, ADBC's libpq driver (C, binary COPY format) for PostgreSQL. A dump's rows then never
become Python objects, which is most of a Python-decoded dump's time (Performance).

The Python drivers' values stay the contract (they are what the capture's values are held to):
each dialect's `native_select_list` names the column types a native read gives exactly and how
(`tests/engine/test_native_reads.py` checks them type by type); a table with any other column is
read by the Python driver, whole. Here, a native column whose Arrow type is not the kind its
staged type expects, or a value the Python drivers cannot hold (outside years 1-9999: a zero or
infinite date), or any failure of the native read, fails the chunk's native read: that chunk is
then read by the Python driver (`Source.select_chunk_table`).
"""
from __future__ import annotations

import abc
import contextlib
from typing import Any
from urllib.parse import quote, urlencode

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DBLogError
from ..model.schema import TableSchema
from ..model.staged_format import arrow_schema

# What Python's datetime holds (year 1 to 9999), the range the Python drivers give.
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_DAYS = (-719_162, 2_932_896)


class NativeUnfit(DBLogError, ValueError):
    """The native read of a chunk cannot give the Python driver's values: read it with that."""


class NativeReads(abc.ABC):
    """A source's native chunk reader; it holds at most one connection (`close`)."""

    @abc.abstractmethod
    def fetch(self, sql: str) -> pa.Table:
        """Run one SELECT (its values already in it) and return its result; NativeUnfit if it fails."""

    def read(self, schema: TableSchema, sql: str) -> pa.Table:
        """The chunk's rows in the staged column types (the SELECT's columns in schema order)."""
        got = self.fetch(sql)
        target = arrow_schema(schema, [])
        arrays = []
        for field, values in zip(target, got.columns):
            if not _fits(values.type, field.type):  # a driver version that maps a type otherwise
                raise NativeUnfit(f"column {field.name} came as {values.type}, not as {field.type} is read")
            _check_range(field, values)
            try:
                arrays.append(values.cast(field.type))  # safe casts: one that would lose a digit raises
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise NativeUnfit(f"column {field.name}: {exc}") from exc
        return pa.Table.from_arrays(arrays, schema=target)

    def close(self) -> None:  # noqa: B027 - a reader without a connection has nothing to close
        """Let go of the connection, if the reader keeps one."""


def _fits(native: pa.DataType, staged: pa.DataType) -> bool:
    """Whether a native column of type `native` is the kind of value `staged` is cast from."""
    t = pa.types
    if t.is_integer(staged):
        return t.is_integer(native)
    if t.is_decimal(staged):
        return t.is_string(native) or t.is_large_string(native)   # the value's text
    if t.is_timestamp(staged):
        return (t.is_timestamp(native) and native.tz == staged.tz) or t.is_int64(native)  # or microseconds
    if t.is_string(staged):
        return t.is_string(native) or t.is_large_string(native)
    if t.is_binary(staged):
        return t.is_binary(native) or t.is_large_binary(native)
    return native == staged  # float64, date32, bool


def _check_range(field: pa.Field, values: pa.ChunkedArray) -> None:
    """Python's datetime cannot hold what a native driver gives for an infinite or zero date."""
    if not (pa.types.is_timestamp(values.type) or pa.types.is_date32(values.type)) or values.null_count == len(values):
        return
    raw = values.cast(pa.int64() if pa.types.is_timestamp(values.type) else pa.int32())
    low, high = _MICROS if pa.types.is_timestamp(values.type) else _DAYS
    extremes = pc.min_max(raw)
    if extremes["min"].as_py() < low or extremes["max"].as_py() > high:
        raise NativeUnfit(f"column {field.name} holds a value outside years 1-9999 (an infinite or zero date)")


def _url(scheme: str, host: str, port: int, user: str, password: str, database: str, **params: str) -> str:
    query = f"?{urlencode(params)}" if params else ""
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(database, safe='')}{query}"


class MySQLNative(NativeReads):
    """connectorx, a connection per chunk (its pools are per call): a few milliseconds a chunk.
    Its pool waits 30 s for a server that refuses connections: the caller checks its own
    connection first (`Source._interpolate`)."""

    def __init__(self, host: str, port: int, user: str, password: str, database: str):
        self.url = _url("mysql", host, port, user, password, database)

    def fetch(self, sql: str) -> pa.Table:
        try:
            import connectorx  # the dump's reads only: the capture and Airflow's parsing never load it

            # utf8mb4 as the Python driver's session has it, whatever the server's default.
            return connectorx.read_sql(self.url, sql, return_type="arrow", pre_execution_query="SET NAMES utf8mb4")
        except Exception as exc:  # noqa: BLE001 - any failure: the Python driver reads the chunk
            raise NativeUnfit(_first_line(exc)) from exc
        except BaseException as exc:  # a value it cannot convert is a Rust panic (pyo3's PanicException)
            if type(exc).__name__ != "PanicException":
                raise
            raise NativeUnfit(_first_line(exc)) from exc


class PostgresNative(NativeReads):
    """ADBC's PostgreSQL driver on one autocommit connection (no transaction left open between
    chunks, so no lock outlives its SELECT), opened at the first chunk."""

    def __init__(self, host: str, port: int, user: str, password: str, dbname: str):
        self.url = _url("postgresql", host, port, user, password, dbname, client_encoding="UTF8", connect_timeout="10")
        self._conn: Any = None

    def fetch(self, sql: str) -> pa.Table:
        try:
            import adbc_driver_postgresql.dbapi as adbc

            if self._conn is None:
                self._conn = adbc.connect(self.url, autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetch_arrow_table()
        except Exception as exc:  # noqa: BLE001 - any failure: the Python driver reads the chunk
            with contextlib.suppress(Exception):
                self.close()  # a failed connection is opened again at the next chunk
            raise NativeUnfit(_first_line(exc)) from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
