"""The capture slice's hang guard: past its length, a slice that keeps staging runs on (it ends
only between transactions, and one may be larger than a slice); one that stages nothing fails."""
from __future__ import annotations

import time

import pytest


@pytest.mark.offline
def test_a_slice_past_its_length_runs_on_while_it_stages_and_fails_as_hung_once_it_stages_nothing():
    from dblog_airflow.operators.capture import _hang_guard
    staged, began, ran_on = [0], time.monotonic(), None
    with pytest.raises(TimeoutError, match="staged nothing for 1 s: it looks hung"):
        with _hang_guard(1, 1, lambda: staged[0]):
            while time.monotonic() - began < 3.5:   # past its length, still staging pieces
                staged[0] += 1
                time.sleep(0.05)
            ran_on = time.monotonic() - began
            while time.monotonic() - began < 15:   # then a read that never returns
                time.sleep(0.05)
    assert ran_on is not None, "the guard failed a slice that was still staging"
