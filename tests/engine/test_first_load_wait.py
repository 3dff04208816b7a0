"""Which dumps a table's first load waits for (`dblog.merge.load_in_progress`), on the real
ZooKeeper: a range dump still reading it (paused, or between a crashed worker and its retry,
included), or one that read it and whose last windows wait for the capture; only while its
progress moves (its throttle's pause allowed for); never a cancelled or key-list dump, nor one
whose record this version cannot read; and asking leaves no record behind. The merges
themselves: tests/spark/test_first_load_adoption.py."""
import os
import time
import uuid
from dataclasses import asdict

import pytest

from dblog.coordination import store as paths
from dblog.coordination.store import StateStore
from dblog.merge.load_in_progress import in_progress
from dblog.snapshot.dump import DONE, RUNNING, TableProgress
from dblog.stagedlog.staged_log import StagedLog
from dblog.warehouse.merged_state import Bucket, TableState

from conftest import PORTS

SOURCE, TABLE = "src", "shop.accounts"


@pytest.fixture
def store(services):
    s = StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/first_load_{uuid.uuid4().hex[:8]}", timeout=3).start()
    yield s
    s.stop()


@pytest.fixture
def staged(tmp_path):
    return StagedLog(str(tmp_path))


def dump(store, staged, dump_id: str, status: str = RUNNING, keys=None, control: str = "running",
         delay_s: float = 0.0) -> str:
    """A dump of TABLE that staged chunks of it; returns its progress record's path."""
    store.put(paths.dump_path(SOURCE, dump_id), {"tables": [TABLE], "keys": keys})
    store.put(paths.control_path(SOURCE, dump_id), {"state": control, "delay_s": delay_s})
    progress = paths.table_progress_path(SOURCE, dump_id, TABLE)
    store.put(progress, asdict(TableProgress(TABLE, status, chunks=3, rows=60, estimated_rows=100)))
    os.makedirs(staged.chunk_dir(SOURCE, TABLE, dump_id))
    return progress


def waits(store, staged, unready=None, state=None, now=None):
    return in_progress(store, staged, SOURCE, TABLE, state, unready, now)


def test_a_first_load_waits_for_the_range_dump_reading_it_while_its_progress_moves_and_says_how_far_it_got(
        store, staged):
    dump(store, staged, "d1")
    found = waits(store, staged)
    assert (found.dump_id, found.read) == ("d1", False)
    assert "dump d1 has read 60 of about 100 rows (3 chunks)" in found.note()
    stored = TableState(SOURCE, TABLE, ["id"], [("id", "bigint")], [Bucket(0, None, rows=1, files=[object()])])
    assert waits(store, staged, state=stored) is None   # a table that stores rows is no first load
    assert waits(store, staged, now=time.time() + 601) is None   # its progress stood still too long


def test_a_paused_or_throttled_dump_is_waited_for_as_long_as_its_pause_between_windows_allows(store, staged):
    dump(store, staged, "d1", control="paused")
    assert waits(store, staged).dump_id == "d1"   # a pause of minutes: the load still comes whole
    dump(store, staged, "d2", delay_s=3600)
    assert waits(store, staged, now=time.time() + 1800).dump_id == "d2"   # mid-pause between two windows
    assert waits(store, staged, now=time.time() + 4300) is None


@pytest.mark.parametrize("case", ["cancelled", "key list", "another version's record"])
def test_a_cancelled_or_key_list_dump_or_an_unreadable_record_holds_no_first_load_back(store, staged, case):
    progress = dump(store, staged, "d1", keys=[[1]] if case == "key list" else None,
                    control="cancelled" if case == "cancelled" else "running")
    if case == "another version's record":
        store.put(progress, {**store.get(progress), "cursor_of_a_later_version": 7})
    assert waits(store, staged) is None


def test_a_dump_that_read_the_table_is_waited_for_only_while_its_last_windows_wait_for_the_capture(store, staged):
    dump(store, staged, "d1", status=DONE)
    assert waits(store, staged) is None
    found = waits(store, staged, unready={"d1"})
    assert found.read and "waits for the capture to pass its last windows" in found.note()
    assert waits(store, staged, unready={"d2"}) is None


def test_no_wait_when_turned_off_and_asking_about_a_forgotten_dump_brings_no_record_back(store, staged, monkeypatch):
    os.makedirs(staged.chunk_dir(SOURCE, TABLE, "repair-old"))   # its chunks outlived its ZooKeeper record
    assert waits(store, staged, unready={"repair-old"}) is None
    assert store.lock_holders(f"{paths.table_progress_path(SOURCE, 'repair-old', TABLE)}/lock") == []
    assert store.children(paths.dumps_path(SOURCE)) == []
    lock = f"{dump(store, staged, 'd1')}/lock"
    lease = store.lease(lock, "worker", 5)
    assert store.lock_holders(lock) == ["worker"]   # a held lease is still seen
    lease.release()
    monkeypatch.setenv("DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS", "0")
    assert waits(store, staged) is None
