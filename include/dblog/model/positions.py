"""Positions: the one total order over every event of a source (invariant 1).

A position is three non-negative integers, compared left to right:

* MariaDB/MySQL: (binlog file index, end position of the row event, row index in the event)
* PostgreSQL:    (commit LSN, index of the change inside its transaction, 0), and from LSN
                 9,999,999,999 on (2/540BE3FF, about 9.3 GiB of WAL in a server's life), where the
                 LSN no longer fits the first part: (9999999999, commit LSN, index). The order is
                 the same on both sides of the switch, so positions staged before it stay valid.

It is stored and compared everywhere (Parquet, ZooKeeper, Spark, NDJSON) as a fixed-width
decimal string, so plain string comparison equals tuple comparison and no consumer needs to
know which source produced it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidValue

_WIDTHS = (10, 20, 10)
MAX_PARTS = tuple(10**w - 1 for w in _WIDTHS)


@dataclass(frozen=True, order=True)
class Position:
    major: int
    minor: int
    seq: int = 0

    def __post_init__(self) -> None:
        for part, limit in zip((self.major, self.minor, self.seq), MAX_PARTS):
            if not 0 <= part <= limit:
                raise InvalidValue(f"position part {part} outside 0..{limit}")

    def encode(self) -> str:
        return "-".join(f"{p:0{w}d}" for p, w in zip((self.major, self.minor, self.seq), _WIDTHS))

    @classmethod
    def decode(cls, text: str) -> Position:
        parts = text.split("-")
        if len(parts) != 3 or [len(p) for p in parts] != list(_WIDTHS) or not all(p.isdigit() for p in parts):
            raise InvalidValue(f"not an encoded position: {text!r}")
        return cls(*(int(p) for p in parts))

    def __str__(self) -> str:
        return self.encode()


ZERO = Position(0, 0, 0)


def mysql_position(log_file: str, log_pos: int, row_index: int) -> Position:
    """`mysql-bin.000042`, end-of-event position, row index inside the rows event."""
    return Position(binlog_file_index(log_file), log_pos, row_index)


def encode(major: int, minor: int, seq: int) -> str:
    """`Position(major, minor, seq).encode()` for hot loops (the parts come from the log decoders)."""
    return f"{major:010d}-{minor:020d}-{seq:010d}"


def binlog_file_index(log_file: str) -> int:
    suffix = log_file.rsplit(".", 1)[-1]
    if not suffix.isdigit():
        raise InvalidValue(f"binlog file name without a numeric suffix: {log_file!r}")
    return int(suffix)


_LSN_CEILING = MAX_PARTS[0]


def postgres_position(commit_lsn: int, index_in_txn: int) -> Position:
    return Position.decode(postgres_encode(commit_lsn, index_in_txn))


def postgres_encode(commit_lsn: int, index_in_txn: int) -> str:
    """The position of the `index_in_txn`th change of the transaction committed at `commit_lsn`.

    Past the first part's ceiling the first part saturates and the LSN moves one part right: no
    change of layout, no migration, and (LSN, index) order is kept across the switch (an index
    never reaches 10^10, so an old position at the ceiling sorts before every new one)."""
    return postgres_encoder(commit_lsn)(index_in_txn)


def _postgres_layout(commit_lsn: int) -> tuple[str, int, str]:
    """A transaction's positions: a prefix, the change's index at a width, a suffix."""
    if commit_lsn < _LSN_CEILING:
        return f"{commit_lsn:010d}-", 20, f"-{0:010d}"
    return f"{_LSN_CEILING:010d}-{commit_lsn:020d}-", 10, ""


def postgres_encoder(commit_lsn: int) -> Callable[[int], str]:
    """`postgres_encode(commit_lsn, i)` as a function of i: once per transaction, not per change."""
    prefix, width, suffix = _postgres_layout(commit_lsn)
    return f"{prefix}{{:0{width}d}}{suffix}".format


def postgres_positions(commit_lsn: int, indexes: pa.Array) -> pa.Array:
    """`postgres_encode(commit_lsn, i)` for each index i, at once (a streamed transaction's changes
    learn their commit LSN only at its end)."""
    prefix, width, suffix = _postgres_layout(commit_lsn)
    digits = pc.utf8_lpad(pc.cast(indexes, pa.string()), width, "0")
    return pc.binary_join_element_wise(prefix, digits, suffix, "")


def lsn_to_int(lsn: str) -> int:
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
