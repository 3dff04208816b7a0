"""Warehouse maintenance without Spark: tables built as a merge builds them (the executor's bucket
writer, then the one-transaction commit), then expired, compacted and swept."""
from __future__ import annotations

import decimal
import os
import re
import time

import pytest

from dblog.warehouse import table_maintenance as M
from dblog.warehouse.catalog import BRANCH
from dblog.warehouse.tables import Warehouse

from maintenance_tables import (
    KEEP_ALL,
    NO_COMPACTION,
    SRC,
    TABLE,
    FakeStore,
    duckdb_rows,
    files_under,
    merge,
    plant,
    rows,
)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    monkeypatch.delenv("DBLOG_ICEBERG_CATALOG", raising=False)
    return Warehouse(str(tmp_path / "warehouse"))


def dblog_summary(snapshot) -> dict[str, str]:
    return {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("dblog.")}


def every_snapshot_reads(warehouse) -> None:
    t = warehouse.load(SRC, TABLE)
    for snapshot in t.metadata.snapshots:   # opens every manifest list, manifest and data file it references
        t.scan(snapshot_id=snapshot.snapshot_id).to_arrow()


def test_expiry_keeps_both_heads_and_every_snapshot_newer_than_the_window(warehouse):
    merge(warehouse, {0: [1, 2, 3], 1: [100, 101]}, {0: [4]}, upto="p1")
    merge(warehouse, {0: [1, 2]}, {0: [3, 4]}, upto="p2")
    t = warehouse.load(SRC, TABLE)
    old_branch_head = t.snapshot_by_name(BRANCH).snapshot_id
    time.sleep(0.5)
    window_start = time.time()
    time.sleep(0.5)
    merge(warehouse, {1: [100, 101, 102]}, upto="p3")   # bucket 1 only: the branch head stays old
    merge(warehouse, {1: [100, 102]}, upto="p4")
    t = warehouse.load(SRC, TABLE)
    newer = {s.snapshot_id for s in t.metadata.snapshots if s.timestamp_ms >= window_start * 1000}
    before, dead_before = rows(warehouse), rows(warehouse, BRANCH)

    # maintain reads its own clock a moment later: the slack keeps the window's edge inside the
    # second between the old snapshots and the new ones on a loaded machine.
    report = M.maintain(warehouse, SRC, TABLE, keep_seconds=time.time() - window_start + 0.25,
                        orphan_grace_seconds=3600, compact_min_files=NO_COMPACTION)

    t = warehouse.load(SRC, TABLE)
    kept = {s.snapshot_id for s in t.metadata.snapshots}
    assert len(newer) == 2 and kept == newer | {old_branch_head}, "main's two newest and the branch head stay"
    assert report.snapshots_expired == 3 and t.current_snapshot().snapshot_id in newer
    assert t.snapshot_by_name(BRANCH).snapshot_id == old_branch_head
    assert rows(warehouse) == before and rows(warehouse, BRANCH) == dead_before == [
        {"id": 3, "amount": decimal.Decimal("0.75"), "name": "n3", "ts": dead_before[0]["ts"], "_dblog_op": "d",
         "_dblog_missing": None},
        {"id": 4, "amount": decimal.Decimal("1.00"), "name": "n4", "ts": dead_before[1]["ts"], "_dblog_op": "d",
         "_dblog_missing": None}]
    assert warehouse.state(SRC, TABLE).log_upto == "p4"
    every_snapshot_reads(warehouse)


def test_the_sweep_keeps_every_reachable_file_removes_an_old_orphan_and_keeps_a_young_one(warehouse, tmp_path):
    merge(warehouse, {0: [1, 2, 3], 1: [100]}, {0: [4]}, upto="p1")
    merge(warehouse, {0: [1, 3]}, {0: [2, 4]}, upto="p2")
    location = warehouse.load(SRC, TABLE).metadata.location.removeprefix("file://")
    referenced = files_under(warehouse)
    old_orphan = plant(f"{location}/data/_dblog_bucket=0/killed-merge-0.parquet", 7200)
    old_metadata = plant(f"{location}/metadata/killed-m0.avro", 7200)
    young = plant(f"{location}/data/_dblog_bucket=1/running-merge-0.parquet", 10)
    outside = [plant(f"{location}-other/data/x.parquet", 7200), plant(f"{os.path.dirname(location)}/x.parquet", 7200),
               plant(str(tmp_path / "warehouse" / "elsewhere.parquet"), 7200)]

    report = M.maintain(warehouse, SRC, TABLE, keep_seconds=KEEP_ALL, orphan_grace_seconds=3600,
                        compact_min_files=NO_COMPACTION)

    assert (report.files_removed, report.snapshots_expired) == (2, 0), report
    assert report.bytes_removed == 2 * len(b"PAR1 left behind by a killed merge")
    assert files_under(warehouse) == referenced | {young}
    assert not os.path.exists(old_orphan) and not os.path.exists(old_metadata)
    assert all(os.path.exists(p) for p in outside), "nothing outside the table's location is touched"
    every_snapshot_reads(warehouse)
    assert [r["id"] for r in rows(warehouse)] == [1, 3, 100] and duckdb_rows(warehouse) == rows(warehouse)


