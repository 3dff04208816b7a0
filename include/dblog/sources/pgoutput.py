"""A decoder for PostgreSQL's pgoutput logical replication protocol (versions 1 and 2).

Handles Begin, Commit, Relation, Insert, Update, Delete and Truncate, and version 2's streamed
transactions (Stream Start, Stop, Commit and Abort; inside a stream block each change names its
(sub)transaction: `stream_xid`); Origin and Type messages are skipped. Values arrive as text and are parsed by type OID. No maintained PyPI decoder works
(see SETUP-NOTES), and the protocol is small.
"""
from __future__ import annotations

import datetime as dt
import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


@dataclass
class RelationColumn:
    name: str
    type_oid: int
    is_key: bool


@dataclass
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: list[RelationColumn]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass
class Begin:
    final_lsn: int
    commit_ts: dt.datetime | None    # None: a streamed transaction's, known at its commit (`spool`)
    xid: int

    @functools.cached_property
    def txid(self) -> str:
        """The transaction id as events carry it (once per transaction, not per row)."""
        return str(self.xid)


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts: dt.datetime


@dataclass
class StreamStart:
    """A block of an in-progress transaction's changes follows (`first`: its first block)."""
    xid: int
    first: bool


@dataclass
class StreamStop:
    """The end of a stream block: other transactions' messages may follow."""


@dataclass
class StreamCommit:
    """A streamed transaction committed: its changes take their positions from `commit_lsn`."""
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: dt.datetime


@dataclass
class StreamAbort:
    """A streamed transaction (`subxid` == `xid`) or one of its subtransactions rolled back."""
    xid: int
    subxid: int


STREAM_MESSAGES = (StreamStart, StreamStop, StreamCommit, StreamAbort)


@dataclass(slots=True)
class RowChange:
    kind: str                       # I, U, D
    relation: Relation
    new: dict | None                # column -> value (None for an unchanged TOASTed value)
    old: dict | None                # the full old row ('O', REPLICA IDENTITY FULL); deletes: 'K' or 'O'
    unchanged: list[str] | None = None  # columns of `new` whose TOASTed value was left out
    old_key: dict | None = None     # an update's key-only old tuple ('K': the key changed); not a row image


@dataclass
class Truncate:
    relations: list[Relation]


def _ts(micros: int) -> dt.datetime:
    return PG_EPOCH + dt.timedelta(microseconds=micros)


def _bool(text: str) -> bool:
    return text == "t"


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()


def _timestamp(text: str) -> Any:
    if text in ("infinity", "-infinity"):
        return text
    return dt.datetime.fromisoformat(text)


def _date(text: str) -> Any:
    return text if text in ("infinity", "-infinity") else dt.date.fromisoformat(text)


PARSERS = {
    16: _bool, 17: _bytea, 20: int, 21: int, 23: int, 26: int,
    700: float, 701: float, 1700: Decimal,
    1082: _date, 1114: _timestamp, 1184: _timestamp,
}


_BYTES_PARSERS = (int, float)   # read a value's bytes as they are; the others its text

TupleReader = Callable[[bytes, int], "tuple[dict, int] | None"]


def tuple_reader(columns: list[tuple[str, Callable | None]]) -> TupleReader:
    """A reader of a relation's tuples in the usual case, every value text or null, compiled once
    per Relation message: the values are parsed in one straight run, without a loop, a dispatch
    per column or a dict filled key by key (the capture's hot path: ~0.3 µs a row of 4 columns).
    It returns None for a tuple it does not cover (another column count, an unchanged TOASTed
    value), which the general reader then reads. Column names and parsers are passed in as
    values, never written into the code."""
    lines = ["def read(payload, off):", f"    if u16(payload, off)[0] != {len(columns)}:", "        return None",
             "    off += 2"]
    scope: dict[str, Any] = {"u16": _U16.unpack_from, "u32": _U32.unpack_from}
    for i, (name, parse) in enumerate(columns):
        scope[f"n{i}"], scope[f"p{i}"] = name, parse
        raw = "payload[off:off + size]"
        value = (f"p{i}({raw})" if parse in _BYTES_PARSERS else f"p{i}({raw}.decode())" if parse
                 else f"{raw}.decode()")
        lines += ["    kind = payload[off]",
                  "    if kind == 0x74:",
                  "        size = u32(payload, off + 1)[0]; off += 5",
                  f"        v{i} = {value}; off += size",
                  "    elif kind == 0x6E:",
                  f"        v{i} = None; off += 1",
                  "    else:",
                  "        return None"]
    lines.append("    return {" + ", ".join(f"n{i}: v{i}" for i in range(len(columns))) + "}, off")
    exec("\n".join(lines), scope)  # noqa: S102 - code built above from column positions only
    return scope["read"]


