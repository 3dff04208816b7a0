"""The window planner's rule, over a key list standing in for the key index; which failures of a
window's Spark job are retried."""
import bisect

import pyarrow as pa

from dblog.schema import Column, TableSchema
from dblog.sources.base import SourceError
from dblog.spark.window_reads import WindowReadFailed, _job_failure
from dblog.windows import Split, plan_window


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
