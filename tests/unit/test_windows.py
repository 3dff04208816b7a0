"""The window planner's rule, over a key list standing in for the key index; which failures of a
window's Spark job are retried."""
import bisect

import pyarrow as pa

from dblog.model.schema import Column, TableSchema
from dblog.snapshot.spark_windows import WindowReadFailed, _job_failure
from dblog.snapshot.windows import Split, SplitRead, WindowPlan, plan_window, steps_next
from dblog.sources.base import SourceError


class KeyIndex:
    """`Source.key_after` over a sorted key list; counts the queries it answers."""

    def __init__(self, keys):
        self.keys, self.queries = sorted(keys), 0

    def key_after(self, schema, after, rows, upto=None):
        self.queries += 1
        start = 0 if after is None else bisect.bisect_right(self.keys, after)
        i = start + rows - 1
        if i >= len(self.keys) or (upto is not None and self.keys[i] > upto):
            return None
        return self.keys[i]


def test_one_split_is_the_classic_chunk_and_asks_the_index_nothing():
    index = KeyIndex([(k,) for k in range(100)])
    assert plan_window(index, None, (9,), None, 20, 1) == [Split((9,), None, 20)]
    assert index.queries == 0


def test_splits_end_every_n_keys_and_the_last_is_open_and_bounded_by_the_row_count():
    index = KeyIndex([(k,) for k in range(0, 1000, 10)])
    assert plan_window(index, None, None, None, 5, 3) == [
        Split(None, (40,)), Split((40,), (90,)), Split((90,), None, 5)]
    assert index.queries == 2


def test_near_the_end_a_window_plans_only_the_splits_the_rows_left_fill():
    index = KeyIndex([(k,) for k in range(12)])
    assert plan_window(index, None, (3,), (11,), 5, 4) == [Split((3,), (8,)), Split((8,), (11,), 5)]


def test_boundaries_never_pass_the_dump_s_upper_key():
    index = KeyIndex([(k,) for k in range(100)])
    splits = plan_window(index, None, None, (6,), 5, 4)
    assert splits == [Split(None, (4,)), Split((4,), (6,), 5)]


class Named:
    name = "shop_db"


def test_a_spark_job_that_lost_a_worker_is_retried_and_any_other_failure_fails_with_its_cause_and_fix():
    schema = TableSchema("app.t", (Column("id", "int", pa.int64()),), ("id",))
    lost = RuntimeError("An error occurred while calling o81.collectAsArrowToPython.\n"
                        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)")
    failed = _job_failure(Named(), schema, 3, lost)
    assert isinstance(failed, WindowReadFailed) and "Python worker exited unexpectedly" in str(failed)
    too_big = RuntimeError("An error occurred while calling o81.collectAsArrowToPython.\n"
                           "org.apache.spark.SparkException: Job aborted: Total size of serialized results "
                           "of 3 tasks (1100.0 MiB) is bigger than spark.driver.maxResultSize (1024.0 MiB)")
    failed = _job_failure(Named(), schema, 3, too_big)
    assert type(failed) is SourceError, "a failure that recurs must not be retried as a lost worker"
    assert "maxResultSize" in str(failed) and "DBLOG_DUMP_READER=threads" in str(failed)


S = TableSchema("s.t", (Column("id", "bigint", pa.int64()),), ("id",))
PLAN = WindowPlan.fresh(6, [Split((10,), (20,)), Split((20,), (30,)), Split((30,), None, 10)])


def test_a_window_plan_survives_its_zookeeper_record():
    assert WindowPlan.of(PLAN.record(), S) == PLAN
    keys = WindowPlan.fresh(3, list_from=40, list_to=60)
    assert WindowPlan.of(keys.record(), S) == keys and keys.parts == 1


