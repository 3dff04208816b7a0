"""A transaction of any size: staged in pieces as the log is read (bounded memory, the stream keeps
flowing), passed by the checkpoint and seen by readers only once its commit is staged.

Short form: a 300,000-row transaction under a memory limit far below what holding it needs. `make
bulk` runs it with 2,000,000 rows (DBLOG_BULK_ROWS) under the same limit; `make bench` measures the
capture's memory on transactions of millions of rows (bench/README: bulk transactions)."""
from __future__ import annotations

import os
import signal
import threading

import pyarrow.compute as pc

from dblog.merge.job import merge_source
from dblog.model.staged_format import POSITION
from dblog.snapshot.dump import TableDump, create_dump
from dblog.snapshot.dump_spec import DumpSpec
from dblog.stagedlog.staged_log import StagedLog

from conftest import assert_warehouse_equals_source, checkpoint, settle, streamed, wait_for
from memory_limit import MemoryLimit

ROWS, PIECE = int(os.environ.get("DBLOG_BULK_ROWS", 300_000)), 20_000
# In pieces the capture peaks near 240 MiB whatever the transaction's size (bench: bulk transactions);
# holding 300,000 rows whole needs about 1.3 kB each on top (2026-11-29; 1.5 kB before events were staged
# without a dict each), ~390 MiB: at 200,000 a MariaDB capture held them whole within the limit.
LIMIT_MIB = 300


def bulk_insert(src, table: str, rows: int) -> str:
    if src.kind == "mariadb":
        return f"INSERT INTO {table} SELECT seq, seq, REPEAT('x', 80) FROM {src.namespace}.seq_1_to_{rows}"
    return f"INSERT INTO {table} SELECT g, g, repeat('x', 80) FROM generate_series(1, {rows}) g"


class OtherWrites(threading.Thread):
    """Single-row commits to another table, all through the transaction, its kills and its staging."""

    def __init__(self, src, table: str):
        super().__init__(daemon=True)
        self.src, self.table, self.stop, self.done = src, table, threading.Event(), 0

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.done += 1
            self.src.sql(f"INSERT INTO {self.table} VALUES ({self.done}, {self.done}, 'other')")


