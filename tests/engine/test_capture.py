"""Capture on the real sources: ordering, durability before checkpoint, leadership and fencing."""
import os
import signal
import socket

import pytest

from dblog.capture.capture_loop import Capture
from dblog.coordination import store as paths
from dblog.coordination.checkpoint import checkpoint_path, ensure_checkpoint
from dblog.coordination.store import Fenced
from dblog.model.staged_format import POSITION
from dblog.sources.base import SourceError

from conftest import PORTS, checkpoint, settle, wait_for


@pytest.mark.both_sources   # (each source's own capture, reader or setup: the subject)
def test_staged_positions_are_unique_and_increase_in_commit_order(src):
    w = src.workload(seed=5, rows=300)
    w.create()
    src.start_capture()
    w.run(seconds=2)
    settle(src)
    log = src.staged().read_log(src.source_id, src.table("accounts"))
    positions = log["_position"].to_pylist()
    assert len(positions) > 50 and positions == sorted(set(positions))
    if src.kind == "postgres":
        # The suite's server starts its WAL at LSN 3/0, past where the LSN fills a position's first
        # part (2/540BE3FF), as a long-lived production server is: positions use the overflow lane.
        assert all(p.startswith("9999999999-") for p in positions)
    # Commit order: a transaction's events are contiguous, transactions never interleave.
    txids = [t for t in log["_txid"].to_pylist()]
    seen, previous = set(), None
    for t in txids:
        assert t == previous or t not in seen, f"transaction {t} interleaved with another"
        seen.add(t); previous = t


def test_a_sync_point_is_staged_as_soon_as_it_is_read_and_a_watermark_of_a_dump_waits_for_its_batch(src):
    """`dblog sync` (and a merge after a dump) waits for its sync point, so the capture stages it
    at once. Here nothing else would stage it for minutes: the flush timer is 300 s, the row
    bound out of reach, and the stream reports itself idle only after 120 s of quiet."""
    import threading

    from dblog.capture.capture_loop import caught_up, sync_point
    store, source, writer, staged = src.store(), src.source(), src.source(), src.staged()
    ensure_checkpoint(store, source)
    capture = Capture(source, store, staged, flush_rows=10_000_000, flush_seconds=300, idle_timeout=120)
    runner = threading.Thread(target=capture.run, daemon=True)
    runner.start()
    try:
        wait_for(capture.leading.is_set, 30, what="the capture to lead")
        writer.write_watermark("a-dump-window", "held")   # a dump's watermark: batched as any event
        mark = sync_point(writer)
        wait_for(lambda: caught_up(store, staged, src.source_id, mark), 60,
                 what="the sync point staged and checkpointed without a flush timer or an idle stream")
        assert capture.stats.flushes == 1, "the dump's watermark and the sync point went out in one batch"
    finally:
        capture.stop_event.set()
        sync_point(writer)   # wakes the stream, so the loop sees the stop
        runner.join(60)
        store.stop()
    assert not runner.is_alive()


def test_a_crashed_capture_resumes_from_its_checkpoint_and_restaged_duplicates_are_harmless(src):
    w = src.workload(seed=6, rows=300)
    w.create()
    cap = src.start_capture("--flush-seconds", "0.2")
    w.run(seconds=2)
    store = src.store()
    wait_for(lambda: (store.get(checkpoint_path(src.source_id)) or {}).get("position"), 60, what="a checkpoint")
    os.kill(cap.pid, signal.SIGKILL); cap.wait()
    checkpoint = store.get(checkpoint_path(src.source_id))
    # Re-stage from the checkpoint with a fresh capture, twice over the same range.
    staged = src.staged()
    before = staged.read_log(src.source_id, src.table("accounts"))
    src.spawn("capture", "--source", src.source_id)
    w.run(seconds=1)
    settle(src)
    after = staged.read_log(src.source_id, src.table("accounts"))
    assert after.num_rows >= before.num_rows
    assert after.slice(0, before.num_rows).equals(before), "re-staging changed already staged events"
    wait_for(lambda: store.get(checkpoint_path(src.source_id))["position"] > checkpoint["position"],
             30, what="the checkpoint to advance")
    store.stop()


