"""Parallel watermark windows on the real sources: split planning from the key index, several
key ranges read at once between one LW and one HW, and a window that fails on one split."""
import json
import logging
import re
import threading
from collections import Counter

import pytest
from conftest import settle
from dblog.dump import TableDump, create_dump, read_progress, set_control
from dblog.dump_spec import DumpSpec
from dblog.schema import decode_key, normalize_key
from dblog.sources.base import SourceError
from dblog.staged import ChunkMeta
from dblog.staging import StagedLog
from dblog.windows import SplitStaging, WindowPlan, WindowReader, plan_window
from test_convergence import assert_converged

LABELS = {  # a string key whose order is the server's collation, not Python's
    "mariadb": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT)",
}


def create_labels(src, rows: int = 700) -> None:
    src.sql(LABELS[src.kind].format(ns=src.namespace))
    values = ", ".join(f"('{'Ab'[i % 2]}{i * 7919 % 1000:03d}-{i}', 't{i}')" for i in range(rows))
    src.sql(f"INSERT INTO {src.namespace}.labels (code, title) VALUES {values}")


def key_of(schema, row: dict) -> tuple:
    """A staged row's key."""
    return normalize_key(tuple(row[c] for c in schema.key), schema)


@pytest.mark.parametrize("table", ["accounts", "order_lines", "labels"])
def test_split_boundaries_are_every_nth_key_in_the_source_s_order_and_windows_read_each_row_once(src, table):
    src.workload(seed=41, rows=1000).create()
    create_labels(src)
    source = src.source()
    schema = source.table_schema(src.table(table))
    keys = [normalize_key(k, schema) for k in source.keys(schema)]
    staged, reader, stage = src.staged(), WindowReader(source), SplitStaging(src.staged(), "boundaries")
    try:
        splits = plan_window(source, schema, None, None, 97, 5)
        assert [normalize_key(s.upto, schema) for s in splits[:-1]] == [keys[97 * i - 1] for i in range(1, 5)]
        assert splits[-1].limit == 97 and splits[-1].upto is None
        read, after, windows, number = [], None, 0, 0
        while True:
            start = None if after is None else normalize_key(decode_key(json.loads(after), schema), schema)
            plan = WindowPlan.fresh(number, plan_window(source, schema, start, None, 97, 5))
            reads = reader.read(schema, plan, stage)
            if not sum(r.rows for r in reads):
                break
            for k in range(plan.parts):
                chunk = staged.staged_chunk(src.source_id, schema.name, "boundaries", number + k)
                read += [] if chunk is None else [key_of(schema, r) for r in chunk.select(schema.key).to_pylist()]
            after = plan.end_after({r.index: r for r in reads})
            windows, number = windows + 1, number + plan.parts
        assert read == keys, "the windows' staged splits are not every key once, in the source's order"
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
    for table in ("accounts", "order_lines", "labels"):
        metas = [m for m in chunk_metas(src, src.table(table), "par4") if m is not None]
        windows = Counter(m.lw for m in metas)
        assert max(windows.values()) == 4, f"{table}: no window staged four splits"
        assert len({m.hw for m in metas}) == len(windows), f"{table}: splits of one window with other HWs"
    settle(src)
    assert_converged(src, ["accounts", "order_lines", "labels"])


def test_a_window_whose_one_split_read_fails_keeps_the_splits_it_staged_and_reads_only_that_one_again(
        postgres, caplog, monkeypatch):
    """One split's connection is ended by the server between two windows, so the next window's
    read on it fails while its other splits succeed. (On MariaDB the driver's ping reconnects a
    dropped idle connection before the read, so no window fails that way there; the source
    restart test of test_faults runs parallel windows on both sources.) The Python driver reads
    here: a native read whose connection was ended is read again by it (test_native_reads)."""
    monkeypatch.setenv("DBLOG_DUMP_DECODER", "python")
    src = postgres
    src.workload(seed=44, rows=3000).create()
    src.start_capture()
    store, source, table = src.store(), src.source(), src.table("accounts")
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=50, parallelism=3))
    killed = []

    def on_chunk(progress, rows):
        if progress.chunks >= 3 and not killed:
            pid = dumper.reader._clones[1]._conn.get_backend_pid()  # the next window's third split
            src.sql("SELECT pg_terminate_backend(%s)", params=[pid])
            killed.append(progress.chunks)

    dumper = TableDump(store, source, src.staged(), dump_id, table, on_chunk)
    with caplog.at_level(logging.WARNING, logger="dblog"):
        result = dumper.run()
    assert killed and result.status == "done"
    messages = [r.getMessage() for r in caplog.records]
    assert any("window 3 of" in m and "retrying" in m for m in messages), messages
    assert any("window 3 was left unfinished; 2 of its 3 split(s) were staged" in m for m in messages), messages
    metas = [m for m in chunk_metas(src, table, dump_id) if m is not None]
    failed = [m for m in metas if m.chunk in (3, 4, 5)]
    assert [m.chunk for m in failed] == [3, 4], "the failed window staged its first two splits"
    again = [m for m in metas if m.chunk == 6]
    assert again and again[0].key_from == failed[-1].key_to and again[0].lw != failed[0].lw, \
        "the failed split was not read again, alone, in a window of its own"
    staged = src.staged()
    keys = [k for p in staged.chunk_files(src.source_id, table, dump_id) for k in staged.read_chunk(p)["id"].to_pylist()]
    assert len(keys) == len(set(keys)) == src.sql(f"SELECT COUNT(*) FROM {table}")[0][0], "a key was read twice"
    settle(src)
    assert_converged(src, ["accounts"])
    store.stop()


