"""Parallel watermark windows on the real sources: split planning from the key index, several
key ranges read at once between one LW and one HW, and a window that fails on one split."""
import json
import logging
import threading

import pytest
from conftest import settle
from dblog import state as paths
from dblog.dump import DumpSpec, TableDump, create_dump
from dblog.schema import normalize_key
from dblog.staged import ChunkMeta
from dblog.staging import StagedLog
from dblog.windows import WindowReader, plan_window
from test_convergence import assert_converged

LABELS = {  # a string key whose order is the server's collation, not Python's
    "mariadb": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT)",
}


def create_labels(src, rows: int = 700) -> None:
    src.sql(LABELS[src.kind].format(ns=src.namespace))
    values = ", ".join(f"('{'Ab'[i % 2]}{i * 7919 % 1000:03d}-{i}', 't{i}')" for i in range(rows))
    src.sql(f"INSERT INTO {src.namespace}.labels (code, title) VALUES {values}")


def key_of(schema, row) -> tuple:
    return normalize_key(schema.key_of_tuple(row), schema)


@pytest.mark.parametrize("table", ["accounts", "order_lines", "labels"])
def test_split_boundaries_are_every_nth_key_in_the_source_s_order_and_windows_read_each_row_once(src, table):
    src.workload(seed=41, rows=1000).create()
    create_labels(src)
    source = src.source()
    schema = source.table_schema(src.table(table))
    keys = [normalize_key(k, schema) for k in source.keys(schema)]
    reader = WindowReader(source)
    try:
        splits = plan_window(source, schema, None, None, 97, 5)
        assert [normalize_key(s.upto, schema) for s in splits[:-1]] == [keys[97 * i - 1] for i in range(1, 5)]
        assert splits[-1].limit == 97 and splits[-1].upto is None
        read, after, windows = [], None, 0
        while True:
            rows = reader.read(schema, plan_window(source, schema, after, None, 97, 5))
            if not rows:
                break
            read += [key_of(schema, r) for r in rows]
            after, windows = schema.key_of_tuple(rows[-1]), windows + 1
        assert read == keys, "the windows' reads are not every key once, in the source's order"
        assert windows == -(-len(keys) // (97 * 5))
    finally:
        reader.close()


def chunk_metas(src, table, dump_id) -> list[ChunkMeta]:
    staged = src.staged()
    return [ChunkMeta.of(staged.read_chunk(p)) for p in staged.chunk_files(src.source_id, table, dump_id)]


@pytest.mark.parametrize("reader", ["threads", "spark"])
def test_a_dump_reading_four_key_ranges_per_window_converges_under_writes_on_every_key_kind(src, reader):
    src.workload(seed=42, rows=3000).create()
    create_labels(src, 2000)
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=43, rows=3000)
    dump = src.dblog("dump", "start", "par4", "--source", src.source_id, "--all", "--chunk-size", "37",
                     "--parallelism", "4", check=True, env={"DBLOG_DUMP_READER": reader})
    assert ("read on Spark executors" in dump.stderr) == (reader == "spark"), dump.stderr[-2000:]
    assert writer.poll() is None, "the writer must still be running when the dump ends"
    writer.terminate(); writer.wait()
    tables = json.loads(dump.stdout)["tables"]
    assert all(p["status"] == "done" for p in tables.values())
    staged = src.staged()
    for table in ("accounts", "order_lines", "labels"):
        sizes = [staged.read_chunk(p).num_rows
                 for p in staged.chunk_files(src.source_id, src.table(table), "par4")]
        assert max(sizes) > 37, f"{table}: no window read more than one split"
        assert max(sizes) <= 4 * 37 + 40, f"{table}: a window read far more than its four splits"
    settle(src)
    assert_converged(src, ["accounts", "order_lines", "labels"])


