"""Watermark chunk dumps: scope, bad input, key lists, run-time controls, and no locks."""
import json
import threading
from collections import Counter

import pytest

from dblog.coordination import store as paths
from dblog.model.rules import visible_rows
from dblog.model.staged_format import ChunkMeta
from dblog.operations.reconcile import rebuild
from dblog.snapshot.dump import read_progress

from conftest import checkpoint, settle, wait_for
from test_convergence import assert_converged


def dumps_registered(env):
    store = env.store()
    try:
        return store.children(paths.dumps_path(env.source_id))
    finally:
        store.stop()


def only_dump_progress(env, table):
    (dump_id,) = dumps_registered(env)
    store = env.store()
    try:
        return read_progress(store, env.source_id, dump_id, table)
    finally:
        store.stop()


def chunk_metas(env, table) -> list[ChunkMeta]:
    staged = env.staged()
    return [ChunkMeta.of(staged.read_chunk(p)) for p in staged.chunk_files(env.source_id, table)]


@pytest.mark.parametrize("args, message", [
    (["--table", "nosuch"], "table t_{tag}.nosuch does not exist"),
    (["--table", "no_pk", "--keys", "[1]"], "has no primary key"),   # a key list needs a key
    (["--table", "accounts", "--keys", "[1, 2"], "--keys is not valid JSON"),
    (["--table", "accounts", "--keys", '["abc"]'], "malformed key list for t_{tag}.accounts: 'abc' is not an integer"),
    (["--table", "order_lines", "--keys", "[1]"], "has a key of 2 column(s): (order_id, line_no)"),
    (["--table", "accounts", "--chunk-size", "0"], "chunk size must be a whole number from 1 to 100,000, got 0"),
    (["--table", "accounts", "--delay", "-1"], "delay between chunks must be 0 to 3600 seconds"),
    (["--table", "accounts", "--table", "order_lines", "--keys", "[1]"], "a key list needs exactly one table"),
    ([], "say what to dump"),
])
def test_bad_dump_input_fails_with_the_problem_and_fix_and_writes_nothing(src, args, message):
    src.workload(rows=20).create()
    src.sql(f"CREATE TABLE {src.namespace}.no_pk (a INT, b TEXT)")
    result = src.dblog("dump", "--source", src.source_id, *args)
    assert result.returncode == 2
    assert message.format(tag=src.tag) in result.stderr, result.stderr
    assert dumps_registered(src) == []
    assert not (src.staging / src.source_id / "chunks").exists()


def test_a_key_list_dump_reads_those_keys_and_marks_missing_ones_absent(src):
    src.workload(seed=12, rows=100).create()
    src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--table", "order_lines", "--keys", "[[1, 1], [2, 1], [9999, 9]]",
              "--chunk-size", "2", check=True)
    settle(src)
    state, results = rebuild(src.staged(), src.source_id, src.table("order_lines"), checkpoint(src))
    assert [r.read for r in results] == [2, 1]
    assert set(visible_rows(state)) == {(1, 1), (2, 1)}
    assert state[(9999, 9)][1] is None, "an absent key must be staged as a tombstone"
    # Each chunk says which slice of the sorted key list it read; the progress, how far the list got.
    assert [(m.list_from, m.list_to, m.key_from, m.key_to) for m in chunk_metas(src, src.table("order_lines"))] \
        == [(0, 2, None, None), (2, 3, None, None)]
    progress = only_dump_progress(src, src.table("order_lines"))
    assert (progress.list_offset, progress.after_key) == (3, None)


