"""Table schemas read from the source catalog, and their Arrow types in the staged log.

Both the change stream and the chunk SELECTs of a table are staged with the same Arrow schema,
built from the catalog, so types stay faithful: DECIMAL exact, timestamps with microseconds,
binary as binary, JSON as text.
"""
from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import math
import operator
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from ..errors import InvalidValue

IDENT = b"dblog.column_id"   # a staged field's `Column.ident`


@dataclass(frozen=True)
class Column:
    name: str
    source_type: str      # as the catalog spells it, e.g. "decimal(12,2)", "timestamp with time zone"
    arrow_type: pa.DataType
    nullable: bool | None = True   # None: not known (a schema read back from a staged file)
    # What the server puts in a row that names no value: a default's text, "generated: EXPR",
    # "identity"; None for NULL. Adding such a column fills existing rows without row events.
    default: str | None = None
    # A number the source keeps for the column while it exists (PostgreSQL's attnum; None where
    # there is none): a column dropped and added again under its name gets another one.
    ident: int | None = None


WHOLE_TABLE = "no key: whole-table snapshots"   # a TableSchema's key_from when it has no key at all


@dataclass(frozen=True)
class TableSchema:
    name: str                    # "schema.table"
    columns: tuple[Column, ...]
    key: tuple[str, ...]         # the key columns rows are matched by, in key order
    key_from: str = "primary key"   # or "unique index NAME", "key_columns" (`Source.table_schema`), WHOLE_TABLE

    @functools.cached_property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @functools.cached_property
    def column_set(self) -> frozenset:
        return frozenset(self.column_names)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def key_of(self, row: dict) -> tuple:
        return self._key_getter(row)

    @functools.cached_property
    def _key_getter(self):
        # On the capture's hot path (once per event): itemgetter is C, but gives a bare value for one column.
        if len(self.key) == 1:
            (name,) = self.key
            return lambda row: (row[name],)
        return operator.itemgetter(*self.key)

    @functools.cached_property
    def key_indexes(self) -> tuple[int, ...]:
        return tuple(self.column_names.index(c) for c in self.key)

    def key_of_tuple(self, row: tuple) -> tuple:
        """The key of a row given as a tuple in column order."""
        return tuple(row[i] for i in self.key_indexes)

    def arrow_fields(self) -> list[pa.Field]:
        """Arrow fields, each carrying the column's type as the source's catalog spells it."""
        return [pa.field(c.name, c.arrow_type, metadata={b"dblog.source_type": c.source_type.encode(),
                                                          **({} if c.ident is None else {IDENT: str(c.ident).encode()})})
                for c in self.columns]

    @functools.cached_property
    def key_python_types(self) -> tuple:
        """Per key column, the Python type a value already staged-ready has (int, str) or None."""
        def simple(t: pa.DataType):
            return int if pa.types.is_integer(t) else str if pa.types.is_string(t) else None
        return tuple(simple(self.column(c).arrow_type) for c in self.key)


def decimal_type(precision: int | None, scale: int | None) -> pa.DataType:
    if precision is None or precision > 38:
        return pa.string()  # unconstrained or wider than Arrow's decimal128: exact as text
    return pa.decimal128(precision, scale or 0)


def coerce(value: Any, arrow_type: pa.DataType) -> Any:
    """A Python value from a driver or log decoder, made to fit `arrow_type` exactly."""
    if value is None:
        return None
    if pa.types.is_string(arrow_type):
        return value if type(value) is str else _to_text(value)  # the common case, without a call
    if pa.types.is_binary(arrow_type):
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if pa.types.is_integer(arrow_type):
        return int(value)
    if pa.types.is_decimal(arrow_type):
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_boolean(arrow_type):
        return bool(value)
    if pa.types.is_timestamp(arrow_type):
        return _to_timestamp(value, arrow_type)
    return value


def _to_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, set):
        return ",".join(sorted(value))
    return str(value)


def _to_timestamp(value: Any, arrow_type: pa.TimestampType) -> Any:
    # Source sessions and the binlog decoder give TIMESTAMP values as naive UTC datetimes.
    if isinstance(value, dt.datetime) and arrow_type.tz and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def normalize_key(values: tuple, schema: TableSchema) -> tuple:
    """Key values as staged, so keys from the log and from a SELECT compare equal."""
    if tuple(map(type, values)) == schema.key_python_types:  # integer and text keys: the capture's hot path
        return values if type(values) is tuple else tuple(values)
    return tuple(coerce(v, schema.column(c).arrow_type) for v, c in zip(values, schema.key))


