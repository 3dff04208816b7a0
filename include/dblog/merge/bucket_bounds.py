"""Which key-range bucket a key falls in, in Python: `bucket_merge.bucket_of`'s rule on the driver.

Bucket bounds are stored as Spark's string form of each key value (`bucket_merge.key_strings`),
and Spark compares a key with a bound after casting the bound back to the key's type. Here the
bound is parsed back into the Python value Arrow gives for that type, for the types whose Python
order is Spark's: integers, strings (UTF-8 byte order is code point order), binary, dates and
decimals. A key of another type (a timestamp's string form depends on the session's time zone,
a float's on its formatting) has no bounds here: its merges take Spark.
"""
from __future__ import annotations

import datetime as dt
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..warehouse.merged_state import TableState

_PARSE: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(("tinyint", "smallint", "int", "bigint"), int),
    "string": str, "binary": bytes.fromhex, "date": dt.date.fromisoformat}


def _parser(spark_type: str) -> Callable[[str], Any] | None:
    return Decimal if spark_type.startswith("decimal(") else _PARSE.get(spark_type)


@dataclass(frozen=True)
class BucketBounds:
    """A table's bucket lower bounds as key tuples (bucket 0 has none)."""
    lows: list[tuple]

    @classmethod
    def of(cls, state: TableState | None) -> BucketBounds | None:
        """The table's bounds; None when a key column's type has no Python order here (or no table)."""
        if state is None:
            return None
        types = dict(state.columns)
        parsers = [_parser(types.get(k, "")) for k in state.key]
        if not state.key or any(p is None for p in parsers):
            return None
        lows = []
        for b in state.buckets[1:]:
            assert b.lo is not None, "only the first bucket has no lower bound"
            lows.append(tuple(parse(v) for parse, v in zip(parsers, b.lo)))  # type: ignore[misc]
        return cls(lows)

    def bucket(self, key: tuple) -> int:
        """The index of the bucket `key` falls in: the last whose lower bound is at most the key (a
        key on a bound falls in that bound's bucket, as `bucket_merge.bucket_search` decides)."""
        return bisect_right(self.lows, key)