def test_a_window_whose_one_split_read_fails_is_read_again_as_a_whole_and_no_half_window_is_recorded(
        postgres, caplog):
    """One split's connection is ended by the server between two windows, so the next window's
    read on it fails while its other splits succeed (chunk k is recorded after window k+1 is
    read: the window read next is k+2). (On MariaDB the driver's ping reconnects a
    dropped idle connection before the read, so no window fails that way there; the source
    restart test of test_faults runs parallel windows on both sources.)"""
    src = postgres
    src.workload(seed=44, rows=3000).create()
    src.start_capture()
    store, source, table = src.store(), src.source(), src.table("accounts")
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=50, parallelism=3))
    killed = []

    def on_chunk(progress, rows):
        if progress.chunks == 2 and not killed:
            pid = dumper.reader._clones[1]._conn.get_backend_pid()  # the window's third split
            src.sql("SELECT pg_terminate_backend(%s)", params=[pid])
            killed.append(progress.chunks)

    dumper = TableDump(store, source, src.staged(), dump_id, table, on_chunk)
    with caplog.at_level(logging.WARNING, logger="dblog"):
        result = dumper.run()
    assert killed and result.status == "done"
    assert any("chunk 3 of" in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records), \
        "the failed window was not retried"
    metas = chunk_metas(src, table, dump_id)
    assert [m.chunk for m in metas] == list(range(result.chunks))
    assert [m.key_from for m in metas[1:]] == [m.key_to for m in metas[:-1]], "windows do not follow each other"
    staged = src.staged()
    keys = [k for p in staged.chunk_files(src.source_id, table, dump_id) for k in staged.read_chunk(p)["id"].to_pylist()]
    assert len(keys) == len(set(keys)) == src.sql(f"SELECT COUNT(*) FROM {table}")[0][0]
    settle(src)
    assert_converged(src, ["accounts"])
    store.stop()


def test_the_next_window_is_read_while_one_is_staged_and_a_window_is_recorded_only_once_staged(mariadb):
    """Each chunk's staging waits for the next window's LW: with the reads and the staging one
    after the other that never comes (the wait times out and the test fails)."""
    src = mariadb
    src.workload(seed=45, rows=600).create()
    store, source, table = src.store(), src.source(), src.table("accounts")
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=100))
    marks, lows, seen = [], {}, []
    write_watermark = source.write_watermark

    def watermark(slot, value):
        write_watermark(slot, value)
        marks.append(value)
        if len(marks) % 2:   # each window writes its LW, then its HW (the last, empty one too)
            lows.setdefault(len(marks) // 2, threading.Event()).set()

    class Watched(StagedLog):
        def write_chunk(self, source_name, schema, meta, rows, ops):
            recorded = store.get(paths.table_progress_path(source.name, dump_id, table))["chunks"]
            read_next = lows.setdefault(meta.chunk + 1, threading.Event()).wait(30)
            seen.append((meta.chunk, recorded, read_next))
            return super().write_chunk(source_name, schema, meta, rows, ops)

    source.write_watermark = watermark
    result = TableDump(store, source, Watched(str(src.staging)), dump_id, table).run()
    assert result.status == "done" and result.rows == 600
    assert [(n, n, True) for n in range(6)] == seen, \
        "(chunk, chunks recorded when it was staged, next window read meanwhile) per chunk"
    store.stop()


def test_an_executor_killed_mid_window_fails_that_window_which_is_read_again_as_a_whole(src, tmp_path):
    """The Spark reader: the Python worker reading the fourth split dies (SIGKILL, once), so its
    window's job fails; the window is read again (fresh watermarks, the same chunk number) and
    nothing of the failed one is staged or recorded."""
    src.workload(seed=46, rows=2000).create()
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=47, rows=2000)
    once = tmp_path / "an-executor-was-killed"
    dump = src.dblog("dump", "start", "killed", "--source", src.source_id, "--table", "accounts",
                     "--chunk-size", "60", "--parallelism", "3", check=True,
                     env={"DBLOG_DUMP_READER": "spark", "DBLOG_CRASH_AT": "dump.split_read@2",
                          "DBLOG_CRASH_ONCE": str(once)})
    writer.terminate(); writer.wait()
    assert once.exists(), "no executor reached the crash point"
    assert "the Spark job reading" in dump.stderr and "retrying" in dump.stderr, dump.stderr[-3000:]
    table = src.table("accounts")
    metas = chunk_metas(src, table, "killed")
    result = json.loads(dump.stdout)["tables"][table]
    assert [m.chunk for m in metas] == list(range(result["chunks"])), "a failed window left a chunk behind"
    assert [m.key_from for m in metas[1:]] == [m.key_to for m in metas[:-1]], "windows do not follow each other"
    settle(src)
    assert_converged(src, ["accounts"])

