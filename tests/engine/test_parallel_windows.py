"""Parallel watermark windows on the real sources: split planning from the key index, several
key ranges read at once between one LW and one HW, and a window that fails on one split."""
import json
import logging
import random
import re
import threading
from collections import Counter

import pytest

from dblog.model.schema import decode_key, normalize_key
from dblog.model.staged_format import ChunkMeta
from dblog.operations.reconcile import rebuild
from dblog.snapshot.dump import TableDump, create_dump, read_progress, set_control
from dblog.snapshot.dump_spec import DumpSpec
from dblog.snapshot.windows import SplitStaging, WindowPlan, WindowReader, plan_window
from dblog.sources.base import SourceError
from dblog.stagedlog.staged_log import StagedLog

from conftest import checkpoint, settle, wait_for
from test_convergence import assert_converged

LABELS = {  # a string key whose order is the server's collation, not Python's
    "mariadb": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT)",
}


def create_labels(src, rows: int = 700) -> None:
    src.sql(LABELS[src.kind].format(ns=src.namespace))
    values = ", ".join(f"('{'Ab'[i % 2]}{i * 7919 % 1000:03d}-{i}', 't{i}')" for i in range(rows))
    src.sql(f"INSERT INTO {src.namespace}.labels (code, title) VALUES {values}")


class TableWriter(threading.Thread):
    """Writes one table while a dump reads it, a transaction at a time (`change`), until stopped."""
    table = ""

    def __init__(self, src, seed: int):
        super().__init__(daemon=True)
        self.src, self.rng, self.stop, self.commits = src, random.Random(seed), threading.Event(), 0
        self.error: Exception | None = None

    def run(self) -> None:
        table, conn = self.src.table(self.table), self.src.admin()
        cur, n = conn.cursor(), 0
        try:
            while not self.stop.is_set():
                n += 1
                self.change(cur, table, n)
                conn.commit()
                self.commits += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test, which asserts the writer ran to the end
            self.error = exc
        finally:
            conn.close()   # an open transaction would hold the table's metadata lock past the test

    def change(self, cur, table: str, n: int) -> None:
        raise NotImplementedError


class LabelsWriter(TableWriter):
    """The string-key table: updates, deletes, re-inserts, new codes that sort between existing
    ones, and key updates (a row moves to another key)."""
    table = "labels"

    def change(self, cur, table: str, n: int) -> None:
        cur.execute(f"SELECT code FROM {table} ORDER BY code LIMIT 1 OFFSET %s", (self.rng.randrange(1500),))
        code, kind = cur.fetchall()[0][0], n % 4
        root = code.split("~")[0]   # a new key sorts just after its root: between existing keys
        if kind == 0:
            cur.execute(f"UPDATE {table} SET title = %s WHERE code = %s", (f"u{n}", code))
        elif kind == 1:
            cur.execute(f"DELETE FROM {table} WHERE code = %s", (code,))
            cur.execute(f"INSERT INTO {table} (code, title) VALUES (%s, %s)", (code, f"back{n}"))
        elif kind == 2:
            cur.execute(f"INSERT INTO {table} (code, title) VALUES (%s, %s)", (f"{root}~w{n}", f"new{n}"))
        else:
            cur.execute(f"UPDATE {table} SET code = %s WHERE code = %s", (f"{root}~k{n}", code))


DENSE = {  # an integer key its writer keeps dense: its windows split by arithmetic
    "mariadb": "CREATE TABLE {ns}.dense (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.dense (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
}


def create_dense(src, rows: int) -> None:
    src.sql(DENSE[src.kind].format(ns=src.namespace))
    src.sql(f"INSERT INTO {src.namespace}.dense (id, v) VALUES " + ", ".join(f"({i}, 0)" for i in range(1, rows + 1)))


