"""PostgreSQL streams a large transaction while it is in progress (pgoutput protocol 2): the capture
spools it, stages it at its commit in the commit's order, and drops what was rolled back, a
subtransaction's or a whole transaction's (`dblog.sources.spool`)."""
from __future__ import annotations

import pyarrow.compute as pc

from dblog.merge.job import merge_source
from dblog.model.staged_format import POSITION

from conftest import assert_warehouse_equals_source, settle, wait_for

ROWS = 3_000
# The server streams a transaction once the ones in progress hold more than this (KiB; 64 is its
# floor); pieces of 1,000 rows make the spool write several files.
STREAMING = {"DBLOG_PG_DECODING_WORK_MEM_KIB": "64", "DBLOG_CAPTURE_PIECE_ROWS": "1000"}


def streamed(src) -> int:
    """Transactions the server streamed to this test's slot (its own statistics)."""
    rows = src.sql("SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s",
                   params=[src.source().slot])
    return rows[0][0] if rows else 0


def test_a_streamed_transaction_is_staged_at_its_commit_in_order_without_what_was_rolled_back(
        postgres, spark, warehouse, tmp_path):
    src = postgres
    table, other, gone = src.table("streamed"), src.table("other"), src.table("gone")
    src.sql(*(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(80))" for t in (table, other, gone)))
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    spool = tmp_path / "tmp"
    spool.mkdir()
    capture = src.spawn("capture", "--source", src.source_id, env={**STREAMING, "TMPDIR": str(spool)})
    try:
        src.sql(f"INSERT INTO {table} SELECT g, g, repeat('x', 80) FROM generate_series(1, {ROWS}) g")
        open_txn, rolled_back = src.admin(), src.admin()
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
        assert not list(spool.glob("dblog-spool-*")), "a finished transaction's spool stayed on disk"
    finally:
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
