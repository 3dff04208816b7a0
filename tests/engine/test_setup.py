"""Set-up a newcomer can follow: deployments that share a server keep their watermarks apart,
`dblog sync` waits until the capture has passed "now", `dblog status` says when lag is unknown."""
from __future__ import annotations

import re

from dblog.connections import deployment_id
from dblog.coordination.checkpoint import checkpoint_path
from dblog.coordination.watermark_index import staged_positions
from dblog.sources.base import WATERMARK_TABLE

from conftest import SourceEnv, settle, wait_for
from test_convergence import assert_converged


def test_two_deployments_on_one_server_stage_only_their_own_watermarks_and_both_converge(src, tmp_path):
    # A second deployment of the same source (same connection id and database) with its own
    # ZooKeeper chroot, staged log and (PostgreSQL) slot, as a staging and a production Airflow have.
    other = SourceEnv(src.kind, src.tag, tmp_path / "other_staging", chroot=f"/test_{src.tag}_other",
                      query=f"slot=dblog_{src.tag}_o" if src.kind == "postgres" else "")
    assert deployment_id(src.zk_uri) != deployment_id(other.zk_uri)
    src.workload(seed=51, rows=300).create()
    try:
        for env in (src, other):
            env.start_capture()
        for env in (src, other):
            dump = env.dblog("dump", "--source", env.source_id, "--all", "--chunk-size", "40")
            assert dump.returncode == 0, dump.stderr
        src.workload(seed=52, rows=300).run(seconds=30, max_ops=300)
        for env in (src, other):
            settle(env)
        for env in (src, other):
            # Every watermark a deployment stages carries its own tag (rows without a tag, from
            # writers that predate tags, are kept by every deployment: see Source.own_watermarks).
            ids = env.staged().read_log(env.source_id, WATERMARK_TABLE)["id"].to_pylist()
            tags = {i.partition(":")[0] for i in ids if ":" in i}
            assert tags == {deployment_id(env.zk_uri)}, tags
            assert staged_positions(env.staged(), env.source_id)
            assert_converged(env)
    finally:
        for proc in other.procs:
            proc.kill()
            proc.wait()
        if src.kind == "postgres":
            slot = f"dblog_{src.tag}_o"
            wait_for(lambda: not src.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active",
                                         params=[slot]), 30, what="the second slot to be released")
            src.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    params=[slot])


def test_dblog_sync_returns_once_the_capture_has_passed_every_earlier_commit(src):
    src.workload(seed=61, rows=50).create()
    src.start_capture()
    src.workload(seed=62, rows=50).run(seconds=30, max_ops=40)
    synced = src.dblog("sync", "--timeout", "60")  # default: every configured source (DBLOG_SOURCES)
    assert synced.returncode == 0, synced.stderr
    position = re.search(rf"^{src.source_id}: synced at position (\S+) \(checkpoint ", synced.stdout, re.M).group(1)
    staged = [p for t in ("accounts", "order_lines")
              for p in src.staged().read_log(src.source_id, src.table(t))["_position"].to_pylist()]
    assert staged and max(staged) < position  # every write before the sync is staged
    with src.store() as store:
        assert store.get(checkpoint_path(src.source_id))["position"] >= position


def test_dblog_sync_right_after_a_first_capture_start_returns_once_the_capture_runs(src):
    src.workload(seed=63, rows=20).create()
    # No `capture --init`: the capture chooses its start itself, at the log's head, as the sync runs.
    capture = src.spawn("capture", "--source", src.source_id)
    synced = src.dblog("sync", "--source", src.source_id, "--timeout", "60")
    assert synced.returncode == 0, synced.stderr
    assert f"{src.source_id}: synced at position" in synced.stdout
    capture.terminate()
    capture.wait()


def test_dblog_sync_without_a_running_capture_fails_naming_its_state_and_the_fix(src):
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    result = src.dblog("sync", "--source", src.source_id, "--timeout", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"the capture of {src.source_id} is not running (stopped" in result.stderr
    assert f"start it (`dblog capture --source {src.source_id}`), then re-run" in result.stderr
    assert "Traceback" not in result.stderr
    for bad in ("nan", "inf", "-1"):
        refused = src.dblog("sync", "--source", src.source_id, "--timeout", bad)
        assert refused.returncode == 2 and "--timeout must be a finite number" in refused.stderr, bad


def test_status_says_the_lag_is_unknown_before_any_checkpoint(src):
    result = src.dblog("status", "--source", src.source_id)
    assert result.returncode == 0, result.stderr
    assert "lag unknown (no checkpoint yet)" in result.stdout, result.stdout
    assert "Nones" not in result.stdout


def test_processes_setting_up_a_new_postgresql_source_at_once_share_one_slot_and_none_fails(postgres):
    """A first capture beside a first `dblog sync` (or dump): each finds no slot, then creates it."""
    import threading
    gate, errors = threading.Barrier(4), []

    def set_up() -> None:
        source = postgres.source()
        gate.wait()
        try:
            source.preflight(first_use=True)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            source.close()
    threads = [threading.Thread(target=set_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert postgres.sql("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                        params=[f"dblog_{postgres.tag}"]) == [(1,)]
