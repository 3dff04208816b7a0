"""A single `dblog merge` run over many tables: side by side, each reported once, failures raised."""
from __future__ import annotations

import threading
import time

import pytest

from dblog.merge.run import merge_each


class Done:
    def __init__(self, table: str) -> None:
        self.table = table

    def summary(self) -> str:
        return f"merged {self.table}"


def test_tables_merge_side_by_side_each_said_once_and_the_results_keep_the_tables_order():
    pairs = [("s", f"t{i}") for i in range(6)]
    at_once, most, lock = 0, 0, threading.Lock()

    def merge(source: str, table: str) -> Done:
        nonlocal at_once, most
        with lock:
            at_once += 1
            most = max(most, at_once)
        time.sleep(0.05 if table != "t0" else 0.2)   # the first table ends last
        with lock:
            at_once -= 1
        return Done(table)
    said, progress = [], []
    results = merge_each(pairs, merge, 3, said.append, lambda n, of: progress.append((n, of)))
    assert [r.table for r in results] == [t for _, t in pairs]
    assert sorted(said) == sorted(f"merged {t}" for _, t in pairs) and said[-1] == "merged t0"
    assert progress == [(n, 6) for n in range(1, 7)]
    assert most == 3


def test_a_failed_table_stops_the_tables_not_started_and_is_raised_after_those_under_way_end():
    started, ended = [], []

    def merge(source: str, table: str) -> Done:
        started.append(table)
        if table == "t1":
            raise RuntimeError("t1 broke")
        time.sleep(0.2)
        ended.append(table)
        return Done(table)
    with pytest.raises(RuntimeError, match="t1 broke"):
        merge_each([("s", f"t{i}") for i in range(8)], merge, 2, lambda line: None, None)
    assert len(started) < 8, started       # the rest never started
    assert set(started) - {"t1"} == set(ended)   # every merge under way ran to its end


def test_one_at_a_time_merges_in_order():
    order = []
    merge_each([("s", "a"), ("s", "b")], lambda s, t: order.append(t) or Done(t), 1, lambda line: None, None)
    assert order == ["a", "b"]
