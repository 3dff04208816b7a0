"""A dump run's merge left to the continuous merge (dblog.merge.handoff), on the real ZooKeeper:
when the task waits, when it reports the dump merged, and every case where it must merge itself.
The whole path under the scheduler: tests/e2e/test_rest_api.py; the heartbeat a continuous
merge writes: tests/spark/test_continuous_merge.py."""
import time
import uuid
from dataclasses import asdict

import pytest

from dblog.coordination import store as paths
from dblog.coordination.merge_beat import MergeBeat, beat, read_beat
from dblog.coordination.store import StateStore
from dblog.merge.handoff import MERGE_HERE, MERGED, WAITING, DumpTable, HandoffWait, handoff
from dblog.snapshot.dump import DONE, TableProgress

from conftest import PORTS

GRACE = 120.0
T = DumpTable("src", "d1", "shop.accounts")


@pytest.fixture
def store(services):
    s = StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/handoff_{uuid.uuid4().hex[:8]}", timeout=3).start()
    yield s
    s.stop()


def staged(store, t: DumpTable, chunks: int) -> None:
    store.put(paths.table_progress_path(t.source, t.dump_id, t.table), asdict(TableProgress(t.table, DONE, chunks=chunks)))


def merged(store, t: DumpTable, chunks: int) -> None:
    store.put(paths.dump_merged_path(t.source, t.dump_id, t.table), {"chunks": chunks, "rows": 10, "dropped": 0})


def test_a_dump_waits_for_a_beating_continuous_merge_until_it_counts_every_chunk(store):
    staged(store, T, 3)
    beat(store, "src", MergeBeat(time.time()))
    assert read_beat(store, "src").covers(T.table)
    waiting = handoff(store, [T], GRACE, time.time())
    assert waiting.state == WAITING and waiting.pending == (T,)
    merged(store, T, 2)
    assert handoff(store, [T], GRACE, time.time()).state == WAITING
    merged(store, T, 3)
    assert handoff(store, [T], GRACE, time.time()).state == MERGED


def test_a_wait_whose_count_stops_moving_while_no_merge_holds_the_table_merges_here_after_its_stall_limit(store):
    staged(store, T, 3)
    merged(store, T, 1)   # (a chunk awaiting a rebuild, a count a crash lost: the merges took it uncounted)
    wait, t0 = HandoffWait([T], grace=1000, stall=60), time.time()   # (the merge beats all along)
    beat(store, "src", MergeBeat(t0))
    assert wait.poll(store, t0).state == WAITING
    merged(store, T, 2)   # progress restarts the clock
    assert wait.poll(store, t0 + 50).state == WAITING
    assert wait.poll(store, t0 + 100).state == WAITING
    # A merge holding the table's lock is progress too: a big table's merge counts only at its commit.
    lease = store.lease(paths.merge_lock(T.source, T.table), "continuous", timeout=5)
    try:
        assert wait.poll(store, t0 + 200).state == WAITING
    finally:
        lease.release()
    assert wait.poll(store, t0 + 259).state == WAITING
    stalled = wait.poll(store, t0 + 261)
    assert stalled.state == MERGE_HERE and "counted no new chunk of src shop.accounts (dump d1) for 61 s" in \
        stalled.reason, stalled


def test_a_wait_that_cannot_read_zookeeper_rides_it_out_up_to_its_stall_limit_then_merges_here(store):
    staged(store, T, 2)
    beat(store, "src", MergeBeat(time.time()))
    gone = StateStore(store.hosts, store.chroot, timeout=3, outage=0.2).start()
    gone.stop()   # (its calls fail as ZooKeeper away does, after `outage`)
    wait, t0 = HandoffWait([T], GRACE, stall=60), time.time()
    first = wait.poll(gone, t0)   # a restarted trigger whose first read fails: its clocks start now
    assert first.state == WAITING and first.pending == (T,) and "not read this time" in first.reason
    assert wait.poll(store, t0 + 40).state == WAITING   # read again: the unread clock stops
    assert wait.poll(gone, t0 + 80).state == WAITING
    failed = wait.poll(gone, t0 + 140)
    assert failed.state == MERGE_HERE and "could not be read for 60 s" in failed.reason, failed


@pytest.mark.parametrize("case, says", [
    ("none", "no continuous merge runs for src"),
    ("silent", "has been silent for 360 s (is dblog_merge_continuous paused?)"),
    ("other-tables", "does not merge shop.accounts"),
    ("failing", "fails on shop.accounts: disk full"),
])
def test_the_task_merges_itself_when_no_live_continuous_merge_would_take_the_dump(store, case, says):
    staged(store, T, 3)
    now = time.time()
    state = {"silent": MergeBeat(now - 3 * GRACE), "other-tables": MergeBeat(now, tables=("shop.orders",)),
             "failing": MergeBeat(now, failing={"shop.accounts": "disk full"})}.get(case)
    if state is not None:
        beat(store, "src", state)
    outcome = handoff(store, [T], GRACE, now)
    assert outcome.state == MERGE_HERE and says in outcome.reason, outcome


def test_a_run_over_two_sources_waits_for_both_and_merges_itself_if_either_has_no_continuous_merge(store):
    other = DumpTable("src2", "d2", "public.items")
    staged(store, T, 1)
    staged(store, other, 1)
    beat(store, "src", MergeBeat(time.time()))
    assert handoff(store, [T, other], GRACE, time.time()).state == MERGE_HERE
    beat(store, "src2", MergeBeat(time.time()))
    assert handoff(store, [T, other], GRACE, time.time()).pending == (T, other)
    merged(store, T, 1)
    merged(store, other, 1)
    assert handoff(store, [T, other], GRACE, time.time()).state == MERGED
