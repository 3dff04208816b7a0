"""A decoder for PostgreSQL's pgoutput logical replication protocol (version 1).

Handles Begin, Commit, Relation, Insert, Update, Delete and Truncate; Origin and Type messages
are skipped. Values arrive as text and are parsed by type OID. No maintained PyPI decoder works
(see SETUP-NOTES), and the protocol is small.
"""
from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
UNCHANGED = object()  # an unchanged TOASTed value left out of the new tuple


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
    commit_ts: dt.datetime
    xid: int


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts: dt.datetime


@dataclass
class RowChange:
    kind: str                       # I, U, D
    relation: Relation
    new: dict | None                # column -> value (UNCHANGED for unchanged TOAST)
    old: dict | None                # replica identity tuple ('K': key columns, 'O': full row)


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


class Decoder:
    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}

    def decode(self, payload: bytes) -> Begin | Commit | Relation | RowChange | Truncate | None:
        kind, body = chr(payload[0]), memoryview(payload)[1:]
        if kind == "B":
            final_lsn, ts, xid = struct.unpack_from("!QqI", body)
            return Begin(final_lsn, _ts(ts), xid)
        if kind == "C":
            _flags, commit_lsn, end_lsn, ts = struct.unpack_from("!bQQq", body)
            return Commit(commit_lsn, end_lsn, _ts(ts))
        if kind == "R":
            rel = self._relation(body)
            self.relations[rel.oid] = rel
            return rel
        if kind == "I":
            (oid,), off = struct.unpack_from("!I", body), 4
            rel = self.relations[oid]
            new, _ = self._tuple(rel, body, off + 1)  # skip 'N'
            return RowChange("I", rel, new, None)
        if kind == "U":
            (oid,), off = struct.unpack_from("!I", body), 4
            rel, old = self.relations[oid], None
            marker = chr(body[off])
            if marker in ("K", "O"):
                old, off = self._tuple(rel, body, off + 1)
                marker = chr(body[off])
            new, _ = self._tuple(rel, body, off + 1)
            return RowChange("U", rel, new, old)
        if kind == "D":
            (oid,), off = struct.unpack_from("!I", body), 4
            rel = self.relations[oid]
            old, _ = self._tuple(rel, body, off + 1)
            return RowChange("D", rel, None, old)
        if kind == "T":
            (n, _opts), off = struct.unpack_from("!IB", body), 5
            oids = struct.unpack_from(f"!{n}I", body, off)
            return Truncate([self.relations[o] for o in oids if o in self.relations])
        return None  # Origin, Type, Message: nothing to capture

    def _relation(self, body: memoryview) -> Relation:
        (oid,), off = struct.unpack_from("!I", body), 4
        namespace, off = _cstring(body, off)
        name, off = _cstring(body, off)
        identity = chr(body[off]); off += 1
        (ncols,), off = struct.unpack_from("!H", body, off), off + 2
        cols = []
        for _ in range(ncols):
            flags = body[off]; off += 1
            cname, off = _cstring(body, off)
            type_oid, _typmod = struct.unpack_from("!Ii", body, off); off += 8
            cols.append(RelationColumn(cname, type_oid, bool(flags & 1)))
        return Relation(oid, namespace or "pg_catalog", name, identity, cols)

    def _tuple(self, rel: Relation, body: memoryview, off: int) -> tuple[dict, int]:
        (ncols,), off = struct.unpack_from("!H", body, off), off + 2
        values: dict[str, Any] = {}
        for col in rel.columns[:ncols]:
            kind = chr(body[off]); off += 1
            if kind == "n":
                values[col.name] = None
            elif kind == "u":
                values[col.name] = UNCHANGED
            else:  # 't' text (or 'b' binary, which pgoutput v1 does not send)
                (length,), off = struct.unpack_from("!I", body, off), off + 4
                text = bytes(body[off:off + length]).decode("utf-8"); off += length
                parse = PARSERS.get(col.type_oid)
                values[col.name] = parse(text) if parse else text
        return values, off


def _cstring(body: memoryview, off: int) -> tuple[str, int]:
    end = bytes(body[off:]).index(b"\0") + off
    return bytes(body[off:end]).decode("utf-8"), end + 1