def test_files_of_expired_snapshots_are_removed_once_past_the_grace_and_the_heads_still_read(warehouse):
    for n in range(4):
        merge(warehouse, {0: [1, 2, 3 + n], 1: [100 + n]}, {0: [10 + n]}, upto=f"p{n}")
    before, dead_before = rows(warehouse), rows(warehouse, BRANCH)

    report = M.maintain(warehouse, SRC, TABLE, keep_seconds=0, orphan_grace_seconds=0,
                        compact_min_files=NO_COMPACTION)

    t = warehouse.load(SRC, TABLE)
    assert {s.snapshot_id for s in t.metadata.snapshots} == {t.current_snapshot().snapshot_id,
                                                             t.snapshot_by_name(BRANCH).snapshot_id}
    assert report.snapshots_expired == 6 and report.files_removed > 0 and report.bytes_removed > 0
    data = {p for p in files_under(warehouse) if p.endswith(".parquet")}
    live = {task.file.file_path.removeprefix("file://") for ref in ("main", BRANCH)
            for task in t.scan().use_ref(ref).plan_files()}
    assert data == live and len(live) == 3
    assert rows(warehouse) == before and rows(warehouse, BRANCH) == dead_before
    assert duckdb_rows(warehouse) == before
    assert M.maintain(warehouse, SRC, TABLE, keep_seconds=0, orphan_grace_seconds=0).files_removed == 0


def test_a_dry_run_changes_nothing_and_reports_what_the_real_run_then_does(warehouse):
    for n in range(3):
        merge(warehouse, {0: list(range(1, 13)), 1: [100 + n]}, {0: [20 + n]}, tasks=5, upto=f"p{n}")
    location = warehouse.load(SRC, TABLE).metadata.location.removeprefix("file://")
    plant(f"{location}/data/_dblog_bucket=0/killed-merge-0.parquet", 7200)
    listing = {p: os.stat(p).st_mtime_ns for p in files_under(warehouse)}
    head = warehouse.load(SRC, TABLE).metadata_location

    dry = M.maintain(warehouse, SRC, TABLE, keep_seconds=0, orphan_grace_seconds=0, compact_min_files=1,
                     dry_run=True)

    assert dry.dry_run and dry.snapshots_expired == 4 and dry.buckets_compacted == 1 and dry.files_removed > 1
    assert {p: os.stat(p).st_mtime_ns for p in files_under(warehouse)} == listing
    assert warehouse.load(SRC, TABLE).metadata_location == head
    assert "would expire 4 snapshot(s), compact 1 bucket(s)" in dry.line() and dry.line().endswith("(dry run)")

    real = M.maintain(warehouse, SRC, TABLE, keep_seconds=0, orphan_grace_seconds=0,
                      compact_min_files=NO_COMPACTION)
    assert (real.snapshots_expired, real.files_removed, real.bytes_removed) == (
        dry.snapshots_expired, dry.files_removed, dry.bytes_removed)


