"""A dump run's merge left to the continuous merge (dblog.merge.handoff), on the real ZooKeeper:
when the task waits, when it reports the dump merged, and every case where it must merge itself.
The whole path under the scheduler: tests/e2e/test_rest_api.py; the heartbeat a continuous
merge writes: tests/spark/test_continuous_merge.py."""
import time
import uuid
from dataclasses import asdict

import pytest

from dblog.coordination import changed_tables
from dblog.coordination import store as paths
from dblog.coordination.merge_beat import MergeBeat, beat, read_beat
from dblog.coordination.store import StateStore
from dblog.merge.handoff import MERGE_HERE, MERGED, WAITING, DumpTable, handoff
from dblog.snapshot.dump import DONE, TableProgress

from conftest import PORTS

GRACE = 120.0
T = DumpTable("src", "d1", "shop.accounts")


@pytest.fixture
def store(services):
    with StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/handoff_{uuid.uuid4().hex[:8]}", timeout=3) as s:
        yield s


def staged(store, t: DumpTable, chunks: int) -> None:
    """The dump of `t` staged `chunks` chunks, each marked for the merges."""
    store.put(paths.table_progress_path(t.source, t.dump_id, t.table), asdict(TableProgress(t.table, DONE, chunks=chunks)))
    for _ in range(chunks):
        changed_tables.mark_chunk(store, t.source, t.table)


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


def test_a_table_whose_chunk_marks_were_cleared_counts_as_merged_even_if_a_crash_undercounted_it(store):
    staged(store, T, 2)
    merged(store, T, 1)   # a merge that crashed between its commit and its count
    beat(store, "src", MergeBeat(time.time()))
    assert handoff(store, [T], GRACE, time.time()).state == WAITING
    changed_tables.clear_marks(store, "src", changed_tables.marks(store, "src")[T.table])
    assert handoff(store, [T], GRACE, time.time()).state == MERGED


@pytest.mark.parametrize("state, says", [
    (None, "no continuous merge runs for src"),
    (MergeBeat(time.time() - 3 * GRACE), "(is dblog_merge_continuous paused?)"),
    (MergeBeat(time.time(), tables=("shop.orders",)), "does not merge shop.accounts"),
    (MergeBeat(time.time(), failing={"shop.accounts": "disk full"}), "keeps failing on shop.accounts: disk full"),
], ids=["none", "silent", "other-tables", "failing"])
def test_the_task_merges_itself_when_no_live_continuous_merge_would_take_the_dump(store, state, says):
    staged(store, T, 3)
    if state is not None:
        beat(store, "src", state)
    outcome = handoff(store, [T], GRACE, time.time())
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