def test_a_composite_key_table_is_dumped_in_key_order_with_row_value_pagination(src):
    src.workload(seed=13, rows=200).create()
    src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--table", "order_lines", "--chunk-size", "7", check=True)
    settle(src)
    staged = src.staged()
    keys = []
    for path in staged.chunk_files(src.source_id, src.table("order_lines")):
        chunk = staged.read_chunk(path)
        assert chunk.num_rows <= 7
        keys += list(zip(chunk["order_id"].to_pylist(), chunk["line_no"].to_pylist()))
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    # Each chunk reads on from the last key of the one before; the progress holds the last one read.
    metas = chunk_metas(src, src.table("order_lines"))
    assert metas[0].key_from is None and all(b.key_from == a.key_to for a, b in zip(metas, metas[1:]))
    assert json.loads(metas[-1].key_to) == list(keys[-1]) and metas[-1].list_from is None
    progress = only_dump_progress(src, src.table("order_lines"))
    assert (progress.after_key, progress.list_offset) == (metas[-1].key_to, 0)
    assert_converged(src, ["order_lines"])


def _run_in_background(env, dump_id):
    return env.spawn("dump", "run", dump_id, "--source", env.source_id)


def test_chunk_size_parallelism_pause_resume_and_cancel_act_on_a_running_dump(mariadb):
    env = mariadb
    env.workload(seed=14, rows=600).create()
    env.dblog("capture", "--init", "--source", env.source_id, check=True)
    dump_id = env.dblog("dump", "--source", env.source_id, "--table", "accounts", "--chunk-size", "10",
                        "--delay", "0.05", "--create-only", check=True).stdout.strip()
    store = env.store()
    progress = lambda: store.get(paths.table_progress_path(env.source_id, dump_id, env.table("accounts")))
    proc = _run_in_background(env, dump_id)
    wait_for(lambda: progress()["chunks"] >= 3, 60, what="3 chunks")
    env.dblog("dump", "throttle", dump_id, "--source", env.source_id, "--chunk-size", "3", "--parallelism", "3",
              check=True)
    env.dblog("dump", "pause", dump_id, "--source", env.source_id, check=True)
    # The worker reads the control before every chunk: it reports the pause and stops advancing.
    wait_for(lambda: "paused; waiting for resume" in proc.stderr.readline(), 60, interval=0, what="the pause")
    paused_at = progress()["chunks"]
    env.dblog("dump", "resume", dump_id, "--source", env.source_id, check=True)
    wait_for(lambda: progress()["chunks"] >= paused_at + 5, 60, what="5 more chunks")
    env.dblog("dump", "cancel", dump_id, "--source", env.source_id, check=True)
    assert proc.wait(60) == 0
    final = progress()
    assert final["status"] == "cancelled" and final["rows"] < 600
    chunks = [env.staged().read_chunk(p) for p in env.staged().chunk_files(env.source_id, env.table("accounts"), dump_id)]
    sizes = [c.num_rows for c in chunks]
    assert sizes[:3] == [10, 10, 10] and set(sizes[paused_at:]) == {3}
    # The throttled parallelism too: windows after the pause read three key ranges between one LW and HW.
    splits = Counter(ChunkMeta.of(c).lw for c in chunks)
    assert [splits[ChunkMeta.of(c).lw] for c in chunks[:3]] == [1, 1, 1]
    assert {splits[ChunkMeta.of(c).lw] for c in chunks[paused_at:]} == {3}
    assert env.dblog("dump", "resume", dump_id, "--source", env.source_id).returncode == 2
    store.stop()


def test_a_writer_with_a_one_second_lock_wait_never_times_out_during_a_dump(src):
    src.workload(seed=15, rows=5000).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    stop, commits, timeouts = threading.Event(), [0], []

    def writer():
        conn = src.admin()
        cur = conn.cursor()
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1" if src.kind == "mariadb" else "SET lock_timeout = '1s'")
        i = 0
        while not stop.is_set():
            i += 1
            try:
                # Rows at both ends of the key range, so the dump reads where the writer writes.
                cur.execute(f"UPDATE {src.table('accounts')} SET balance = balance + 1 WHERE id IN (%s, %s)",
                            (i % 5000 + 1, 5000 - i % 5000))
                conn.commit()
                commits[0] += 1
            except Exception as exc:  # a lock wait timeout is the failure this test looks for
                timeouts.append(repr(exc))
                conn.rollback()
        conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: commits[0] > 10, 30, what="the writer to commit")
        before = commits[0]
        src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "200", check=True)
        during = commits[0] - before
    finally:
        stop.set()
        thread.join()
    assert timeouts == [] and during > 0


