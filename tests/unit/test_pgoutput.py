"""The pgoutput decoder on hand-built protocol messages (format: PostgreSQL docs, protocol-logicalrep-message-formats)."""
import datetime as dt
import struct
from decimal import Decimal

import pytest

from dblog.sources.pgoutput import (
    Begin,
    Commit,
    Decoder,
    Relation,
    RowChange,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    stream_xid,
    tuple_reader,
)

UNCHANGED = object()  # a value the test sends as 'u' (an unchanged TOASTed value)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def relation(oid=16384) -> bytes:
    cols = [(1, "id", 20), (0, "amount", 1700), (0, "at", 1184), (0, "blob", 17), (0, "ok", 16), (0, "note", 25)]
    body = struct.pack("!I", oid) + cstr("app") + cstr("items") + b"d" + struct.pack("!H", len(cols))
    for flags, name, oid_ in cols:
        body += bytes([flags]) + cstr(name) + struct.pack("!Ii", oid_, -1)
    return b"R" + body


def tuple_data(*values) -> bytes:
    out = struct.pack("!H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack("!I", len(raw)) + raw
    return out


def test_begin_and_commit_carry_lsns_xid_and_commit_time():
    d = Decoder()
    begin = d.decode(b"B" + struct.pack("!QqI", 0x16B374D848, 1_000_000, 42))
    assert begin == Begin(0x16B374D848, dt.datetime(2000, 1, 1, 0, 0, 1, tzinfo=dt.UTC), 42)
    commit = d.decode(b"C" + struct.pack("!bQQq", 0, 100, 120, 0))
    assert isinstance(commit, Commit) and (commit.commit_lsn, commit.end_lsn) == (100, 120)


def test_an_insert_is_decoded_into_typed_values():
    d = Decoder()
    rel = d.decode(relation())
    assert isinstance(rel, Relation) and rel.qualified == "app.items" and rel.columns[0].is_key
    ins = d.decode(b"I" + struct.pack("!I", 16384) + b"N" +
                   tuple_data("7", "12.50", "2026-01-02 03:04:05.123456+00", "\\x00ff", "t", None))
    assert isinstance(ins, RowChange) and ins.kind == "I"
    assert ins.new == {"id": 7, "amount": Decimal("12.50"),
                       "at": dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC),
                       "blob": b"\x00\xff", "ok": True, "note": None}


def test_an_update_with_a_key_change_carries_the_old_key_and_unchanged_toast_values():
    d = Decoder()
    d.decode(relation())
    upd = d.decode(b"U" + struct.pack("!I", 16384) + b"K" + tuple_data("7", None, None, None, None, None) +
                   b"N" + tuple_data("8", "1", None, None, "f", UNCHANGED))
    assert upd.old_key["id"] == 7 and upd.new["id"] == 8
    assert upd.old is None, "a key-only old tuple is not a row image: it must not be staged as one"
    assert upd.new["note"] is None and upd.unchanged == ["note"]
    plain = d.decode(b"U" + struct.pack("!I", 16384) + b"N" + tuple_data("8", "2", None, None, "t", "x"))
    assert plain.unchanged is None


def test_under_replica_identity_full_an_unchanged_toast_value_is_taken_from_the_old_row():
    d = Decoder()
    d.decode(relation())
    upd = d.decode(b"U" + struct.pack("!I", 16384) + b"O" + tuple_data("7", "1", None, None, "t", "long body") +
                   b"N" + tuple_data("7", "2", None, None, "t", UNCHANGED))
    assert upd.new["note"] == "long body" and upd.unchanged is None
    assert upd.old["amount"] == Decimal("1") and upd.old_key is None


def test_a_delete_and_a_truncate_are_decoded():
    d = Decoder()
    d.decode(relation())
    dele = d.decode(b"D" + struct.pack("!I", 16384) + b"K" + tuple_data("9", None, None, None, None, None))
    assert dele.kind == "D" and dele.old["id"] == 9 and dele.new is None
    trunc = d.decode(b"T" + struct.pack("!IB", 1, 0) + struct.pack("!I", 16384))
    assert isinstance(trunc, Truncate) and trunc.relations[0].name == "items"


def test_origin_and_type_messages_are_skipped():
    assert Decoder().decode(b"O" + struct.pack("!Q", 1) + cstr("origin")) is None


def test_a_stream_block_names_each_changes_subtransaction_and_the_stream_ends_with_its_commit_or_abort():
    d = Decoder()
    start = d.decode(b"S" + struct.pack("!IB", 900, 1))
    assert isinstance(start, StreamStart) and (start.xid, start.first) == (900, True)
    rel = b"R" + struct.pack("!I", 900) + relation()[1:]
    assert isinstance(d.decode(rel), Relation)
    payload = b"I" + struct.pack("!I", 901) + struct.pack("!I", 16384) + b"N" + tuple_data("7", "1", None, None, "t", "x")
    ins = d.decode(payload)
    assert isinstance(ins, RowChange) and ins.new["id"] == 7 and stream_xid(payload) == 901
    assert isinstance(d.decode(b"E"), StreamStop)
    # Outside the block a change has no xid again.
    plain = d.decode(b"I" + struct.pack("!I", 16384) + b"N" + tuple_data("8", "1", None, None, "t", "y"))
    assert isinstance(plain, RowChange) and plain.new["id"] == 8
    assert d.decode(b"A" + struct.pack("!II", 900, 901)) == StreamAbort(900, 901)
    commit = d.decode(b"c" + struct.pack("!IbQQq", 900, 0, 5000, 5100, 2_000_000))
    assert commit == StreamCommit(900, 5000, 5100, dt.datetime(2000, 1, 1, 0, 0, 2, tzinfo=dt.UTC))


@pytest.mark.parametrize("values", [
    ("7", "-12.50", "2026-01-02 03:04:05+00", "\\x", "f", "é 中文 🦆 \x01"),
    (None, None, None, None, None, None),
    ("9223372036854775807", "-0.000", "infinity", "\\xdeadbeef", "t", ""),
    ("1", "2"),                                   # fewer columns than the relation has
    ("1", UNCHANGED, None, None, None, "x"),      # an unchanged TOASTed value
])
def test_a_relations_compiled_tuple_reader_reads_what_the_general_reader_reads_or_leaves_the_tuple_to_it(values):
    d = Decoder()
    d.decode(relation())
    payload = tuple_data(*values)
    compiled = tuple_reader(d._parsers[16384])(payload, 0)
    general = d.general_tuple(16384, payload, 0)
    covered = len(values) == 6 and UNCHANGED not in values
    assert compiled == (general if covered else None)
    assert general[1] == len(payload)
    if covered:
        assert [type(v) for v in compiled[0].values()] == [type(v) for v in general[0].values()]
