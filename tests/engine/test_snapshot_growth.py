"""A continuously merged table commits a snapshot every few seconds: thousands a day. Maintenance
(expiry, compaction, the orphan sweep) keeps what the table holds bounded, commit after commit."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from dblog.coordination.store import StateStore
from dblog.warehouse import table_maintenance as M
from dblog.warehouse.catalog import PROPERTIES
from dblog.warehouse.tables import Warehouse

from maintenance_tables import SRC, TABLE, merge

# The suite's short form (four maintenance runs); `make growth` runs 2,000 (about 9 minutes here).
COMMITS = int(os.environ.get("DBLOG_GROWTH_COMMITS", "200"))
EVERY = max(50, COMMITS // 8)   # commits between two maintenance runs (a day of 2-second commits is ~43,000)


@pytest.mark.timeout(1800)
def test_thousands_of_commits_with_periodic_maintenance_keep_snapshots_files_and_metadata_bounded(
        services, tmp_path, monkeypatch):
    monkeypatch.delenv("DBLOG_ICEBERG_CATALOG", raising=False)
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    store = StateStore(f"127.0.0.1:{services['ZK']}", f"/growth_{uuid.uuid4().hex[:8]}").start()
    sizes, kept_versions = [], int(PROPERTIES["write.metadata.previous-versions-max"])
    try:
        for n in range(1, COMMITS + 1):
            # Each commit replaces bucket 0 (a recent key) and sometimes leaves a tombstone.
            merge(warehouse, {0: [1, 2, n + 2]}, {0: [n + 1]} if n % 7 == 0 else None, upto=f"p{n:08d}")
            if n % EVERY:
                continue
            [report] = M.maintain_source(store, warehouse, SRC, keep_seconds=0, orphan_grace_seconds=0,
                                         compact_min_files=4)
            t = warehouse.load(SRC, TABLE)
            root = Path(t.metadata.location.removeprefix("file://"))
            referenced = {f.file.file_path.removeprefix("file://") for ref in ("main", "dblog-tombstones")
                          for f in t.scan().use_ref(ref).plan_files()}
            on_disk = {str(p) for p in (root / "data").rglob("*.parquet")}
            metadata = list((root / "metadata").glob("*.metadata.json"))
            assert len(t.metadata.snapshots) <= 4, f"after {n} commits: {len(t.metadata.snapshots)} snapshots"
            assert on_disk == referenced, f"after {n} commits: {len(on_disk - referenced)} unreferenced data files"
            assert len(metadata) <= kept_versions + 2, f"after {n} commits: {len(metadata)} metadata files"
            assert len(list((root / "metadata").glob("*.avro"))) <= 40, f"after {n} commits: manifests pile up"
            assert t.scan().to_arrow().num_rows == 3 and report.line()
            sizes.append(os.path.getsize(t.metadata_location.removeprefix("file://")))
    finally:
        store.stop()
    # The table's metadata does not grow with the commits it has seen.
    assert len(sizes) >= 2 and sizes[-1] <= 1.2 * sizes[0], sizes
