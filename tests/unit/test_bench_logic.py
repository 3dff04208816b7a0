"""The benchmark's own arithmetic: a wrong diff count or default would mislead its readers."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sweep_bench import recommend  # noqa: E402

from bigtable import rows_differing  # noqa: E402
from harness import LagProbe  # noqa: E402


def arrays(pairs):
    a = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return a[:, 0], a[:, 1]


def test_an_identical_copy_differs_in_no_row():
    source = arrays([(1, 0), (2, 3), (5, 1)])
    assert rows_differing(source, arrays([(5, 1), (1, 0), (2, 3)]))["total"] == 0


def test_missing_extra_duplicated_and_stale_rows_are_each_counted():
    source = arrays([(1, 0), (2, 3), (3, 0), (4, 7)])
    copy = arrays([(1, 0), (2, 2), (2, 2), (4, 7), (9, 0)])  # 3 missing, 9 extra, 2 twice and stale
    assert rows_differing(source, copy) == {"missing": 1, "extra": 1, "duplicated": 1, "stale": 1, "total": 4}


def test_the_recommended_chunk_size_is_the_smallest_within_ten_percent_of_the_best():
    assert recommend({500: 40_000, 1000: 70_000, 5000: 95_000, 10_000: 100_000, 50_000: 101_000}) == 5000
    assert recommend({1000: 10, 2000: 20}) == 2000


def test_one_chunk_size_is_recommended_for_all_sources_when_they_disagree():
    mariadb = {1000: 60, 10_000: 110, 20_000: 117, 50_000: 98}
    postgres = {1000: 74, 10_000: 168, 20_000: 191, 50_000: 203}
    assert (recommend(mariadb), recommend(postgres), recommend(mariadb, postgres)) == (10_000, 20_000, 20_000)


def test_the_recommended_window_is_the_fewest_rows_then_the_fewest_connections_within_ten_percent():
    rates = {(20_000, 1): 90, (5000, 4): 150, (20_000, 2): 148, (10_000, 2): 140, (2000, 8): 100}
    assert recommend(rates) == (10_000, 2)  # 20,000 rows on 2 connections beats 5000 x 4
    assert recommend({(5000, 4): 150, (20_000, 1): 150}) == (20_000, 1)


class FakeStore:
    def __init__(self):
        self.position = ""

    def get(self, path):
        return {"position": self.position}


class FakeSource:
    def __init__(self):
        self.head_position = "a"

    def head(self):
        return {"position": self.head_position}


def test_lag_is_the_time_until_the_checkpoint_passes_the_head_noted_at_a_moment(monkeypatch):
    import harness
    clock = [100.0]
    monkeypatch.setattr(harness.time, "time", lambda: clock[0])
    store, src = FakeStore(), FakeSource()
    probe = LagProbe(src, store, "s", every=1.0)
    probe.poll()                       # t=100: head "a" noted, checkpoint behind it
    clock[0] = 102.5
    store.position = "a"
    probe.poll()                       # the checkpoint passed "a" at 102.5
    assert probe.lag(99, 101) == [2.5]
    assert probe.longest_pause(100, 110) == 7.5  # moved at 100 (first sight) and 102.5, then no more