def test_a_standby_capture_waits_and_takes_over_when_the_leader_dies(src):
    src.workload(seed=7, rows=100).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    store = src.store()
    lock = paths.capture_lock(src.source_id)
    leader = src.spawn("capture", "--source", src.source_id)
    wait_for(lambda: store.lock_holders(lock), 30, what="a leader")
    standby = src.spawn("capture", "--source", src.source_id)
    wait_for(lambda: len(store.zk.get_children(lock)) == 2, 30, what="the standby to queue")
    host = socket.gethostname()
    assert store.lock_holders(lock)[0] == f"{host}:{leader.pid}"
    os.kill(leader.pid, signal.SIGKILL); leader.wait()
    wait_for(lambda: store.lock_holders(lock)[:1] == [f"{host}:{standby.pid}"], 30, what="the standby to lead")
    src.workload(seed=8, rows=100).run(seconds=0.5)
    settle(src)
    # The checkpoint follows the staged segments (never precedes them): await it.
    wait_for(lambda: store.get(checkpoint_path(src.source_id))["leader"] == f"{host}:{standby.pid}",
             30, what="the standby's checkpoint")
    store.stop()


def test_a_capture_that_lost_its_lease_can_neither_stage_nor_move_the_checkpoint(mariadb):
    mariadb.workload(seed=9, rows=50).create()
    store, other = mariadb.store(), mariadb.store()
    source = mariadb.source()
    ensure_checkpoint(store, source)
    before = store.get(checkpoint_path(source.name))
    capture = Capture(source, store, mariadb.staged())
    capture.lease = store.lease(paths.capture_lock(source.name), "deposed")
    # The session behind the lease ends (as on expiry): its ephemeral lock node goes with it.
    other.zk.delete(f"{capture.lease.lock.path}/{capture.lease.lock.node}")
    with pytest.raises(Fenced):
        store.fenced_put(capture.lease, checkpoint_path(source.name), {"position": "forged"})
    from dblog.capture.capture_loop import Batch
    from dblog.sources.base import Transaction
    batch = Batch()
    batch.add(Transaction([], {"log_file": "x", "log_pos": 4}))
    with pytest.raises(Fenced):
        capture._flush(batch)
    assert store.get(checkpoint_path(source.name)) == before
    store.stop(); other.stop()


