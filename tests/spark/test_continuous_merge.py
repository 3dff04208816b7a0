"""The continuous merge (`dblog merge --continuous`) as users run it: a long-running process beside
the capture, dumps and writers, killed and restarted, sharing tables with scheduled merges."""
from __future__ import annotations

import json

import pytest

from dblog.operations.verify import compare_warehouse
from dblog.warehouse.merged_state import LOG_UPTO

from chaos.oracles import PositionHistory
from conftest import TABLES, assert_warehouse_equals_source, settle, wait_for

CONTINUOUS = ("merge", "--continuous", "--every", "0.5", "--master", "local[1]")  # one bucket a table: kills, not layout


def _converged(src, warehouse) -> bool:
    return all(warehouse.load(src.source_id, src.table(t)) is not None and
               compare_warehouse(src.source(), warehouse, src.table(t)).equal for t in TABLES)


# `make test-full` only: the chaos short form's postgres-continuous run kills the continuous merge
# and checks every oracle; this one adds a scheduled merge beside the restarted continuous one.
@pytest.mark.long
def test_a_continuous_merge_killed_mid_commit_beside_a_killed_capture_and_a_scheduled_merge_converges_serially(
        mariadb, warehouse, tmp_path):
    """On one source: the merge reads the staged log, whichever source staged it (the PostgreSQL
    continuous merge with kills: the chaos test's postgres-continuous run). A scheduled merge
    started beside the restarted continuous one takes turns with it: both finish, every commit
    builds on the one before it and no key goes back."""
    src = mariadb
    src.workload(seed=71, rows=1000).create()
    env = {"DBLOG_WAREHOUSE": warehouse.root}
    capture = src.start_capture()
    # The first instance kills itself between writing a snapshot's manifests and the catalog swap.
    merging = src.spawn(*CONTINUOUS, output=tmp_path / "merge-1.log",
                        env={**env, "DBLOG_CRASH_AT": "merge.before_commit@3"})
    writer = src.spawn_workload(seconds=3600, seed=72, rows=1000, rate=50)
    dump = src.spawn("dump", "--source", src.source_id, "--all", "--chunk-size", "97", "--delay", "0.02")
    history, problems = PositionHistory(), []

    def observed_until(done) -> bool:
        problems.extend(history.observe(warehouse, src.source_id))
        return done()

    wait_for(lambda: observed_until(lambda: merging.poll() is not None), 300, interval=0.5,
             what="the continuous merge to reach its crash point")
    assert merging.returncode == -9, (tmp_path / "merge-1.log").read_text()[-2000:]
    capture.kill(); capture.wait()   # and the capture, while the dump and the writer go on
    capture = src.spawn("capture", "--source", src.source_id)
    report = tmp_path / "continuous.json"
    merging = src.spawn(*CONTINUOUS, "--report", str(report), output=tmp_path / "merge-2.log", env=env)
    scheduled = src.spawn("merge", "--master", "local[1]", output=tmp_path / "scheduled.log", env=env)
    wait_for(lambda: observed_until(lambda: scheduled.poll() is not None), 600, interval=0.5,
             what="the scheduled merge to finish beside the continuous one")
    assert scheduled.returncode == 0, (tmp_path / "scheduled.log").read_text()[-3000:]
    wait_for(lambda: observed_until(lambda: dump.poll() is not None), 600, interval=0.5, what="the dump to finish")
    assert dump.returncode == 0, dump.stderr.read()
    writer.terminate(); writer.wait()
    settle(src)
    # No final batch merge: the running continuous merge alone brings every table to the source.
    wait_for(lambda: observed_until(lambda: _converged(src, warehouse)), 300, interval=1.0,
             what="the continuous merge to converge on the source")
    assert not problems, problems[:5]
    assert history.versions > 10
    assert_warehouse_equals_source(src, warehouse)
    merging.terminate()
    assert merging.wait(120) == 0, (tmp_path / "merge-2.log").read_text()[-3000:]
    said = (tmp_path / "merge-2.log").read_text()
    assert "its oldest change waited" in said and "slice done:" in said, said[-3000:]
    results = json.loads(report.read_text())
    assert sum(r["commits"] for r in results) > 0 and {r["error"] for r in results} == {None}, results
    for t in TABLES:
        table = warehouse.load(src.source_id, src.table(t))
        log = table.metadata.snapshot_log   # main's history, in commit order
        assert len(log) > 1
        for before, after in zip(log, log[1:]):   # each commit builds on the one before it
            assert table.snapshot_by_id(after.snapshot_id).parent_snapshot_id == before.snapshot_id
        merged = [table.snapshot_by_id(e.snapshot_id).summary.additional_properties.get(LOG_UPTO) for e in log]
        assert merged == sorted(merged), f"{t}: a commit recorded an older position than the one before it"
