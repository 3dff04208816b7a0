"""A streamed transaction's spool (`dblog.sources.spool`): its changes wait on disk in the staged
row format, and its commit gives them their positions, in order, without an aborted
subtransaction's; the positions filled in column by column are the ones `postgres_encode` gives."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from dblog.model.events import ChangeEvent, RepairNeed
from dblog.model.positions import postgres_encode, postgres_positions
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import COMMIT_TS, POSITION, Op
from dblog.sources.base import WATERMARK_TABLE
from dblog.sources.spool import SpooledTransaction, StreamedTransactions

SCHEMAS = {name: TableSchema(name, (Column("id", "int", pa.int64()), Column("v", "int", pa.int64())), ("id",))
           for name in ("app.a", "app.b")}
COMMITTED = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("lsn", [0, 1234, 9_999_999_998, 9_999_999_999, 10**14])
def test_positions_filled_at_once_are_those_of_one_at_a_time_on_both_sides_of_the_lsn_ceiling(lsn):
    indexes = [0, 1, 99, 123_456_789]
    assert postgres_positions(lsn, pa.array(indexes, pa.int64())).to_pylist() == \
        [postgres_encode(lsn, i) for i in indexes]


def event(table: str, i: int) -> ChangeEvent:
    return ChangeEvent("pg", table, Op.INSERT, postgres_encode(0, i), (i,), {"id": i, "v": i}, txid="7")


def renumbered(index: int) -> int:
    """The change's index among the committed ones: changes 4 and 5 were rolled back."""
    return index - 2 if index > 5 else index


def test_a_committed_spool_yields_its_pieces_in_order_with_commit_positions_and_no_aborted_subtransaction(tmp_path):
    """The positions are those of the server's replay without streaming: the rolled-back changes
    are not counted, so a re-read, streamed or not, stages each change at the same position."""
    spool = SpooledTransaction(7, piece_rows=3, schema_of=SCHEMAS.__getitem__, root=tmp_path / "spool")
    for i in range(10):   # subtransaction 8 holds changes 4 and 5; a watermark and a TRUNCATE among them
        subxid = 8 if i in (4, 5) else 7
        if i == 6:
            mark = ChangeEvent("pg", WATERMARK_TABLE, Op.INSERT, postgres_encode(0, i), ("w",), {"id": "w"})
            spool.add([mark], [RepairNeed("app.b", "TRUNCATE", postgres_encode(0, i))], subxid)
        else:
            spool.add([event("app.a" if i % 2 else "app.b", i)], [], subxid)
    spool.abort(8)
    assert len(list(tmp_path.glob("spool/7-*/*.arrow"))) >= 2, "nothing was spilled to disk"

    pieces = list(spool.pieces(5000, COMMITTED))
    ids = {t: [r for p in pieces if t in p for r in p[t]["id"].to_pylist()] for t in SCHEMAS}
    assert ids == {"app.a": [1, 3, 7, 9], "app.b": [0, 2, 8]}
    for piece in pieces:
        for rows in piece.values():
            assert rows[POSITION].to_pylist() == [postgres_encode(5000, renumbered(i)) for i in rows["id"].to_pylist()]
            assert set(rows[COMMIT_TS].to_pylist()) == {COMMITTED}
            assert rows.schema.names == [*SCHEMAS["app.a"].column_names, *rows.schema.names[2:]]
            assert not any(n.startswith("_spool") for n in rows.schema.names)
    marks, needs = spool.ends(5000, COMMITTED)
    assert [m.position for m in marks] == [postgres_encode(5000, renumbered(6))] and marks[0].commit_ts == COMMITTED
    assert [n.position for n in needs] == [postgres_encode(5000, renumbered(6))]
    spool.discard()
    assert not list((tmp_path / "spool").iterdir())


def test_a_stream_starts_by_emptying_its_sources_spool_directory_a_killed_capture_left(tmp_path):
    root = tmp_path / "dblog-spool-slot"
    (root / "41-abc").mkdir(parents=True)
    (root / "41-abc" / "00000000-000000.arrow").write_bytes(b"left by a capture killed mid-transaction")
    StreamedTransactions("pg", 1000, SCHEMAS.__getitem__, lambda *a: None, root)
    assert not root.exists()


def test_a_slice_reads_on_inside_a_spooled_transaction_for_another_slice_and_ends_before_the_hang_guard():
    from dblog.capture.capture_loop import slice_goes_on
    slice_s, hung_after = 3600.0, 600.0
    assert slice_goes_on(True, False, 10**6, slice_s, hung_after), "a transaction in pieces ends soon: read on"
    assert not slice_goes_on(False, False, 0.5, slice_s, hung_after), "between transactions a slice ends"
    assert slice_goes_on(False, True, slice_s - 1, slice_s, hung_after)
    assert not slice_goes_on(False, True, slice_s, slice_s, hung_after)
    # A short slice still waits half the guard's quiet time, and ends before the guard would fire
    # (twice the slice, then that long without staging).
    assert slice_goes_on(False, True, 299, 60.0, hung_after) and not slice_goes_on(False, True, 300, 60.0, hung_after)
    assert 60.0 + 300 < 2 * 60.0 + hung_after
