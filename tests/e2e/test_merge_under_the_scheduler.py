"""The continuous merge under the real scheduler (`airflow standalone`): `dblog_merge_continuous`
runs slice after slice beside the capture, a change written to the source shows in the warehouse
within seconds, and each slice sends at most one Asset event per table."""
from __future__ import annotations

import time
from collections import Counter

import pytest

from dblog.warehouse import change_tables
from dblog.warehouse.tables import Warehouse

from airflow_fixtures import MERGE_SLICE_SECONDS
from conftest import wait_for

DAG_ID = "dblog_merge_continuous"


def _runs(standalone, state: str, since: str) -> list[dict]:
    """Runs in `state` started after `since` (an ISO time)."""
    runs = standalone.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100}).json()["dag_runs"]
    return [r for r in runs if r["state"] == state and (r["start_date"] or "") >= since]


@pytest.mark.late(1)
def test_the_continuous_merge_runs_slice_after_slice_and_a_change_is_visible_within_seconds(standalone):
    """Runs after the deployment's other tests (their dumps and writes): every slice since the
    deployment started counts, so the slices it needs have mostly run already."""
    src, warehouse = standalone.src, Warehouse(standalone.warehouse)
    table = src.table("accounts")
    since = standalone.started
    writer = src.spawn_workload(seconds=3600, seed=81, rows=3000, rate=20)
    try:
        wait_for(lambda: len(_runs(standalone, "success", since)) >= 2, 12 * MERGE_SLICE_SECONDS, interval=2,
                 what="two slices of the continuous merge to finish under the scheduler")
        assert writer.poll() is None, f"the writer died: {writer.stderr.read()[-2000:]}"
        marker = 9_000_000 + int(time.time()) % 1_000_000
        src.sql(f"INSERT INTO {table} (id, name) VALUES ({marker}, 'fresh')")
        written = time.time()

        def visible() -> bool:
            if warehouse.load(src.source_id, table) is None:
                return False
            rows = warehouse.read(src.source_id, table, ["id", "name"]).to_pylist()
            return {"id": marker, "name": "fresh"} in rows
        # Across a handover too (a Spark start): well within one slice.
        wait_for(visible, 2 * MERGE_SLICE_SECONDS, interval=0.5, what="the new row to reach the warehouse")
        print(f"\nvisible {time.time() - written:.1f} s after its commit")
    finally:
        writer.kill()

    def freshness_reported() -> bool:
        # The slice that made the row visible says, in its task's log as it commits, how long its
        # changes waited (the log is read while the slice still runs, as the UI shows it).
        return any("oldest change waited" in standalone.task_log(DAG_ID, r["dag_run_id"], "merge")
                   for state in ("running", "success") for r in _runs(standalone, state, since))
    wait_for(freshness_reported, 4 * MERGE_SLICE_SECONDS, interval=2,
             what="a finished slice that merged log events to report how long they waited")
    assert not _runs(standalone, "failed", since)
    done, with_events, ranges = _runs(standalone, "success", since), 0, []
    for run in done:
        log = standalone.task_log(DAG_ID, run["dag_run_id"], "merge")
        assert "slice done:" in log, log[-3000:]
        assert "every table merged without failing" in standalone.task_log(DAG_ID, run["dag_run_id"], "check")
        events = standalone.api("GET", "/assets/events", params={
            "source_dag_id": DAG_ID, "source_run_id": run["dag_run_id"], "limit": 100}).json()["asset_events"]
        per_table = Counter(e["extra"]["identifier"][1] for e in events)
        assert not per_table or max(per_table.values()) == 1, per_table   # one event per table per slice
        assert all(e["extra"]["snapshot_id"] and e["extra"]["upto"] for e in events)
        with_events += bool(events)
        ranges += [e["extra"]["changes"] for e in events
                   if e["extra"]["identifier"][1] == table and "changes" in e["extra"]]
    assert with_events, "no slice under the writes sent an asset event"
    # The deployment keeps a change table for accounts: its events say which snapshots are new.
    changes = change_tables.load(warehouse, src.source_id, table)
    snapshots = {s.snapshot_id: s for s in changes.metadata.snapshots}
    assert ranges and all(r["upto_snapshot_id"] in snapshots and r["rows"] > 0 for r in ranges), ranges
    newest = max(ranges, key=lambda r: snapshots[r["upto_snapshot_id"]].timestamp_ms)
    added, sid = 0, newest["upto_snapshot_id"]
    while sid != newest["after_snapshot_id"]:   # the range's snapshots hold exactly the rows it names
        added += int(snapshots[sid].summary.get("added-records", 0))
        sid = snapshots[sid].parent_snapshot_id
    assert added == newest["rows"], (added, newest)

    # Lineage, through Airflow's OpenLineage provider: the slices' merge tasks report the source
    # table into its Iceberg table and its change table, each with its columns.
    merged = [e for e in standalone.lineage() if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.merge"
              and any(d["name"] == table for d in e["inputs"])]
    assert merged, "no slice's merge task reported the table's lineage"
    written = {d["facets"]["symlinks"]["identifiers"][0]["name"]: d for d in merged[-1]["outputs"]}
    t = warehouse.load(src.source_id, table)
    into = written[f"{src.source_id}.{table}"]
    assert (into["namespace"], into["name"]) == ("file", t.metadata.location.removeprefix("file://"))
    assert {"id", "_dblog_position"} <= {f["name"] for f in into["facets"]["schema"]["fields"]}
    assert f"{change_tables.C.changes_namespace(src.source_id)}.{table}" in written, written.keys()
