"""dblog_full_refresh and dblog_merge through `dag.test()`: two sources under writes converge."""
from __future__ import annotations

import pytest

from conftest import assert_warehouse_equals_source, settle


def asset_events(prefix: str) -> dict[str, list[dict]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    with create_session() as session:
        rows = (session.query(AssetModel.name, AssetEvent.extra).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name.like(f"{prefix}%")).all())
    out: dict[str, list[dict]] = {}
    for name, extra in rows:
        out.setdefault(name, []).append(extra)
    return out


def test_full_refresh_of_every_source_under_writes_then_merges_converge_and_publish_assets(
        mariadb, postgres, deploy, warehouse, monkeypatch):
    postgres.chroot = mariadb.zk_chroot  # one deployment: one ZooKeeper chroot, one staging root
    writers = []
    for s in (mariadb, postgres):
        s.workload(seed=21, rows=600).create()
        s.start_capture()
        writers.append(s.spawn_workload(seconds=3600, seed=22, rows=600, rate=100))
    monkeypatch.setenv("DBLOG_FULL_REFRESH_CHUNK_SIZE", "200")
    airflow = deploy(mariadb, postgres)

    states, run = airflow.run("dblog_full_refresh")
    assert str(run.state) == "success", states
    dumped = sorted(t for t, state in states.items() if ".dump_table[" in t and state == "success")
    assert len(dumped) == 4, states  # two tables of each source, one mapped task each

    for w in writers:
        w.terminate(); w.wait()
    for s in (mariadb, postgres):
        settle(s)
    states, run = airflow.run("dblog_merge")
    assert states == {"merge": "success"}
    for s in (mariadb, postgres):
        assert_warehouse_equals_source(s, warehouse)
        events = asset_events(f"dblog.{s.source_id}.")
        assert set(events) == {f"dblog.{s.source_id}.{s.table(t)}" for t in ("accounts", "order_lines")}
        assert all(e["snapshot_id"] and e["identifier"][0] == s.source_id for es in events.values() for e in es)


# `make test-full` only: a dump of one table in its chunk size is tests/dags/test_dblog_dump.py's, and
# the full refresh of every source under writes is the test above.
@pytest.mark.long
def test_a_full_refresh_triggered_for_one_table_rereads_only_that_table_in_its_chunk_size(mariadb, deploy, warehouse):
    from dblog.coordination import store as paths
    mariadb.workload(seed=23, rows=100).create()
    mariadb.start_capture()
    sid, table = mariadb.source_id, mariadb.table("accounts")
    states, run = deploy(mariadb).run("dblog_full_refresh", {"source": sid, "tables": ["accounts"], "chunk_size": 40,
                                                             "delay_seconds": 0})
    assert str(run.state) == "success", states
    assert sorted(t for t in states if ".dump_table" in t) == [f"{sid}.dump_table[0]"], states
    with mariadb.store() as store:
        [dump_id] = store.children(f"/{sid}/dumps")
        assert store.get(paths.dump_path(sid, dump_id))["tables"] == [table]
        assert store.get(paths.table_progress_path(sid, dump_id, table))["chunks"] == 3  # 40 + 40 + 20 rows
    assert warehouse.tables(sid) == [table]
    assert_warehouse_equals_source(mariadb, warehouse, tables=("accounts",))