def test_compaction_of_a_bucket_with_many_files_keeps_rows_the_dblog_state_and_the_tombstone_branch(warehouse):
    merge(warehouse, {0: list(range(1, 40)), 1: [100, 101]}, {0: list(range(40, 52))}, tasks=6, upto="p9")
    t = warehouse.load(SRC, TABLE)
    untouched = {task.file.file_path for task in t.scan().use_ref("main").plan_files()
                 if task.file.partition[0] == 1}
    state_before = dblog_summary(t.current_snapshot())
    before, dead_before = rows(warehouse), rows(warehouse, BRANCH)
    summary_before = warehouse.table_summary(SRC, TABLE)
    assert len(M.files_by_bucket(t, "main")[0]) == 6 and len(M.files_by_bucket(t, BRANCH)[0]) == 6

    report = M.maintain(warehouse, SRC, TABLE, keep_seconds=KEEP_ALL, orphan_grace_seconds=3600,
                        compact_min_files=4)

    t = warehouse.load(SRC, TABLE)
    assert report.buckets_compacted == 1 and report.files_removed == 0   # the replaced files are still reachable
    assert [len(M.files_by_bucket(t, ref)[0]) for ref in ("main", BRANCH)] == [1, 1]
    assert {df.file_path for df in M.files_by_bucket(t, "main")[1]} == untouched
    assert dblog_summary(t.current_snapshot()) == {**state_before, "dblog.compacted": "0"}
    assert dblog_summary(t.snapshot_by_name(BRANCH))["dblog.compacted"] == "0"
    assert rows(warehouse) == before and rows(warehouse, BRANCH) == dead_before
    assert {**warehouse.table_summary(SRC, TABLE), "snapshot_id": None} == {**summary_before, "snapshot_id": None}
    assert duckdb_rows(warehouse) == before and any(r["_dblog_missing"] == ["amount"] for r in before)
    [compacted] = M.files_by_bucket(t, "main")[0]
    import pyarrow.parquet as pq
    ids = pq.read_table(compacted.file_path.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    assert ids == sorted(ids) and compacted.record_count == 39
    assert M.maintain(warehouse, SRC, TABLE, compact_min_files=4).buckets_compacted == 0


def test_expiry_keeps_the_snapshot_holding_the_merge_state_behind_another_writers_head(warehouse):
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    merge(warehouse, {0: [1, 3]}, upto="p2")
    t = warehouse.load(SRC, TABLE)
    holder = t.current_snapshot().snapshot_id
    with t.transaction() as tx:   # a foreign writer's snapshot (no dblog.* summary) on top
        with tx.update_snapshot(snapshot_properties={"writer": "someone"}).fast_append():
            pass
    assert warehouse.load(SRC, TABLE).current_snapshot().snapshot_id != holder

    report = M.maintain(warehouse, SRC, TABLE, keep_seconds=0, orphan_grace_seconds=0,
                        compact_min_files=NO_COMPACTION)

    assert report.snapshots_expired == 1   # the first merge's only
    assert holder in {s.snapshot_id for s in warehouse.load(SRC, TABLE).metadata.snapshots}
    assert warehouse.state(SRC, TABLE).log_upto == "p2" and [r["id"] for r in rows(warehouse)] == [1, 3, 100]


def test_the_sweep_refuses_to_run_when_a_file_the_table_references_is_not_listed(warehouse):
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    t = warehouse.load(SRC, TABLE)
    location = t.metadata.location.removeprefix("file://")
    orphan = plant(f"{location}/data/_dblog_bucket=0/killed-merge-0.parquet", 7200)
    [gone] = [task.file.file_path for task in t.scan().plan_files() if task.file.partition[0] == 1]
    os.remove(gone.removeprefix("file://"))
    with pytest.raises(M.MaintenanceError, match="not listed under .*: not sweeping"):
        M.maintain(warehouse, SRC, TABLE, orphan_grace_seconds=0)
    assert os.path.exists(orphan)


def test_each_table_is_maintained_under_its_merge_lease_and_an_unknown_table_is_refused(warehouse, monkeypatch):
    from dblog.coordination import store as paths
    merge(warehouse, {0: [1], 1: [100]}, upto="p1")
    store, seen = FakeStore(), []
    real = M.maintain

    def maintain(w, source, table, **opts):
        seen.append((store.events[-1], opts))   # the lease is held while the table is maintained
        return real(w, source, table, **opts)
    monkeypatch.setattr(M, "maintain", maintain)

    [report] = M.maintain_source(store, warehouse, SRC, dry_run=True)
    lock = paths.merge_lock(SRC, TABLE)
    assert report.table == TABLE and store.events == [("take", lock), ("release", lock)]
    assert seen == [(("take", lock), {"dry_run": True})]
    with pytest.raises(M.MaintenanceError, match=r"src has no warehouse table shop.nope \(it has shop.order lines\)"):
        M.maintain_source(store, warehouse, SRC, ["shop.nope"])
    with pytest.raises(M.MaintenanceError, match="holds its lock for more than 5s"):
        M.maintain_source(FakeStore({lock}), warehouse, SRC, lock_timeout=5)


@pytest.fixture
def cli_env(warehouse, monkeypatch, tmp_path):
    from dblog import cli
    from dblog.cli import cli_options
    monkeypatch.setenv("DBLOG_WAREHOUSE", warehouse.root.removeprefix("file://"))
    monkeypatch.setenv("DBLOG_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("DBLOG_SOURCES", SRC)
    store = FakeStore()
    monkeypatch.setattr(cli_options, "store", lambda: store)
    return cli, store


def test_dblog_warehouse_ls_prints_identifier_snapshot_rows_and_metadata_of_each_table(warehouse, cli_env, capsys):
    cli, _ = cli_env
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    t = warehouse.load(SRC, TABLE)
    assert cli.main(["warehouse", "ls"]) == 0
    assert capsys.readouterr().out == (f'{SRC} {TABLE}: identifier ["{SRC}", "{TABLE}"], snapshot '
                                       f"{t.current_snapshot().snapshot_id}, 3 rows, metadata {t.metadata_location}\n")


def test_dblog_maintain_prints_one_line_per_table_and_its_dry_run_changes_nothing(warehouse, cli_env, capsys):
    cli, store = cli_env
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    merge(warehouse, {0: [1, 3]}, upto="p2")
    head = warehouse.load(SRC, TABLE).metadata_location
    assert cli.main(["maintain", "--table", TABLE, "--keep-seconds", "0", "--orphan-grace", "0", "--dry-run"]) == 0
    dry, staged_dry = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"{SRC} {TABLE}: would expire 1 snapshot\(s\), compact 0 bucket\(s\), remove (\d+) "
                        r"file\(s\) \(([\d,]+) bytes\), \d+\.\ds \(dry run\)", dry), dry
    assert staged_dry.startswith(f"{SRC} staged log: would remove 0 segment(s)") and staged_dry.endswith("(dry run)")
    assert warehouse.load(SRC, TABLE).metadata_location == head
    assert cli.main(["maintain", "--keep-seconds", "0", "--orphan-grace", "0"]) == 0
    real = capsys.readouterr().out.splitlines()[0]
    assert real.replace("expired", "would expire").replace("compacted", "compact").replace("removed", "remove") \
        .split(", ")[:3] == dry.split(", ")[:3], (dry, real)   # the dry run said what the run did
    lock, staged_lock = f"/{SRC}/merge/{TABLE}/lock", f"/{SRC}/staged/lock"
    assert store.events == [("take", lock), ("release", lock), ("take", staged_lock), ("release", staged_lock)] * 2
    assert cli.main(["maintain", "--orphan-grace", "-1"]) == 2
    assert "--orphan-grace must be from 0 to 31,536,000, got -1.0" in capsys.readouterr().err
    assert cli.main(["maintain", "--log-retention", "60"]) == 2
    assert "--log-retention must be from 3,600 to 315,360,000, got 60.0" in capsys.readouterr().err
    assert cli.main(["maintain", "--table", "shop.nope"]) == 2
    assert "src has no warehouse table shop.nope" in capsys.readouterr().err


def test_dblog_warehouse_drop_removes_the_table_and_its_files_under_its_merge_lease(warehouse, cli_env, capsys):
    cli, store = cli_env
    merge(warehouse, {0: [1, 2], 1: [100]}, upto="p1")
    location = warehouse.load(SRC, TABLE).metadata.location.removeprefix("file://")
    plant(f"{location}/data/_dblog_bucket=0/killed-merge-0.parquet", 0)
    assert cli.main(["warehouse", "drop", "--source", SRC, "--table", TABLE]) == 0
    assert capsys.readouterr().out == f"{SRC} {TABLE}: dropped, with its files\n"
    assert warehouse.load(SRC, TABLE) is None and not os.path.exists(location)
    # Under the lease, the mark that made its dumps stage plain chunks goes first.
    from dblog.coordination.loaded_tables import loaded_path
    assert store.events == [("take", f"/{SRC}/merge/{TABLE}/lock"), ("delete", loaded_path(SRC, TABLE)),
                            ("release", f"/{SRC}/merge/{TABLE}/lock")]
    assert cli.main(["warehouse", "drop", "--source", SRC, "--table", TABLE]) == 1
    assert capsys.readouterr().out == f"{SRC} {TABLE}: no such warehouse table\n"
