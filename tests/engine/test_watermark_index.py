"""The watermark index (dblog.coordination.watermark_index) on the real services: the capture indexes every
watermark at or before its checkpoint, a crash between staging and checkpoint leaves it
consistent, an upgraded deployment's capture back-fills it once, entries can be removed, and
`caught_up` answers from it without reading the staged watermark log."""
import signal
import uuid

import pytest

from dblog.capture.capture_loop import caught_up, sync_point
from dblog.coordination import store as paths
from dblog.coordination import watermark_index
from dblog.coordination.store import Fenced, StateStore
from dblog.coordination.watermark_index import staged_positions
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.staged_log import StagedLog

from conftest import PORTS, checkpoint, settle, wait_for


class NoWatermarkLog(StagedLog):
    """A staged log whose watermark table must not be read (nor listed)."""

    def segments(self, source, table, *args, **kwargs):
        assert table != WATERMARK_TABLE, "the staged watermark log was read"
        return super().segments(source, table, *args, **kwargs)


def indexed(store, source: str, ids) -> dict[str, str]:
    """The index's entries for `ids`, read node by node (no fallback to the staged log)."""
    return {i: p for i in ids if (p := store.get(paths.watermark_path(source, i))) is not None}


def assert_index_matches_the_staged_log(src, store) -> dict[str, str]:
    """Every staged watermark up to the checkpoint is indexed at its staged position, and no entry
    disagrees with the staged log. Returns the staged watermarks up to the checkpoint."""
    upto = checkpoint(src)
    staged = staged_positions(src.staged(), src.source_id)
    expected = {i: p for i, p in staged.items() if p <= upto}
    found = indexed(store, src.source_id, staged)
    assert {i: found.get(i) for i in expected} == expected, "a checkpointed watermark is missing from the index"
    assert all(staged[i] == p for i, p in found.items()), "an index entry disagrees with the staged log"
    return expected


def test_after_a_dump_under_capture_every_watermark_up_to_the_checkpoint_is_indexed(src):
    src.workload(seed=71, rows=300).create()
    src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--all", "--chunk-size", "40", check=True)
    settle(src)
    with src.store() as store:
        expected = assert_index_matches_the_staged_log(src, store)
        assert len(expected) >= 2 * 8, "the dump's low and high watermarks"
        assert watermark_index.built(store, src.source_id)
        ids = list(expected) + ["not-a-staged-watermark"]
        no_log = NoWatermarkLog(str(src.staging))
        assert watermark_index.positions(store, no_log, src.source_id, ids) == expected


@pytest.mark.parametrize("point", ["capture.mid_flush", "capture.before_checkpoint"])
def test_a_capture_killed_between_staging_and_its_checkpoint_leaves_the_index_consistent_after_restart(
        mariadb, point):
    mariadb.sql(f"CREATE TABLE {mariadb.table('t')} (id INT PRIMARY KEY)")
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    source = mariadb.source()
    marks = [str(uuid.uuid4()) for _ in range(6)]
    for mark in marks:  # one transaction each: with --flush-rows 1, one flush each
        source.write_watermark("crash", mark)
    crashing = mariadb.spawn("capture", "--source", mariadb.source_id, "--flush-rows", "1",
                             env={"DBLOG_CRASH_AT": f"{point}@3"})
    assert crashing.wait(timeout=120) == -signal.SIGKILL, crashing.stderr.read()
    with mariadb.store() as store:
        upto = checkpoint(mariadb)
        staged = staged_positions(mariadb.staged(), mariadb.source_id)
        third = staged[marks[2]]
        assert upto < third, "the third flush moved the checkpoint"
        # Killed after the segment, the third mark is staged but not indexed; killed after the
        # index write, it is indexed past the checkpoint. Either way readers wait on the checkpoint.
        assert (marks[2] in indexed(store, mariadb.source_id, marks)) == (point == "capture.before_checkpoint")
        assert caught_up(store, mariadb.staged(), mariadb.source_id, marks[2]) is None
        mariadb.spawn("capture", "--source", mariadb.source_id)  # re-stages and re-indexes the third
        settle(mariadb)
        expected = assert_index_matches_the_staged_log(mariadb, store)
        assert set(marks) <= set(expected)


def test_an_upgraded_deployment_reads_the_staged_log_until_its_capture_back_fills_the_index_once(src):
    src.workload(seed=72, rows=200).create()
    first = src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "50", check=True)
    settle(src)
    first.terminate(); first.wait()
    with src.store() as store:
        # What a deployment from before the index has: watermarks staged, none indexed.
        store.delete(f"/{src.source_id}/watermarks", recursive=True)
        everything = staged_positions(src.staged(), src.source_id)
        assert not watermark_index.built(store, src.source_id) and not indexed(store, src.source_id, everything)
        assert watermark_index.positions(store, src.staged(), src.source_id, everything) == everything

        second = src.spawn("capture", "--source", src.source_id)
        wait_for(lambda: watermark_index.built(store, src.source_id), 60, what="the back-fill")
        assert indexed(store, src.source_id, everything) == everything
        marker = store.get(paths.watermark_index_built_path(src.source_id))
        assert marker["backfilled"] == len(everything)
        settle(src)
        second.terminate(); second.wait()
        src.spawn("capture", "--source", src.source_id)
        settle(src)
        assert store.get(paths.watermark_index_built_path(src.source_id)) == marker, "the back-fill ran again"
        assert_index_matches_the_staged_log(src, store)


def test_caught_up_answers_from_the_index_without_reading_the_staged_watermark_log(mariadb):
    mariadb.workload(seed=73, rows=50).create()
    mariadb.start_capture()
    no_log = NoWatermarkLog(str(mariadb.staging))
    with mariadb.store() as store:
        wait_for(lambda: watermark_index.built(store, mariadb.source_id), 60, what="the capture to start")
        mark = sync_point(mariadb.source())
        position = wait_for(lambda: caught_up(store, no_log, mariadb.source_id, mark), 60, what="the sync watermark")
        assert position == staged_positions(mariadb.staged(), mariadb.source_id)[mark] <= checkpoint(mariadb)


def test_index_writes_are_fenced_keep_existing_entries_and_can_be_removed_by_position_or_id(services):
    store = StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/test_{uuid.uuid4().hex[:8]}", timeout=3).start()
    other = StateStore(store.hosts, store.chroot, timeout=3).start()
    try:
        lease = store.lease(paths.capture_lock("s"), "test")
        first = {f"w{i}": f"p{i:03d}" for i in range(700)}  # more than one transaction's worth
        store.fenced_create(lease, {paths.watermark_path("s", i): p for i, p in first.items()})
        # A re-run after a crash writes some of the same facts again, with new ones.
        again = {"w1": "p001", "w2": "p002", "w700": "p700"}
        store.fenced_create(lease, {paths.watermark_path("s", i): p for i, p in again.items()})
        wanted = [*first, "w700", "w-missing"]
        assert indexed(store, "s", wanted) == {**first, "w700": "p700"}

        assert watermark_index.forget_before(store, "s", "p100") == 100
        assert watermark_index.forget(store, "s", ["w100", "w101", "w-missing"]) == 2
        left = indexed(store, "s", wanted)
        assert min(left.values()) == "p102" and len(left) == 599

        other.zk.delete(f"{lease.lock.path}/{lease.lock.node}")  # the session's end takes the lock node
        with pytest.raises(Fenced):
            store.fenced_create(lease, {paths.watermark_path("s", "late"): "p999"})
        assert store.get(paths.watermark_path("s", "late")) is None
    finally:
        store.stop(); other.stop()
