"""The one definition of capture lag and capture state (dblog.coordination.health)."""
from __future__ import annotations

import time

from dblog.coordination.checkpoint import Checkpoint, readable_position
from dblog.coordination.health import CAPTURING, STALE_AFTER_S, STALLED, STOPPED, health_of, lag_seconds, stopped_for


def test_lag_is_the_age_of_the_newest_staged_commit_while_the_source_writes():
    assert lag_seconds(Checkpoint(commit_ts=100.0), {"caught_up_at": 50.0}, 103.5) == 3.5


def test_lag_of_a_running_capture_on_an_idle_source_stays_small():
    assert lag_seconds(Checkpoint(commit_ts=10.0), {"caught_up_at": 999.0}, 1000.0) == 1.0


def test_lag_of_a_stopped_capture_grows_with_the_clock():
    checkpoint, heartbeat = Checkpoint(commit_ts=10.0), {"caught_up_at": 20.0}
    assert lag_seconds(checkpoint, heartbeat, 718.0) == 698.0
    assert lag_seconds(checkpoint, heartbeat, 818.0) == 798.0


def test_lag_is_unknown_before_the_first_checkpoint_or_beat():
    assert lag_seconds(Checkpoint(), None, 5.0) is None


def test_a_leader_with_a_fresh_heartbeat_is_capturing_and_later_contenders_are_standby():
    h = health_of("s", Checkpoint(commit_ts=99.0), {"leader": "a", "at": 99.0}, ["a", "b"], [], 100.0)
    assert (h.state, h.leader, h.standby) == (CAPTURING, "a", ["b"])


def test_a_leader_that_stopped_beating_is_stalled_and_no_leader_is_stopped():
    beat = {"leader": "a", "at": 100.0}
    assert health_of("s", Checkpoint(), beat, ["a"], [], 100.0 + STALE_AFTER_S + 1).state == STALLED
    assert health_of("s", Checkpoint(), beat, ["b"], [], 101.0).state == STALLED  # the beat is another's
    assert health_of("s", Checkpoint(), beat, [], [], 101.0).state == STOPPED


def test_a_waiter_counts_a_stopped_capture_from_its_last_beat_or_else_from_the_wait_s_start():
    beat = {"leader": "a", "at": 100.0}
    assert stopped_for(health_of("s", Checkpoint(), beat, ["a"], [], 101.0), 50.0, 101.0) == 0.0  # capturing
    stalled = health_of("s", Checkpoint(), beat, ["a"], [], 500.0)
    assert stopped_for(stalled, 50.0, 500.0) == 0.0   # a leader still holds the lease (its session may expire)
    assert stopped_for(health_of("s", Checkpoint(), beat, [], [], 400.0), 350.0, 400.0) == 300.0  # paused long ago
    assert stopped_for(health_of("s", Checkpoint(), {}, [], [], 400.0), 350.0, 400.0) == 50.0     # never ran


def test_the_lag_history_keeps_the_last_hour():
    now = 10_000.0
    h = health_of("s", Checkpoint(), {}, [], [[now - 4000, 1.0], [now - 100, 2.0]], now)
    assert h.lag_history == [[now - 100, 2.0]]


def test_positions_read_as_binlog_file_and_offset_or_lsn():
    assert readable_position({"log_file": "mysql-bin.000042", "log_pos": 1234}) == "mysql-bin.000042:1234"
    assert readable_position({"lsn": "0/16B3748"}) == "LSN 0/16B3748"
    assert readable_position(None) is None


def test_the_description_names_state_last_checkpoint_and_lag():
    h = health_of("s", Checkpoint(staged_at=0.0, commit_ts=0.0, resume={"lsn": "0/1"}), {}, [], [], 698.0)
    assert h.describe() == "stopped: last checkpoint 00:00:00 UTC, lag 698 s, position LSN 0/1"


class _Store:
    """The two StateStore calls a Heartbeat makes, over a dict."""

    def __init__(self, nodes: dict):
        self.nodes = nodes

    def get(self, path):
        return self.nodes.get(path)

    def fenced_put(self, lease, path, value):
        assert lease == "lease", "heartbeats are written under the capture's lease"
        self.nodes[path] = value


def test_a_new_leader_keeps_the_previous_leaders_proof_so_a_handover_does_not_fake_a_lag_spike():
    from dblog.coordination import store as paths
    from dblog.coordination.health import Heartbeat
    now = time.time()
    store = _Store({paths.heartbeat_path("s"): {"leader": "old", "at": now - 1, "caught_up_at": now - 1}})
    lags = []
    Heartbeat(store, "s", "new", on_beat=lags.append).start("lease", Checkpoint(commit_ts=now - 7200))
    assert lags and lags[0] < 60, lags
    assert store.nodes[paths.heartbeat_path("s")]["leader"] == "new"
    assert store.nodes[paths.lag_history_path("s")][-1][1] < 60