def test_a_transaction_too_big_for_the_captures_memory_is_staged_in_pieces_through_a_kill_while_other_tables_flow(
        src, spark, warehouse):
    table, other = src.table("bulk"), src.table("other")
    src.sql(*(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(80))" for t in (table, other)))
    first = src.start_capture()
    src.sql(f"INSERT INTO {table} VALUES (0, 0, 'before')")
    settle(src)
    first.kill()
    first.wait()
    committed = checkpoint(src)
    writes = OtherWrites(src, other)
    writes.start()
    try:
        _bulk_under_a_limit(src, spark, warehouse, table, other, writes, committed)
    finally:
        writes.stop.set()
        writes.join()


def _bulk_under_a_limit(src, spark, warehouse, table: str, other: str, writes: OtherWrites, committed) -> None:
    src.sql(bulk_insert(src, table, ROWS))   # one transaction, committed before any capture reads it
    staged = src.staged()
    with MemoryLimit(LIMIT_MIB) as limit:
        # Held whole (pieces off, as before pieces), the transaction does not fit: the kernel kills the capture.
        whole = src.spawn("capture", "--source", src.source_id, preexec_fn=limit.join,
                          env={"DBLOG_CAPTURE_PIECE_ROWS": "10000000"})
        assert whole.wait(timeout=300) == -signal.SIGKILL and limit.oom_kills == 1, (
            f"the limit did not bite (exit {whole.returncode}): it proves nothing", whole.stderr.read()[-2000:])

        # In pieces it fits; this capture dies by kill -9 after its third piece is staged.
        crashing = src.spawn("capture", "--source", src.source_id, preexec_fn=limit.join,
                             env={"DBLOG_CRASH_AT": "capture.piece_staged@3"})
        assert crashing.wait(timeout=300) == -signal.SIGKILL, crashing.stderr.read()[-3000:]
        assert limit.oom_kills == 1, "the capture in pieces went past the memory limit"
        log = staged.read_log(src.source_id, table)   # all that is staged, past the checkpoint too
        assert 3 * PIECE <= log.num_rows < ROWS, log.num_rows   # pieces, without the commit's part
        pieces = log.filter(pc.greater(log["id"], 0))[POSITION]
        assert checkpoint(src) < pc.min(pieces).as_py(), "the checkpoint moved into a transaction whose commit was not staged"
        with src.store() as store:
            merge_source(spark, store, staged, warehouse, src.source_id, [table])
        assert warehouse.read(src.source_id, table, ["id"]).to_pylist() == [{"id": 0}], "a merge took a piece"

        # Resumed from the checkpoint: the transaction is read again from its start and staged whole
        # (its pieces again: a merge takes each position once), with the other table's commits after it.
        resumed = src.spawn("capture", "--source", src.source_id, preexec_fn=limit.join)
        settle(src)
        writes.stop.set()
        writes.join()
        settle(src)
        assert resumed.poll() is None and limit.oom_kills == 1, "the resumed capture went past the memory limit"
        resumed.kill()
        resumed.wait()
    segments = staged.segments(src.source_id, table, after=committed)
    assert len(segments) >= ROWS // PIECE, f"{len(segments)} segments: the transaction was not staged in pieces"
    assert writes.done > 20, "the other table had too few writes to show anything"
    with src.store() as store:
        merge_source(spark, store, staged, warehouse, src.source_id, [table, other])
    assert_warehouse_equals_source(src, warehouse, tables=("bulk", "other"))


def test_a_capture_slice_that_ends_inside_a_transaction_stages_it_whole_before_it_stops(mariadb):
    """A slice ending mid-transaction would leave the next one to read it again from its start: one
    longer than a slice would then never be staged. (The capture loop's rule: one source suffices.)"""
    src = mariadb
    table = src.table("bulk")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(80))")
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    src.sql(bulk_insert(src, table, 30_000))
    for _ in range(5):   # a slice far shorter than reading the transaction takes
        src.dblog("capture", "--source", src.source_id, "--duration", "0.1", check=True,
                  env={"DBLOG_CAPTURE_PIECE_ROWS": "1000", "DBLOG_CAPTURE_FLUSH_ROWS": "1000"})
        if checkpoint(src) is not None:
            break
    staged = src.staged().read_log(src.source_id, table, high=checkpoint(src) or "")
    assert staged.num_rows == 30_000, f"{staged.num_rows} of the transaction's 30,000 events are behind the checkpoint"


def test_a_bulk_transaction_committed_inside_a_dump_window_drops_exactly_the_window_rows_it_touched(
        src, spark, warehouse):
    """The window's chunk is read before the transaction commits and staged after: every row it
    read was changed inside the window, by a transaction the capture stages in pieces (PostgreSQL:
    streamed while it ran), so the merge drops them all and the log's values win."""
    table, rows, touched = src.table("windowed"), 5_000, 3_000
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(80))", bulk_insert(src, table, rows))
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    capture = src.spawn("capture", "--source", src.source_id,
                        env={"DBLOG_CAPTURE_PIECE_ROWS": "500", "DBLOG_CAPTURE_FLUSH_ROWS": "500",
                             "DBLOG_PG_DECODING_WORK_MEM_KIB": "64"})
    store, source = src.store(), src.source()
    try:
        dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=rows))

        class CommitsInsideTheWindow(StagedLog):
            def write_chunk(self, source_name, schema, meta, chunk, ops, shape=None):
                if meta.chunk == 0:   # after the window's read, before its HW
                    src.sql(f"UPDATE {table} SET v = -v, s = 'bulk' WHERE id <= {touched}")
                return super().write_chunk(source_name, schema, meta, chunk, ops, shape)

        done = TableDump(store, source, CommitsInsideTheWindow(str(src.staging)), dump_id, table).run()
        assert done.status == "done" and done.rows == rows
        settle(src)
        assert capture.poll() is None, capture.stderr.read()[-3000:]
        if src.kind == "postgres":
            wait_for(lambda: streamed(src) >= 1, 60, what="the transaction streamed while it ran")
        staged = src.staged()
        segments = staged.segments(src.source_id, table)
        assert len(segments) >= touched // 500, f"{len(segments)} segments: the transaction was not in pieces"
        merged = merge_source(spark, store, staged, warehouse, src.source_id, [table])[0]
        assert merged.dumps[dump_id]["dropped"] == touched, merged.dumps
    finally:
        capture.kill()
        capture.wait()
        store.stop()
    assert_warehouse_equals_source(src, warehouse, tables=("windowed",))
