"""What a merge reads grows with what changed: its chunks' watermark positions come from the
watermark index (never the staged watermark log), and a finished dump whose chunks are all merged
is not listed again, even once its ZooKeeper record is gone (a landed repair's is deleted)."""
from dblog.coordination import store as paths
from dblog.merge.job import merge_source
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.staged_log import StagedLog

from conftest import assert_warehouse_equals_source, settle, wait_for


class WatchedLog(StagedLog):
    """The staged log a merge reads, refusing the watermark table and recording the dump
    directories whose files it lists."""
    listed: list

    def segments(self, source, table, *args, **kwargs):
        assert table != WATERMARK_TABLE, "the merge read the staged watermark log"
        return super().segments(source, table, *args, **kwargs)

    def chunk_files(self, source, table, dump_id=None):
        assert dump_id is not None, "the merge listed every chunk file of the table"
        self.listed.append(dump_id)
        return super().chunk_files(source, table, dump_id)


def merge(spark, src, warehouse) -> set[str]:
    """Merge every table; the dumps whose chunk files the merge listed."""
    staged = WatchedLog(str(src.staging))
    staged.listed = []
    with src.store() as store:
        results = merge_source(spark, store, staged, warehouse, src.source_id)
    assert all(r.snapshot_id for r in results)
    return set(staged.listed)


def test_a_merge_reads_no_watermark_log_and_lists_only_dumps_with_chunks_left(mariadb, spark, warehouse):
    writes = mariadb.workload(seed=81, rows=400)
    writes.create()
    mariadb.start_capture()
    dump = mariadb.dblog("dump", "start", "first", "--source", mariadb.source_id, "--all", "--chunk-size", "60")
    assert dump.returncode == 0, dump.stderr
    settle(mariadb)
    assert merge(spark, mariadb, warehouse) == {"first"}
    assert_warehouse_equals_source(mariadb, warehouse)

    writes.run(seconds=30, max_ops=200)
    dump = mariadb.dblog("dump", "start", "second", "--source", mariadb.source_id, "--table", "accounts",
                         "--chunk-size", "60")
    assert dump.returncode == 0, dump.stderr
    settle(mariadb)
    assert merge(spark, mariadb, warehouse) == {"second"}
    assert_warehouse_equals_source(mariadb, warehouse)

    with mariadb.store() as store:
        for dump_id in ("first", "second"):
            store.delete(paths.dump_path(mariadb.source_id, dump_id), recursive=True)
    writes.run(seconds=30, max_ops=100)
    settle(mariadb)
    # Each table's state keeps the counts the merges read from the dumps' records.
    assert merge(spark, mariadb, warehouse) == set()
    assert_warehouse_equals_source(mariadb, warehouse)


def test_a_dumps_merged_totals_add_up_across_the_merges_that_took_its_chunks(mariadb, spark, warehouse, monkeypatch):
    """Each merge adds the chunks it took to the dump's record (what the merge task of dblog_dump
    and `dblog status` report): a merge of the first chunk, then one of the rest."""
    # (A first load's merges otherwise wait for its dump: `merge/load_in_progress`.)
    monkeypatch.setenv("DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS", "0")
    mariadb.workload(seed=7, rows=50).create()
    mariadb.start_capture()
    sid, table = mariadb.source_id, mariadb.table("accounts")
    dump_id = mariadb.dblog("dump", "--source", sid, "--table", "accounts", "--chunk-size", "20", "--delay", "3600",
                            "--create-only", check=True).stdout.strip()
    dumping = mariadb.spawn("dump", "run", dump_id, "--source", sid)  # waits an hour after its first chunk
    with mariadb.store() as store:
        progress, merged = paths.table_progress_path(sid, dump_id, table), paths.dump_merged_path(sid, dump_id, table)
        wait_for(lambda: (store.get(progress) or {}).get("chunks", 0) >= 1, 60, what="the first chunk")
        settle(mariadb)
        merge_source(spark, store, mariadb.staged(), warehouse, sid)
        assert store.get(merged) == {"chunks": 1, "rows": 20, "dropped": 0}

        mariadb.dblog("dump", "throttle", dump_id, "--source", sid, "--delay", "0", check=True)
        wait_for(lambda: store.get(progress)["status"] == "done", 60, what="the dump to finish")
        assert dumping.wait(60) == 0
        settle(mariadb)
        merge_source(spark, store, mariadb.staged(), warehouse, sid)
        assert store.get(merged) == {"chunks": 3, "rows": 50, "dropped": 0}  # 20 + 20 + 10 rows