def test_every_split_is_staged_inside_its_window_before_the_high_watermark(mariadb):
    """A split's rows must be read between its window's watermarks: staging inside the window is
    what lets a crash keep them, and the window's HW is written only once all are staged."""
    src = mariadb
    src.workload(seed=45, rows=600).create()
    store, source, table = src.store(), src.source(), src.table("accounts")
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=60, parallelism=3))
    marks, seen = [], []
    write_watermark, lock = source.write_watermark, threading.Lock()

    def watermark(slot, value):
        write_watermark(slot, value)
        with lock:
            marks.append(value)

    class Watched(StagedLog):
        def write_chunk(self, source_name, schema, meta, rows, ops):
            with lock:
                seen.append((meta.chunk, marks[-1] == meta.lw))
            return super().write_chunk(source_name, schema, meta, rows, ops)

    source.write_watermark = watermark
    result = TableDump(store, source, Watched(str(src.staging)), dump_id, table).run()
    assert result.status == "done" and result.rows == 600
    assert sorted(seen) == [(n, True) for n in range(10)], "(chunk, staged after its LW and before its HW)"
    assert len(marks) == 2 * 5, "a window's LW and HW each (the last window reads nothing)"
    store.stop()


def test_an_executor_killed_mid_window_fails_that_job_and_only_the_splits_it_did_not_stage_are_read_again(
        src, tmp_path):
    """The Spark reader: the Python worker reading a split dies (SIGKILL, once), so its window's
    job fails; the window is closed with the splits the other tasks staged, and the rest are read
    again in a window of their own."""
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
    closed = re.search(r"window (\d+) was left unfinished; (\d) of its 3 split\(s\) were staged", dump.stderr)
    assert closed and int(closed[2]) < 3, dump.stderr[-3000:]
    table = src.table("accounts")
    metas = [m for m in chunk_metas(src, table, "killed") if m is not None]
    window, kept = int(closed[1]), int(closed[2])
    # A task of the failed job may still stage after the listing: never fewer than were counted.
    assert len([m for m in metas if window <= m.chunk < window + 3]) >= kept
    carried = [m for m in metas if m.chunk == window + 3]
    assert carried and len([m for m in metas if m.lw == carried[0].lw]) == 3 - kept, \
        "the next window did not read exactly the splits left unstaged"
    settle(src)
    assert_converged(src, ["accounts"])


def test_a_dump_cancelled_after_a_failed_window_still_lands_the_splits_that_window_staged(mariadb):
    """A window's third split is refused (not a transient error: the dump fails); the dump is
    then cancelled. The cancelling run writes that window's HW, so its two staged splits become
    ready for the merge instead of waiting for ever, and records them."""
    src = mariadb
    src.workload(seed=48, rows=600).create()
    store, source, table = src.store(), src.source(), src.table("accounts")
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=50, parallelism=3))
    dumper = TableDump(store, source, src.staged(), dump_id, table)
    staging = dumper.stage

    def refusing(reader, schema, plan, k):
        if plan.chunk == 3 and k == 2:
            raise SourceError("split 3 refused")
        return staging(reader, schema, plan, k)

    dumper.stage = refusing  # type: ignore[assignment]
    with pytest.raises(SourceError, match="split 3 refused"):
        dumper.run()
    failed = read_progress(store, source.name, dump_id, table)
    assert failed is not None and failed.window is not None and failed.chunks == 3
    set_control(store, source.name, dump_id, state="cancelled")
    marks, write = [], source.write_watermark
    source.write_watermark = lambda slot, value: (marks.append(value), write(slot, value))[1]
    result = TableDump(store, source, src.staged(), dump_id, table).run()
    assert result.status == "cancelled" and result.window is None and result.chunks == 5
    assert marks == [failed.window["hw"]], "the failed window's HW was not written on cancel"
    assert [m.chunk for m in chunk_metas(src, table, dump_id) if m is not None] == [0, 1, 2, 3, 4]
    store.stop()