class DenseWriter(TableWriter):
    """The dense integer-key table: updates, a delete and re-insert in one transaction, a key
    update, and a delete whose key the next change of its kind puts back: it stays dense however
    long it runs (a delete that was never put back thinned it below `windows.DENSE` on a slow
    machine, and no window stepped)."""
    table = "dense"
    missing: int | None = None   # the key the last delete took out

    def change(self, cur, table: str, n: int) -> None:
        key, kind = self.rng.randint(2, 2000), n % 4
        if kind == 0:
            cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (key,))
        elif kind == 1:
            cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
            cur.execute(f"INSERT INTO {table} (id, v) VALUES (%s, %s)", (key, n))
        elif kind == 2:   # the row moves above the dump's bound, a new one takes its key
            cur.execute(f"UPDATE {table} SET id = %s WHERE id = %s", (1_000_000 + n, key))
            cur.execute(f"INSERT INTO {table} (id, v) VALUES (%s, %s)", (key, n))
        elif self.missing is None:
            cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
            self.missing = key
        else:   # a change of another kind may have put it back already
            cur.execute(f"INSERT INTO {table} (id, v) SELECT %s, %s WHERE NOT EXISTS "
                        f"(SELECT 1 FROM {table} WHERE id = %s)", (self.missing, n, self.missing))
            self.missing = None


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


def walked_keys(src, conn, sql: str, params: list) -> int:
    """How many index entries the server stepped through to answer the query."""
    cur = conn.cursor()
    if src.kind == "mariadb":
        def steps():
            cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_rnd_next')")
            return sum(int(v) for _, v in cur.fetchall())
        before = steps()
        cur.execute(sql, params)
        cur.fetchall()
        return steps() - before
    cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
    plan = cur.fetchall()[0][0][0]["Plan"]
    nodes = [plan]
    while "Plans" in nodes[-1]:
        nodes.append(nodes[-1]["Plans"][0])
    # A bounded split may come back through a bitmap of the range and a sort of its rows: still
    # only the range's keys.
    assert nodes[-1]["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan") \
        and "Index Cond" in nodes[-1], nodes
    return nodes[-1]["Actual Rows"]


@pytest.mark.parametrize("table", ["accounts", "order_lines", "labels"])
def test_a_split_boundary_and_a_chunk_read_step_only_through_the_keys_they_return(src, table):
    """No scan from the table's first key: a window's reads cost what they return, wherever the
    dump is (a composite key on MariaDB walked the index from the start before)."""
    src.workload(seed=47, rows=6000).create()
    create_labels(src, 6000)
    source = src.source()
    schema = source.table_schema(src.table(table))
    keys = list(source.keys(schema))
    middle, dialect, conn = len(keys) // 2, source.dialect, src.admin()
    after, upto = keys[middle], keys[middle + 500]
    try:
        for (sql, params), returned in ((dialect.boundary_query(schema, after, None, 97), 97),
                                        (dialect.chunk_query(schema, after, 97), 97),
                                        (dialect.chunk_query(schema, after, None, upto), 500)):
            assert walked_keys(src, conn, sql, params) <= returned, f"{table}: {sql} stepped past what it returns"
    finally:
        conn.close()


def chunk_metas(src, table, dump_id) -> list[ChunkMeta]:
    staged = src.staged()
    return [ChunkMeta.of(staged.read_chunk(p)) for p in staged.chunk_files(src.source_id, table, dump_id)]