def test_a_table_the_capture_user_may_not_read_is_refused_before_anything_is_written(postgres):
    # In the captured schema (a table of another one is refused for that first: see test_bad_input).
    postgres.workload(rows=20).create()
    postgres.sql(f"CREATE TABLE {postgres.table('secrets')} (id INT PRIMARY KEY)",
                 f"REVOKE SELECT ON {postgres.table('secrets')} FROM dblog")
    result = postgres.dblog("dump", "--source", postgres.source_id, "--table", "secrets")
    assert result.returncode == 2
    assert f"{postgres.table('secrets')} does not exist, or user dblog may not read it" in result.stderr
    assert dumps_registered(postgres) == []


def test_status_reports_capture_position_lag_and_dump_progress_as_json(src):
    src.workload(seed=16, rows=50).create()
    src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "20", check=True)
    settle(src)
    status = json.loads(src.dblog("status", "--json", check=True).stdout)[src.source_id]
    assert status["capture"]["position"] is not None and status["capture"]["lag_s"] is not None
    assert len(status["capture"]["leaders"]) == 1
    (dump,) = status["dumps"]
    progress = dump["tables"][src.table("accounts")]
    assert dump["state"] == "done" and progress["rows"] == 50 and progress["chunks"] == 3


def test_a_registration_retried_for_the_same_request_names_the_same_dump_and_finishes_it(mariadb):
    """A start task whose worker died after it wrote the dump's scope: its retry (the same Airflow
    run) finishes registering that dump; any other request for that id is refused."""
    from dblog.snapshot.dump import create_dump
    from dblog.snapshot.dump_spec import DumpError, DumpSpec
    mariadb.workload(rows=20).create()
    table = mariadb.table("accounts")
    store = mariadb.store()
    try:
        def register(request):
            return create_dump(store, mariadb.source(), DumpSpec(tables=[table], dump_id="d1", request=request))
        assert register("dblog_dump/run-1/0/src") == "d1"
        store.delete(paths.control_path(mariadb.source_id, "d1"))   # (the try died before these)
        store.delete(paths.table_progress_path(mariadb.source_id, "d1", table))
        assert register("dblog_dump/run-1/0/src") == "d1"
        assert store.get(paths.control_path(mariadb.source_id, "d1"))["state"] == "running"
        assert read_progress(store, mariadb.source_id, "d1", table).table == table
        for other in ("dblog_dump/run-1/1/src", None):   # a cleared run; the CLI
            with pytest.raises(DumpError, match="dump d1 already exists"):
                register(other)
        assert dumps_registered(mariadb) == ["d1"]
    finally:
        store.stop()


def test_a_row_inserted_after_the_dump_read_its_bound_and_before_its_first_low_watermark_is_read(src):
    """A rebuild keeps only the log after its dump's first LW (`merge/rebuild`): such a row's insert
    is before it, so the dump must read the row, with a bound read again after that LW."""
    from dblog.snapshot.dump import create_dump, run_dump
    from dblog.snapshot.dump_spec import DumpSpec
    src.workload(rows=50).create()
    table, source, staged = src.table("accounts"), src.source(), src.staged()
    read_bound = source.last_key
    bounds = []

    def last_key(schema):
        top = read_bound(schema)
        if not bounds:   # a writer commits right after the dump reads its bound
            src.sql(f"INSERT INTO {table} (id, name) VALUES (100001, 'late')")
        bounds.append(top)
        return top
    source.last_key = last_key
    with src.store() as store:
        run_dump(store, source, staged, create_dump(store, source, DumpSpec(tables=[table], chunk_size=1000)))
    ids = [i for path in staged.chunk_files(src.source_id, table) for i in staged.read_chunk(path)["id"].to_pylist()]
    assert 100001 in ids and bounds[0] < (100001,) <= bounds[1], bounds