def to_json_value(value: Any) -> Any:
    """JSON-safe form of a staged value (for before images, keys and exports)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


def dumps_json(value: Any) -> str:
    return json.dumps(value, default=to_json_value, sort_keys=True, separators=(",", ":"))


def from_json_value(value: Any, arrow_type: pa.DataType) -> Any:
    """Inverse of `to_json_value` for a column of `arrow_type`; ValueError when it cannot fit."""
    if value is None:
        return None
    if isinstance(value, bool) and not pa.types.is_boolean(arrow_type):
        raise InvalidValue(f"{value!r} is not a {arrow_type} value")
    if pa.types.is_integer(arrow_type):
        return _json_integer(value)
    if pa.types.is_decimal(arrow_type):
        return _json_decimal(value)
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_binary(arrow_type):
        return _json_binary(value)
    if pa.types.is_date(arrow_type):
        return dt.date.fromisoformat(str(value))
    if pa.types.is_timestamp(arrow_type):
        return coerce(dt.datetime.fromisoformat(str(value)), arrow_type)
    if pa.types.is_boolean(arrow_type):
        return _json_boolean(value)
    if isinstance(value, (dict, list)):
        raise InvalidValue(f"{value!r} is not a scalar")
    return str(value)


def _json_integer(value: Any) -> int:
    # int() would truncate 1.5 and accept "1_000" or " 1": neither is an integer the user meant.
    if isinstance(value, float) or (isinstance(value, str) and not value.lstrip("-").isdigit()):
        raise InvalidValue(f"{value!r} is not an integer")
    return int(value)


def _json_decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value))
    except ArithmeticError:
        raise InvalidValue(f"{value!r} is not a decimal number") from None


def _json_binary(value: Any) -> bytes:
    if isinstance(value, dict) and set(value) == {"base64"}:
        return base64.b64decode(value["base64"])
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidValue(f"{value!r} is not binary (use a string or {{\"base64\": ...}})")


def _json_boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidValue(f"{value!r} is not true or false")
    return value


# Bits of the SQL integer types by their catalog name (MySQL's column_type, PostgreSQL's data_type).
# Arrow stages them all as int64 (unsigned BIGINT as decimal128(20,0)), wider than the column.
_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64, "oid": 32}
_TYPE_NAME = re.compile(r"[a-z]+")


def integer_range(source_type: str) -> tuple[int, int] | None:
    """The values an integer column can hold, from its type as the catalog spells it; else None."""
    t = source_type.lower()
    name = _TYPE_NAME.match(t)
    bits = _INT_BITS.get(name.group(0)) if name else None
    if bits is None:
        return None
    if "unsigned" in t or t == "oid":
        return 0, 2 ** bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def check_key_value(value: Any, column: Column) -> None:
    """ValueError unless `value` (typed by `from_json_value`) is one the key column can hold.

    A value it cannot hold matches no row, so a key-list dump would stage it as a deleted key:
    staging then fails on it mid-dump (an int beyond int64), or the warehouse gets a delete for a
    key that can never exist. Primary key columns are NOT NULL, and JSON has no NaN or Infinity."""
    where = f"column {column.name} ({column.source_type})"
    if value is None:
        raise InvalidValue(f"null is not a key value: {where} is part of the primary key, never NULL")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidValue(f"{value!r} is not a key value for {where}: give a finite number")
    if isinstance(value, Decimal) and not value.is_finite():
        raise InvalidValue(f"{value} is not a key value for {where}: give a finite number")
    bounds = integer_range(column.source_type)
    if bounds is not None and isinstance(value, (int, Decimal)):
        if value != int(value):
            raise InvalidValue(f"{value} is not an integer; {where} holds whole numbers")
        if not bounds[0] <= value <= bounds[1]:
            raise InvalidValue(f"{value} is out of range for {where}, which holds {bounds[0]} to {bounds[1]}")
    t = column.arrow_type
    if isinstance(value, Decimal) and pa.types.is_decimal(t):
        exponent = int(value.as_tuple().exponent)  # an int: the value is finite (checked above)
        whole, places = len(value.as_tuple().digits) + exponent, -exponent
        if places > t.scale and value != round(value, t.scale):
            raise InvalidValue(f"{value} has more than {t.scale} decimal places; {where} holds {t.scale}")
        if whole > t.precision - t.scale:
            raise InvalidValue(f"{value} is out of range for {where}, which holds at most "
                             f"{t.precision - t.scale} digits before the decimal point")
    try:  # the staged type's own limits (int64, and whatever else Arrow cannot hold)
        pa.array([value], type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
        raise InvalidValue(f"{value!r} does not fit {where}: {str(exc).strip().splitlines()[0]}") from None


def decode_key(values: Any, schema: TableSchema) -> tuple:
    """A key given as JSON (a scalar for one-column keys, else a list in key order), typed and
    checked against its columns (`check_key_value`)."""
    if not isinstance(values, list):
        values = [values]
    if len(values) != len(schema.key):
        raise InvalidValue(f"key {values!r} has {len(values)} value(s); {schema.name} has a key of "
                         f"{len(schema.key)} column(s): ({', '.join(schema.key)})")
    out = []
    for v, c in zip(values, schema.key):
        column = schema.column(c)
        if isinstance(v, float) and not math.isfinite(v):  # before typing: a text key would take it as 'nan'
            raise InvalidValue(f"{v!r} is not a key value for column {c}: give a finite number")
        typed = from_json_value(v, column.arrow_type)
        check_key_value(typed, column)
        out.append(typed)
    return tuple(out)


def encode_key(key: tuple) -> str:
    return dumps_json([to_json_value(v) for v in key])
