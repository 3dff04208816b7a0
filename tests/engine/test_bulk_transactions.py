"""A transaction of any size: staged in pieces as the log is read (bounded memory, the stream keeps
flowing), passed by the checkpoint and seen by readers only once its commit is staged.

Short form: 30,000-row transactions in pieces of 4,000. `make bench` measures the capture's
memory on transactions of millions of rows (bench/README: bulk transactions)."""
from __future__ import annotations

import signal

import pyarrow.compute as pc

from dblog.merge.job import merge_source
from dblog.model.staged_format import POSITION

from conftest import assert_warehouse_equals_source, checkpoint, settle

ROWS, PIECE = 30_000, 4_000


def bulk_insert(src, table: str) -> str:
    if src.kind == "mariadb":
        return f"INSERT INTO {table} SELECT seq, seq, REPEAT('x', 80) FROM {src.namespace}.seq_1_to_{ROWS}"
    return f"INSERT INTO {table} SELECT g, g, repeat('x', 80) FROM generate_series(1, {ROWS}) g"


def test_a_transaction_larger_than_a_piece_is_staged_in_pieces_that_no_reader_takes_before_its_commit(
        src, spark, warehouse):
    table = src.table("bulk")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(80))")
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    pieces = {"DBLOG_CAPTURE_PIECE_ROWS": str(PIECE), "DBLOG_CAPTURE_FLUSH_ROWS": str(PIECE)}  # a piece a segment
    crashing = src.spawn("capture", "--source", src.source_id,
                         env={**pieces, "DBLOG_CRASH_AT": "capture.piece_staged@2"})
    src.sql(f"INSERT INTO {table} VALUES (0, 0, 'before')")
    settle(src)
    committed = checkpoint(src)

    src.sql(bulk_insert(src, table))   # one transaction; the capture dies after its second piece is staged
    assert crashing.wait(timeout=120) == -signal.SIGKILL, crashing.stderr.read()[-3000:]
    staged = src.staged()
    log = staged.read_log(src.source_id, table)   # all that is staged, past the checkpoint too
    assert PIECE < log.num_rows < ROWS, log.num_rows   # pieces, without the commit's part
    assert checkpoint(src) == committed, "the checkpoint moved past a transaction whose commit was not staged"
    assert pc.max(log[POSITION]).as_py() > committed
    with src.store() as store:
        merge_source(spark, store, staged, warehouse, src.source_id, [table])
    assert warehouse.read(src.source_id, table, ["id"]).to_pylist() == [{"id": 0}], "a merge took a piece"

    # Resumed from the checkpoint: the transaction is read again from its start and staged whole
    # (its pieces again: a merge takes each position once), then a second one in pieces too.
    src.spawn("capture", "--source", src.source_id, env=pieces)
    src.sql(f"UPDATE {table} SET v = v + 1, s = 'after'")
    settle(src)
    segments = staged.segments(src.source_id, table, after=committed)
    assert len(segments) >= 2 * (ROWS // PIECE), f"{len(segments)} segments: the transactions were not staged in pieces"
    with src.store() as store:
        merge_source(spark, store, staged, warehouse, src.source_id, [table])
    assert_warehouse_equals_source(src, warehouse, tables=("bulk",))


def test_a_capture_slice_that_ends_inside_a_transaction_stages_it_whole_before_it_stops(mariadb):
    """A slice ending mid-transaction would leave the next one to read it again from its start: one
    longer than a slice would then never be staged. (The capture loop's rule: one source suffices.)"""
    src = mariadb
    table = src.table("bulk")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(80))")
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    src.sql(bulk_insert(src, table))
    for _ in range(5):   # a slice far shorter than reading the transaction takes
        src.dblog("capture", "--source", src.source_id, "--duration", "0.1", check=True,
                  env={"DBLOG_CAPTURE_PIECE_ROWS": "1000", "DBLOG_CAPTURE_FLUSH_ROWS": "1000"})
        if checkpoint(src) is not None:
            break
    staged = src.staged().read_log(src.source_id, table, high=checkpoint(src) or "")
    assert staged.num_rows == ROWS, f"{staged.num_rows} of the transaction's {ROWS} events are behind the checkpoint"
