"""The staged log's retention and compaction beside real merges (Spark, Iceberg): a merge that listed
segments before a compaction reads them after it, retention never takes what a table has not
merged, and every merge converges to the source."""
from __future__ import annotations

from dblog.merge.job import merge_source
from dblog.operations.staged_maintenance import maintain_staged
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.staged_log import StagedLog

from conftest import assert_warehouse_equals_source, settle

EVERY_SMALL_SEGMENT = {"compact_min_segments": 2, "compact_bytes": 1 << 20}


def test_a_merge_that_listed_segments_before_a_compaction_reads_them_after_and_retention_keeps_what_is_not_merged(
        mariadb, spark, warehouse):
    w = mariadb.workload(seed=74, rows=300)
    w.create()
    w.next_id = 1_000_000   # keys its key updates move rows to, apart from the spawned writer's
    mariadb.start_capture()
    writer = mariadb.spawn_workload(seconds=3600, seed=75, rows=300)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--all", "--chunk-size", "50", check=True)
    writer.terminate(); writer.wait()
    w.run(seconds=2.5)   # a few flushes: several segments per table
    settle(mariadb)
    source, store = mariadb.source_id, mariadb.store()
    merging, tending = mariadb.staged(), mariadb.staged()
    listed: list[str] = []

    def list_then_compact(src: str, table: str, *args, **kwargs) -> list[str]:
        """The merge lists a table's segments; a maintenance compacts them before Spark reads them."""
        out = StagedLog.segments(merging, src, table, *args, **kwargs)
        if table != WATERMARK_TABLE and not listed:
            listed.extend(out)
            report = maintain_staged(store, tending, warehouse, source, replaced_grace_seconds=3600,
                                     **EVERY_SMALL_SEGMENT)
            assert report.segments_compacted > 0 and not set(out) & set(tending.segments(src, table))
        return out

    merging.segments = list_then_compact  # type: ignore[method-assign]
    merge_source(spark, store, merging, warehouse, source)
    assert len(listed) > 1
    assert_warehouse_equals_source(mariadb, warehouse)

    w.run(seconds=1.5)
    settle(mariadb)
    merge_source(spark, store, tending, warehouse, source)   # the compacted segments and the new ones
    assert_warehouse_equals_source(mariadb, warehouse)

    # Staged, not merged: retention leaves it, whatever its age.
    w.run(seconds=1.5)
    settle(mariadb)
    unmerged = {}
    for name in ("accounts", "order_lines"):
        table = mariadb.table(name)
        upto = warehouse.state(source, table).log_upto
        unmerged[table] = tending.read_log(source, table, low=upto).to_pylist()
        assert len(unmerged[table]) > 1
    report = maintain_staged(store, tending, warehouse, source, window_seconds=0, replaced_grace_seconds=0,
                             **EVERY_SMALL_SEGMENT)
    assert report.segments_removed > 0 and report.replaced_removed > 0 and report.dumps_removed == 1
    assert tending.chunk_files(source, mariadb.table("accounts")) == []
    for table, events in unmerged.items():
        assert tending.read_log(source, table, low=warehouse.state(source, table).log_upto).to_pylist() == events
    merge_source(spark, store, tending, warehouse, source)
    assert_warehouse_equals_source(mariadb, warehouse)

    w.run(seconds=1.5)   # updates and deletes of rows whose history the staged log no longer holds
    settle(mariadb)
    merge_source(spark, store, tending, warehouse, source)
    assert_warehouse_equals_source(mariadb, warehouse)
    store.stop()