class Decoder:
    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self._parsers: dict[int, list] = {}  # relation oid -> per-column (name, parser or None)
        self._readers: dict[int, TupleReader] = {}   # relation oid -> its compiled reader
        self._unchanged: list[str] | None = None
        self._at = 1   # where a change's body starts: after its (sub)transaction id in a stream block

    def decode(self, payload: bytes) -> (Begin | Commit | Relation | RowChange | Truncate | StreamStart | StreamStop
                                         | StreamCommit | StreamAbort | None):
        # Offsets index `payload` directly (no memoryview copies): this runs once per row.
        kind, at = payload[0], self._at
        if kind == 0x49:  # I
            oid = _U32.unpack_from(payload, at)[0]
            new, _ = self._tuple(oid, payload, at + 5)  # skip 'N'
            return RowChange("I", self.relations[oid], new, None, self._unchanged)
        if kind == 0x55:  # U
            oid = _U32.unpack_from(payload, at)[0]
            old, off, full_old, old_unchanged = None, at + 4, False, None
            if payload[off] in (0x4B, 0x4F):  # K (key) or O (old row)
                full_old = payload[off] == 0x4F
                old, off = self._tuple(oid, payload, off + 1)
                old_unchanged = self._unchanged
            new, _ = self._tuple(oid, payload, off + 1)
            unchanged = self._unchanged
            if unchanged and full_old and old is not None:
                # REPLICA IDENTITY FULL: the old row carries the unchanged values in full, so the
                # event proves them itself (no previous version needed, see the merge's fill).
                for name in unchanged:
                    if name not in (old_unchanged or ()):
                        new[name] = old[name]
                unchanged = [n for n in unchanged if n in (old_unchanged or ())] or None
            return RowChange("U", self.relations[oid], new, old if full_old else None, unchanged,
                             old_key=None if full_old or old is None else old)
        if kind == 0x44:  # D
            oid = _U32.unpack_from(payload, at)[0]
            old, _ = self._tuple(oid, payload, at + 5)
            return RowChange("D", self.relations[oid], None, old)
        if kind == 0x42:  # B
            final_lsn, ts, xid = _BEGIN.unpack_from(payload, 1)
            return Begin(final_lsn, _ts(ts), xid)
        if kind == 0x43:  # C
            _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(payload, 1)
            return Commit(commit_lsn, end_lsn, _ts(ts))
        if kind == 0x52:  # R
            rel = self._relation(payload, at)
            self.relations[rel.oid] = rel
            self._parsers[rel.oid] = [(c.name, PARSERS.get(c.type_oid)) for c in rel.columns]
            self._readers[rel.oid] = tuple_reader(self._parsers[rel.oid])
            return rel
        if kind == 0x54:  # T
            n, _opts = struct.unpack_from("!IB", payload, at)
            oids = struct.unpack_from(f"!{n}I", payload, at + 5)
            return Truncate([self.relations[o] for o in oids if o in self.relations])
        return self._stream(kind, payload)

    def _stream(self, kind: int, payload: bytes) -> StreamStart | StreamStop | StreamCommit | StreamAbort | None:
        if kind == 0x53:  # S
            xid, first = struct.unpack_from("!IB", payload, 1)
            self._at = 5
            return StreamStart(xid, first == 1)
        if kind == 0x45:  # E
            self._at = 1
            return StreamStop()
        if kind == 0x63:  # c
            xid, _flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT.unpack_from(payload, 1)
            return StreamCommit(xid, commit_lsn, end_lsn, _ts(ts))
        if kind == 0x41:  # A
            xid, subxid = struct.unpack_from("!II", payload, 1)
            return StreamAbort(xid, subxid)
        return None  # Origin, Type, Message: nothing to capture

    def _relation(self, payload: bytes, at: int) -> Relation:
        oid = _U32.unpack_from(payload, at)[0]
        namespace, off = _cstring(payload, at + 4)
        name, off = _cstring(payload, off)
        identity = chr(payload[off]); off += 1
        ncols = _U16.unpack_from(payload, off)[0]; off += 2
        cols = []
        for _ in range(ncols):
            flags = payload[off]; off += 1
            cname, off = _cstring(payload, off)
            type_oid, _typmod = struct.unpack_from("!Ii", payload, off); off += 8
            cols.append(RelationColumn(cname, type_oid, bool(flags & 1)))
        return Relation(oid, namespace or "pg_catalog", name, identity, cols)

    def _tuple(self, oid: int, payload: bytes, off: int) -> tuple[dict, int]:
        """Column values from `off`; names of unchanged TOASTed columns (valued None) go to
        `self._unchanged` (None when there are none, the usual case)."""
        self._unchanged = None
        read = self._readers[oid](payload, off)
        return read if read is not None else self.general_tuple(oid, payload, off)

    def general_tuple(self, oid: int, payload: bytes, off: int) -> tuple[dict, int]:
        """`_tuple` for any tuple, value by value: what the compiled reader does not cover."""
        self._unchanged = None
        ncols = _U16.unpack_from(payload, off)[0]; off += 2
        values: dict[str, Any] = {}
        parsers = self._parsers[oid]
        for name, parse in parsers if ncols == len(parsers) else parsers[:ncols]:
            kind = payload[off]; off += 1
            if kind == 0x74:  # t: text (pgoutput v1 never sends b, binary)
                length = _U32.unpack_from(payload, off)[0]; off += 4
                text = payload[off:off + length].decode("utf-8"); off += length
                values[name] = parse(text) if parse else text
            elif kind == 0x6E:  # n: null
                values[name] = None
            else:  # u: an unchanged TOASTed value, left out
                values[name] = None
                self._unchanged = (self._unchanged or []) + [name]
        return values, off


_BEGIN, _COMMIT, _STREAM_COMMIT = struct.Struct("!QqI"), struct.Struct("!bQQq"), struct.Struct("!IbQQq")
_U32, _U16 = struct.Struct("!I"), struct.Struct("!H")


def stream_xid(payload: bytes) -> int:
    """The (sub)transaction a change inside a stream block belongs to."""
    return _U32.unpack_from(payload, 1)[0]


def _cstring(payload: bytes, off: int) -> tuple[str, int]:
    end = payload.index(b"\0", off)
    return payload[off:end].decode("utf-8"), end + 1
