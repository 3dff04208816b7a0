"""The snapshot history a table keeps (`dblog.warehouse.history`): bounded by age and by count,
applied in each merge's own commit, time travel still reaching back the whole window."""
from __future__ import annotations

import pytest

from dblog.warehouse import history
from dblog.warehouse.metadata_cache import MetadataCachingSqlCatalog
from dblog.warehouse.tables import Warehouse

from iceberg_tables import commit_rows

COLUMNS = [("id", "int"), ("name", "string")]
HOUR_MS = 3_600_000


def row(i: int, position: str) -> dict:
    return {"id": i, "name": f"n{i}", "_dblog_position": position}


def replay(count: int, step_ms: int, keep_seconds: float, keep_snapshots: int) -> list[tuple[int, int]]:
    """Snapshots committed every `step_ms`, the rule applied at each commit as a merge applies it."""
    kept: list[tuple[int, int]] = []
    for i in range(count):
        now = i * step_ms
        kept.append((i, now))
        gone = history.expired(kept, {i}, now, keep_seconds, keep_snapshots)   # the new head is protected
        kept = [s for s in kept if s[0] not in gone]
    return kept


def test_past_its_bound_the_history_keeps_the_newest_half_and_one_snapshot_per_slot_back_to_the_windows_start():
    kept = replay(5_000, 3_000, 4 * 3600, 100)   # a merge every 3 s for 4 h 10 min
    assert len(kept) <= 100
    newest = [s for s, _ in kept[-50:]]
    assert newest == list(range(5_000 - 50, 5_000))   # the newest half: every one of them
    times = [t for _, t in kept]
    now = times[-1]
    assert all(t >= now - 4 * HOUR_MS for t in times)   # nothing older than the window
    assert times[0] <= now - 4 * HOUR_MS + 2 * (4 * HOUR_MS / 49)   # ... and time travel reaches back to its start
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) <= 2 * (4 * HOUR_MS / 49)   # at a step of at most two slots


def test_under_its_bound_the_history_expires_only_what_is_older_than_the_window():
    snapshots = [(i, i * 60_000) for i in range(30)]   # one a minute for 30 min
    now = 30 * 60_000
    assert history.expired(snapshots, set(), now, 600, 100) == set(range(20))   # a 10-minute window
    assert history.expired(snapshots, {0, 5}, now, 600, 100) == set(range(20)) - {0, 5}   # heads stay


def test_no_snapshot_younger_than_the_keep_all_age_is_thinned():
    snapshots = [(i, i * 1_000) for i in range(300)]   # one a second for 5 min
    now = 300 * 1_000
    assert history.expired(snapshots, set(), now, 4 * 3600, 100, keep_all_seconds=600) == set()
    gone = history.expired(snapshots, set(), now, 4 * 3600, 100, keep_all_seconds=60)
    assert gone and all(ts < now - 60_000 for sid, ts in snapshots if sid in gone)


@pytest.fixture
def wh(tmp_path, monkeypatch):
    monkeypatch.delenv("DBLOG_ICEBERG_CATALOG", raising=False)
    monkeypatch.setenv("DBLOG_WAREHOUSE_KEEP_SNAPSHOTS", "10")
    monkeypatch.setenv("DBLOG_WAREHOUSE_KEEP_ALL_SECONDS", "0")
    return Warehouse(str(tmp_path / "warehouse"))


def test_many_merges_keep_a_bounded_history_and_every_kept_snapshot_still_reads(wh):
    for i in range(40):
        commit_rows(wh, "src", "shop.t", [row(i % 3, f"p{i:03d}")], COLUMNS, ["id"], bucket=i % 3,
                    log_upto=f"p{i:03d}")
    t = wh.load("src", "shop.t")
    assert len(t.metadata.snapshots) <= 11 and len(t.metadata.snapshot_log) == len(t.metadata.snapshots)
    for snapshot in t.metadata.snapshots:   # every kept snapshot's manifests and files are there
        t.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    state = wh.state("src", "shop.t")
    assert state.log_upto == "p039" and sorted(wh.keys("src", "shop.t")) == [(0,), (1,), (2,)]


def test_a_process_reading_the_catalog_sees_another_processs_commit_and_its_own_kept_metadata_is_not_stale(wh):
    commit_rows(wh, "src", "shop.t", [row(1, "p1")], COLUMNS, ["id"])
    other = MetadataCachingSqlCatalog("dblog", uri=wh.catalog.properties["uri"],
                                      warehouse=wh.catalog.properties["warehouse"])
    assert other.load_table(("src", "shop.t")).current_snapshot() is not None   # parsed, kept by location
    commit_rows(wh, "src", "shop.t", [row(2, "p2")], COLUMNS, ["id"])   # by this process's catalog
    seen = other.load_table(("src", "shop.t"))
    assert seen.metadata_location == wh.load("src", "shop.t").metadata_location
    assert seen.current_snapshot().snapshot_id == wh.state("src", "shop.t").snapshot_id


def test_a_removal_of_snapshots_another_writer_expired_or_tagged_meanwhile_is_narrowed_not_refused(wh):
    from pyiceberg.table.update import RemoveSnapshotsUpdate

    from dblog.warehouse.metadata_cache import still_expirable
    for i in range(4):
        commit_rows(wh, "src", "shop.t", [row(1, f"p{i}")], COLUMNS, ["id"], log_upto=f"p{i}")
    metadata = wh.load("src", "shop.t").metadata
    oldest, tagged = (s.snapshot_id for s in metadata.snapshots[:2])
    wh.load("src", "shop.t").manage_snapshots().create_tag(tagged, "audit").commit()   # another writer's tag
    metadata = wh.load("src", "shop.t").metadata
    asked = (RemoveSnapshotsUpdate(snapshot_ids=[oldest, tagged, 12345]),)   # 12345: expired by another writer
    assert still_expirable(metadata, asked) == (RemoveSnapshotsUpdate(snapshot_ids=[oldest]),)
    assert still_expirable(metadata, (RemoveSnapshotsUpdate(snapshot_ids=[tagged]),)) == ()
