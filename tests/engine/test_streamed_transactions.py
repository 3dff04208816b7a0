"""PostgreSQL streams a large transaction while it is in progress (pgoutput protocol 2): the capture
spools it, stages it at its commit in the commit's order, and drops what was rolled back, a
subtransaction's or a whole transaction's (`dblog.sources.spool`)."""
from __future__ import annotations

import subprocess

import pyarrow.compute as pc
import pytest

from dblog.merge.job import merge_source
from dblog.model.staged_format import POSITION

from conftest import assert_warehouse_equals_source, checkpoint, settle, streamed, wait_for

ROWS = 3_000
# The server streams a transaction once the ones in progress hold more than this (KiB; 64 is its
# floor); pieces of 1,000 rows make the spool write several files.
STREAMING = {"DBLOG_PG_DECODING_WORK_MEM_KIB": "64", "DBLOG_CAPTURE_PIECE_ROWS": "1000"}


def test_a_streamed_transaction_is_staged_at_its_commit_in_order_without_what_was_rolled_back(
        postgres, spark, warehouse, tmp_path):
    src = postgres
    table, other, gone = src.table("streamed"), src.table("other"), src.table("gone")
    src.sql(*(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(80))" for t in (table, other, gone)))
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    spool = tmp_path / "tmp"
    spool.mkdir()
    capture = src.spawn("capture", "--source", src.source_id, env={**STREAMING, "TMPDIR": str(spool)})
    opened: list = []
    try:
        src.sql(f"INSERT INTO {table} SELECT g, g, repeat('x', 80) FROM generate_series(1, {ROWS}) g")
        open_txn, rolled_back = src.admin(), src.admin()
        opened.extend((open_txn, rolled_back))
        cur = open_txn.cursor()
        cur.execute(f"UPDATE {table} SET v = v + 1")
        src.sql(f"INSERT INTO {other} VALUES (1, 1, 'while open')")   # commits before the big one
        cur.execute("SAVEPOINT inner_part")
        cur.execute(f"UPDATE {table} SET v = -1 WHERE id <= 500")
        cur.execute("ROLLBACK TO SAVEPOINT inner_part")
        cur.execute(f"UPDATE {table} SET s = 'last' WHERE id <= 10")
        rolled_back.cursor().execute(f"INSERT INTO {gone} SELECT g, g, repeat('y', 80) FROM generate_series(1, {ROWS}) g")
        settle(src)   # the other table's commit is staged while the big transaction is open
        staged = src.staged()
        assert staged.read_log(src.source_id, other).num_rows == 1
        assert staged.read_log(src.source_id, table).num_rows == ROWS, "a change of an open transaction was staged"
        wait_for(lambda: streamed(src) >= 1, 60, what="a streamed transaction (else the test proves nothing)")
        rolled_back.rollback()
        open_txn.commit()
        src.sql(f"INSERT INTO {other} VALUES (2, 2, 'after')")
        settle(src)
        assert capture.poll() is None, capture.stderr.read()[-3000:]
        assert not list(spool.glob("dblog-spool-*/*")), "a finished transaction's spool stayed on disk"
    finally:
        for conn in opened:   # (an open transaction left behind would block the test schema's drop)
            conn.close()
        capture.kill()
        capture.wait()

    events = staged.read_log(src.source_id, table)
    assert events.num_rows == 2 * ROWS + 10, events.num_rows   # the inserts, the update, the last 10
    assert pc.sum(pc.equal(events["v"], -1)).as_py() == 0, "a rolled-back subtransaction's rows were staged"
    assert staged.read_log(src.source_id, gone).num_rows == 0, "a rolled-back transaction's rows were staged"
    big = events.slice(ROWS)   # the streamed transaction's events, in log order
    positions = big[POSITION].to_pylist()
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    while_open, after = staged.read_log(src.source_id, other)[POSITION].to_pylist()
    assert while_open < positions[0] and positions[-1] < after, "the streamed transaction is not at its commit"
    assert big["s"].to_pylist()[-10:] == ["last"] * 10 and set(big["v"].to_pylist()[:ROWS]) == set(range(2, ROWS + 2))
    with src.store() as store:
        merge_source(spark, store, staged, warehouse, src.source_id, [table, other, gone])
    assert_warehouse_equals_source(src, warehouse, tables=("streamed", "other"))


def test_a_capture_slice_does_not_end_while_a_streamed_transaction_is_spooled(postgres):
    """Other commits between its stream blocks are whole transactions, but a slice ending after one
    would drop the spool, and the next slice would read the transaction again from its start."""
    src = postgres
    table, other = src.table("streamed"), src.table("other")
    src.sql(*(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(80))" for t in (table, other)))
    src.sql(f"INSERT INTO {table} SELECT g, g, repeat('x', 80) FROM generate_series(1, {ROWS}) g")
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    open_txn = src.admin()
    capture = None
    try:   # (an open transaction left behind would block the test schema's drop)
        open_txn.cursor().execute(f"UPDATE {table} SET v = v + 1")
        capture = src.spawn("capture", "--source", src.source_id, "--duration", "1", env=STREAMING)
        for i in range(10):   # whole transactions after the big one's blocks, while it stays open
            src.sql(f"INSERT INTO {other} VALUES ({i}, {i}, 'between blocks')")
        settle(src)   # the capture read them all
        wait_for(lambda: streamed(src) >= 1, 60, what="a streamed transaction (else the test proves nothing)")
        with pytest.raises(subprocess.TimeoutExpired):   # its 1-second slice is long over: it would end now
            capture.wait(timeout=5)
        open_txn.commit()
        assert capture.wait(timeout=120) == 0, capture.stderr.read()[-3000:]
    finally:
        open_txn.close()
        if capture is not None and capture.poll() is None:
            capture.kill()
            capture.wait()
    staged = src.staged().read_log(src.source_id, table, high=checkpoint(src))
    assert staged.num_rows == ROWS, "the slice ended before staging the transaction it was inside"
