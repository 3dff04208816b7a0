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
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    source_type: str      # as the catalog spells it, e.g. "decimal(12,2)", "timestamp with time zone"
    arrow_type: pa.DataType


@dataclass(frozen=True)
class TableSchema:
    name: str                    # "schema.table"
    columns: tuple[Column, ...]
    key: tuple[str, ...]         # primary key columns, in key order

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
        return tuple(row[c] for c in self.key)

    @functools.cached_property
    def key_indexes(self) -> tuple[int, ...]:
        return tuple(self.column_names.index(c) for c in self.key)

    def key_of_tuple(self, row: tuple) -> tuple:
        """The key of a row given as a tuple in column order."""
        return tuple(row[i] for i in self.key_indexes)

    def arrow_fields(self) -> list[pa.Field]:
        """Arrow fields, each carrying the column's type as the source's catalog spells it."""
        return [pa.field(c.name, c.arrow_type, metadata={b"dblog.source_type": c.source_type.encode()})
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
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8", errors="replace")
        if isinstance(value, (dict, list)):
            return json.dumps(value, sort_keys=True)
        if isinstance(value, set):
            return ",".join(sorted(value))
        return str(value)
    if pa.types.is_binary(arrow_type):
        if isinstance(value, str):
            return value.encode("utf-8")
        return bytes(value)
    if pa.types.is_integer(arrow_type):
        return int(value)
    if pa.types.is_decimal(arrow_type):
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_boolean(arrow_type):
        return bool(value)
    if pa.types.is_timestamp(arrow_type):
        if isinstance(value, dt.datetime) and arrow_type.tz and value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value
    return value


def normalize_key(values: tuple, schema: TableSchema) -> tuple:
    """Key values as staged, so keys from the log and from a SELECT compare equal."""
    if all(type(v) is t for v, t in zip(values, schema.key_python_types)):
        return tuple(values)  # the common case (integer and text keys), on the capture's hot path
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
        raise ValueError(f"{value!r} is not a {arrow_type} value")
    if pa.types.is_integer(arrow_type):
        if isinstance(value, float) or (isinstance(value, str) and not value.lstrip("-").isdigit()):
            raise ValueError(f"{value!r} is not an integer")
        return int(value)
    if pa.types.is_decimal(arrow_type):
        try:
            return Decimal(str(value))
        except ArithmeticError:
            raise ValueError(f"{value!r} is not a decimal number") from None
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_binary(arrow_type):
        if isinstance(value, dict) and set(value) == {"base64"}:
            return base64.b64decode(value["base64"])
        if isinstance(value, str):
            return value.encode("utf-8")
        raise ValueError(f"{value!r} is not binary (use a string or {{\"base64\": ...}})")
    if pa.types.is_date(arrow_type):
        return dt.date.fromisoformat(str(value))
    if pa.types.is_timestamp(arrow_type):
        return coerce(dt.datetime.fromisoformat(str(value)), arrow_type)
    if pa.types.is_boolean(arrow_type):
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    if isinstance(value, (dict, list)):
        raise ValueError(f"{value!r} is not a scalar")
    return str(value)


def decode_key(values: Any, schema: TableSchema) -> tuple:
    """A key given as JSON (a scalar for one-column keys, else a list in key order), typed."""
    if not isinstance(values, list):
        values = [values]
    if len(values) != len(schema.key):
        raise ValueError(f"key {values!r} has {len(values)} value(s); {schema.name} has a key of "
                         f"{len(schema.key)} column(s): ({', '.join(schema.key)})")
    return tuple(from_json_value(v, schema.column(c).arrow_type) for v, c in zip(values, schema.key))


def encode_key(key: tuple) -> str:
    return dumps_json([to_json_value(v) for v in key])