def test_a_finished_window_ends_where_its_open_split_ended_or_below_it_when_that_read_nothing():
    reads = {0: SplitRead(0, 10, "[20]"), 1: SplitRead(1, 10, "[30]")}
    assert PLAN.end_after({**reads, 2: SplitRead(2, 10, "[41]")}) == "[41]"
    assert PLAN.end_after({**reads, 2: SplitRead(2, 0, None)}) == "[30]"


def test_an_unfinished_window_carries_only_its_unstaged_splits_with_fresh_watermarks_and_numbers_past_it():
    carried = PLAN.carry({0: SplitRead(0, 10, "[20]"), 2: SplitRead(2, 10, "[41]")})
    assert carried is not None and carried.splits == (PLAN.splits[1],)
    assert carried.chunk == 9 and {carried.lw, carried.hw}.isdisjoint({PLAN.lw, PLAN.hw})
    assert carried.end == "[41]", "the open split was staged: the cursor's end is known now"
    assert carried.end_after({0: SplitRead(0, 10, "[30]")}) == "[41]"
    open_left = PLAN.carry({0: SplitRead(0, 10, "[20]")})
    assert open_left is not None and open_left.splits == PLAN.splits[1:] and open_left.end is None
    assert PLAN.carry({k: SplitRead(k, 10, None) for k in range(3)}) is None


def test_a_key_list_window_is_carried_whole_until_its_one_chunk_is_staged():
    keys = WindowPlan.fresh(3, list_from=40, list_to=60)
    again = keys.carry({})
    assert again is not None and (again.chunk, again.list_from, again.list_to) == (4, 40, 60)
    assert keys.carry({0: SplitRead(0, 20, None)}) is None


def test_dense_integer_keys_are_split_by_arithmetic_all_closed_and_never_past_the_bound():
    index = KeyIndex([(k,) for k in range(100)])
    assert plan_window(index, S, (10,), (65,), 20, 4, step=True) == [
        Split((10,), (30,)), Split((30,), (50,)), Split((50,), (65,))]
    assert index.queries == 0, "a stepped window asks the index nothing"
    assert plan_window(index, S, (65,), (65,), 20, 4, step=True) == [], "at the bound nothing is left to read"
    assert plan_window(index, S, None, (65,), 20, 2, step=True) == [Split(None, (19,)), Split((19,), (65,), 20)], \
        "the first window starts below the first key: only the index knows where"


def test_a_stepped_window_ends_at_its_last_bound_whatever_its_splits_read():
    stepped = WindowPlan.fresh(4, [Split((10,), (30,)), Split((30,), (50,))])
    assert stepped.end_after({0: SplitRead(0, 0, "[30]"), 1: SplitRead(1, 0, "[50]")}) == "[50]"
    carried = stepped.carry({1: SplitRead(1, 20, "[50]")})
    assert carried is not None and carried.splits == stepped.splits[:1] and carried.end == "[50]"


def dense_reads(*rows):
    return {k: SplitRead(k, n, None) for k, n in enumerate(rows)}


def test_the_next_window_steps_only_after_one_that_found_its_integer_keys_dense_and_reads_several_splits():
    window = WindowPlan.fresh(0, [Split((100,), (120,)), Split((120,), (140,))])
    assert steps_next(S, window, dense_reads(20, 10), 2), "30 of 40 key values present"
    assert not steps_next(S, window, dense_reads(20, 9), 2), "29 of 40: sparse enough to plan from the index"
    assert not steps_next(S, window, dense_reads(20, 20), 1), "one split a window asks the index nothing anyway"
    first = WindowPlan.fresh(0, [Split(None, (120,)), Split((120,), (140,))])
    assert not steps_next(S, first, dense_reads(20, 20), 2), "the first window's span is unknown"
    text = TableSchema("s.t", (Column("code", "varchar", pa.string()),), ("code",))
    labels = WindowPlan.fresh(0, [Split(("a",), ("b",)), Split(("b",), ("c",))])
    assert not steps_next(text, labels, dense_reads(20, 20), 2), "only an integer key has arithmetic"