def test_a_dump_reading_four_key_ranges_per_window_converges_under_writes_on_every_key_kind(src):
    """The reading threads; the Spark reader plans the same windows in its driver and reads each
    split with the same query (its own run under writes is the executor-kill test below)."""
    src.workload(seed=42, rows=3000).create()
    create_labels(src, 2000)
    create_dense(src, 2000)
    src.start_capture()
    writer, threads = src.spawn_workload(seconds=3600, seed=43, rows=3000), [LabelsWriter(src, 46), DenseWriter(src, 48)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: all(t.commits > 10 for t in threads), 30, what="the table writers to commit")
        dump = src.dblog("dump", "start", "par4", "--source", src.source_id, "--all", "--chunk-size", "75",
                         "--parallelism", "4", check=True, env={"DBLOG_DUMP_READER": "threads"})
        assert "read on Spark executors" not in dump.stderr, dump.stderr[-2000:]
        assert f"{src.table('dense')}: windows now split the keys by arithmetic" in dump.stderr, \
            "no window of the dense integer key stepped"
        assert writer.poll() is None and all(t.is_alive() for t in threads), \
            f"the writers must still be running when the dump ends ({[t.error for t in threads]!r})"
    finally:
        writer.terminate(); writer.wait()
        for thread in threads:
            thread.stop.set(); thread.join()
    tables = json.loads(dump.stdout)["tables"]
    assert all(p["status"] == "done" for p in tables.values())
    settle(src)
    source, dropped = src.source(), 0
    for table in ("accounts", "order_lines", "labels", "dense"):
        name = src.table(table)
        metas = [m for m in chunk_metas(src, name, "par4") if m is not None]
        windows = Counter(m.lw for m in metas)
        assert max(windows.values()) == 4, f"{table}: no window staged four splits"
        assert len({m.hw for m in metas}) == len(windows), f"{table}: splits of one window with other HWs"
        staged = src.staged()
        if table in ("accounts", "dense"):  # rows inserted above the dump's starting bound come from the log only
            schema = source.table_schema(name)
            upto = normalize_key(decode_key(json.loads(tables[name]["upto_key"]), schema), schema)
            read = [key_of(schema, r) for p in staged.chunk_files(src.source_id, name, "par4")
                    for r in staged.read_chunk(p).select(schema.key).to_pylist()]
            assert max(read) <= upto < source.last_key(schema), "a split read past the dump's bound"
        dropped += sum(r.dropped for r in rebuild(staged, src.source_id, name, checkpoint(src))[1])
    assert dropped > 0, "no write landed inside a window: the test did not exercise the watermark rule"
    assert_converged(src, ["accounts", "order_lines", "labels", "dense"])


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