@pytest.mark.alone  # changes the server's binlog_row_image for every session
def test_a_binlog_without_full_row_images_is_refused_with_the_fix(mariadb):
    mariadb.sql("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        result = mariadb.dblog("capture", "--init", "--source", mariadb.source_id)
    finally:
        mariadb.sql("SET GLOBAL binlog_row_image = 'FULL'")
    assert result.returncode == 2
    assert "binlog_row_image is MINIMAL: set binlog_row_image=FULL" in result.stderr
    assert not mariadb.staging.exists()


def test_a_postgres_role_without_replication_is_refused_with_the_fix(postgres):
    postgres.sql("DROP ROLE IF EXISTS dblog_norepl", "CREATE ROLE dblog_norepl LOGIN PASSWORD 'x'")
    from dblog.sources.postgres import PostgresSource
    source = PostgresSource("t_norepl", "127.0.0.1", PORTS["POSTGRES"],
                            "dblog_norepl", "x", "shop", schema=postgres.namespace)
    with pytest.raises(SourceError, match="it lacks the REPLICATION attribute") as refused:
        source.preflight()
    assert "\n    ALTER ROLE dblog_norepl REPLICATION;\n" in str(refused.value)  # the statement that fixes it
    source.close()
    postgres.sql("DROP ROLE dblog_norepl")


def test_an_update_that_leaves_a_toasted_value_unchanged_keeps_that_value(postgres):
    postgres.sql(f"CREATE TABLE {postgres.namespace}.docs (id INT PRIMARY KEY, body TEXT, n INT)")
    postgres.start_capture()
    # 40 kB of incompressible text is stored out of line (TOAST); pgoutput then omits it from
    # the new tuple of an update that does not change it.
    postgres.sql(f"INSERT INTO {postgres.namespace}.docs SELECT 1, string_agg(md5(g::text), ''), 0 "
                 "FROM generate_series(1, 1250) g",
                 f"UPDATE {postgres.namespace}.docs SET n = 1 WHERE id = 1")
    settle(postgres)
    log = postgres.staged().read_log(postgres.source_id, postgres.table("docs"))
    assert log["_unchanged"].to_pylist()[-1] == ["body"]
    from test_convergence import assert_converged
    assert_converged(postgres, ["docs"])


def test_the_checkpoint_never_moves_past_a_segment_that_failed_to_stage(mariadb):
    """Invariant 2: a staging failure (disk full, lost bucket) leaves the checkpoint where it was."""
    from dblog.stagedlog.staged_log import StagedLog

    class DiskFullAfterFirstSegment(StagedLog):
        writes = 0

        def write_segment(self, source, schema, rows):
            # (the server's shared watermark table may stage too: count only this test's table)
            DiskFullAfterFirstSegment.writes += schema.name.endswith(".t")
            if DiskFullAfterFirstSegment.writes > 1:
                raise OSError(28, "No space left on device")
            return super().write_segment(source, schema, rows)

    mariadb.sql(f"CREATE TABLE {mariadb.table('t')} (id INT PRIMARY KEY)")
    store, source = mariadb.store(), mariadb.source()
    ensure_checkpoint(store, source)
    staged = DiskFullAfterFirstSegment(str(mariadb.staging))
    conn = mariadb.admin()
    conn.autocommit(True)
    for i in range(200):  # one table, one row a transaction: each flush writes exactly one segment
        conn.cursor().execute(f"INSERT INTO {mariadb.table('t')} VALUES ({i})")
    conn.close()
    capture = Capture(source, store, staged, flush_rows=50)
    with pytest.raises(OSError, match="No space left"):
        capture.run(duration=30)
    checkpoint = store.get(checkpoint_path(source.name))
    staged_positions = staged.read_log(source.name, mariadb.table("t"))["_position"].to_pylist()
    assert len(staged_positions) == 50 and checkpoint["position"] == max(staged_positions)
    store.stop()


def test_the_change_index_names_every_table_with_events_behind_the_checkpoint_at_their_newest_position(mariadb):
    """What a merge cycle trusts to pass a table over (dblog.coordination.changed_tables): written
    before the checkpoint, so no staged event at or before the checkpoint is newer than its entry."""
    from dblog.coordination import changed_tables
    src = mariadb
    names = ("a", "b", "c")
    src.sql(*[f"CREATE TABLE {src.table(t)} (id INT PRIMARY KEY, v INT)" for t in names])
    src.start_capture()
    src.sql(*[f"INSERT INTO {src.table(t)} VALUES ({i}, {i})" for i in range(30) for t in names[:2]])
    settle(src)
    src.sql(f"UPDATE {src.table('b')} SET v = v + 1 WHERE id < 5")
    settle(src)
    with src.store() as store:
        index = changed_tables.load_index(store, src.source_id)
        upto = checkpoint(src)
    assert index is not None and set(index.tables) == {src.table("a"), src.table("b")}   # c: nothing staged
    for t in names[:2]:
        newest = src.staged().read_log(src.source_id, src.table(t), high=upto)[POSITION].to_pylist()[-1]
        assert index.tables[src.table(t)] >= newest
        assert not index.newer(src.table(t), newest, upto)   # merged up to it: passed over