def test_dense_integer_keys_are_split_by_arithmetic_and_a_gap_neither_ends_the_dump_nor_is_stepped_through(
        src, monkeypatch, caplog):
    """Ids 1-300, then 5001-5300: windows step by 20 key values through each dense run (no
    boundary query), the first empty stepped window past 300 neither ends the dump nor steps
    through the 4,700-value gap window by window: the index finds 5001."""
    table = src.table("gappy")
    src.sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    for low in (1, 5001):
        src.sql(f"INSERT INTO {table} (id, v) VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(low, low + 300)))
    store, source = src.store(), src.source()
    asked = []
    key_after = source.key_after
    monkeypatch.setattr(source, "key_after", lambda *a: asked.append(a[1]) or key_after(*a))
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=20, parallelism=4))
    with caplog.at_level(logging.INFO, logger="dblog"):
        result = TableDump(store, source, src.staged(), dump_id, table).run()
    assert result.status == "done" and result.rows == 600
    staged = src.staged()
    keys = [k for p in staged.chunk_files(src.source_id, table, dump_id) for k in staged.read_chunk(p)["id"].to_pylist()]
    assert keys == [*range(1, 301), *range(5001, 5301)], "every row once, in key order"
    files = staged.chunk_files(src.source_id, table, dump_id)   # a stepped split stages a file, rows or not
    assert len(files) <= 4 * (600 // 80 + 2), f"{len(files)} chunk files for 600 rows: stepped through the gap"
    # From the index: the first two windows (the first starts below the first key), the one that
    # found the gap, and the one after it (the gap made it look sparse); three queries each.
    assert len(asked) == 4 * 3, f"{len(asked)} boundary queries: the dense runs were not stepped"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("by arithmetic" in m for m in messages) == 2 and any("from the key index" in m for m in messages), \
        messages
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
        written = write_watermark(slot, value)
        with lock:
            marks.append(value)
        return written

    class Watched(StagedLog):
        def write_chunk(self, source_name, schema, meta, rows, ops, shape=None):
            with lock:
                seen.append((meta.chunk, marks[-1] == meta.lw))
            return super().write_chunk(source_name, schema, meta, rows, ops, shape)

    source.write_watermark = watermark
    result = TableDump(store, source, Watched(str(src.staging)), dump_id, table).run()
    assert result.status == "done" and result.rows == 600
    assert sorted(seen) == [(n, True) for n in range(10)], "(chunk, staged after its LW and before its HW)"
    # Four windows: the ids are dense, so from the second on they step, and the one that steps up
    # to the dump's bound is the last (an index-planned dump ends with a fifth that reads nothing).
    assert len(marks) == 2 * 4, "a window's LW and HW each"
    store.stop()


def test_an_executor_killed_mid_window_fails_that_job_and_only_the_splits_it_did_not_stage_are_read_again(
        postgres, tmp_path):
    """The Spark reader: the Python worker reading a split dies (SIGKILL, once), so its window's
    job fails; the window is closed with the splits the other tasks staged, and the rest are read
    again in a window of their own. One source: the failed job and the window's closing are the
    driver's, whichever source the executors read (both are read there in test_type_fidelity)."""
    src = postgres
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
    assert "read on Spark executors" in dump.stderr, dump.stderr[-3000:]
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


@pytest.mark.both_sources   # (each source's own counter of rows written is the subject)
def test_windows_grow_while_the_source_takes_no_writes_and_go_back_to_the_chunk_size_at_a_write_elsewhere(
        src, monkeypatch):
    """A write to another table of the source, seen by its counter (PostgreSQL's reaches it once
    the writer's statistics are flushed: the test waits for the table's own), sends the next window
    back to the chunk size; quiet again, the windows grow again. Every row is read once."""
    monkeypatch.setenv("DBLOG_DUMP_QUIET_CHUNK_SIZE", "400")
    src.workload(seed=51, rows=6000).create()
    src.sql(f"CREATE TABLE {src.namespace}.elsewhere (id INT PRIMARY KEY)")
    src.start_capture()
    store, source, table = src.store(), src.source(), src.table("accounts")
    # PostgreSQL's counter must stand still 1.5 s before windows grow (tests/unit/test_window_growth.py);
    # a shorter wait keeps this table small.
    monkeypatch.setattr(type(source), "ROWS_WRITTEN_DELAY_S", min(type(source).ROWS_WRITTEN_DELAY_S, 0.2))
    dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=50, parallelism=2))
    windows: list[int] = []
    wrote_after: list[int] = []

    def on_chunk(progress, rows):
        windows.append(rows)
        if rows == 2 * 400 and not wrote_after:
            src.sql(f"INSERT INTO {src.namespace}.elsewhere (id) VALUES (1)")
            if src.kind == "postgres":
                wait_for(lambda: src.sql("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'elsewhere' "
                                         "AND schemaname = %s", params=[src.namespace])[0][0] == 1,
                         what="the write's statistics")
            wrote_after.append(len(windows))

    result = TableDump(store, source, src.staged(), dump_id, table, on_chunk).run()
    assert result.status == "done" and wrote_after, windows
    before, after = windows[:wrote_after[0]], windows[wrote_after[0]:]
    assert before[-3:] == [200, 400, 800], f"the splits did not double up to the top: {windows}"
    assert after[0] == 2 * 50, f"the window after the write read {after[0]} rows, not two 50-row splits: {windows}"
    assert max(after[1:]) > 2 * 50, f"the windows did not grow again once the source was quiet: {windows}"
    staged = src.staged()
    keys = [k for p in staged.chunk_files(src.source_id, table, dump_id) for k in staged.read_chunk(p)["id"].to_pylist()]
    assert len(keys) == len(set(keys)) == src.sql(f"SELECT COUNT(*) FROM {table}")[0][0], "a key was read twice or not at all"
    store.stop()
