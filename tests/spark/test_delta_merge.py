"""A merge of a few keys into big buckets leaves their data files in place and writes Iceberg
position deletes (`dblog.merge.delta`), through Spark or on the driver (`local_delta`): every
reader (pyiceberg, DuckDB, dblog's own Spark reads) sees exactly the rows and tombstones a rewrite
of the same buckets leaves, round after round; a later rewrite and maintenance's compaction apply the deletes and remove them."""
from __future__ import annotations

import time

import pytest

from dblog.merge.delta import is_delta
from dblog.merge.job import merge_source, merge_table
from dblog.snapshot.dump import create_dump, set_control
from dblog.snapshot.dump_spec import DumpSpec
from dblog.spark.data_sources import spark_table
from dblog.warehouse import deletes
from dblog.warehouse.catalog import BRANCH
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.table_maintenance import compact
from dblog.warehouse.tables import Warehouse

from chaos.oracles import PositionHistory
from conftest import assert_warehouse_equals_source, settle

ROWS, BUCKET_ROWS = 2000, 500
ROUNDS = (   # scattered over every bucket, a few rows each
    ["UPDATE {t} SET i = i + 1, s = 'upd' WHERE id % 97 = 0", "DELETE FROM {t} WHERE id IN (7, 1508)",
     "INSERT INTO {t} VALUES (2500, 1, 'new', 1.50)"],
    ["DELETE FROM {t} WHERE id IN (1508, 1509)", "INSERT INTO {t} VALUES (1508, 2, 'again', 2.50)",
     "UPDATE {t} SET s = 'upd2' WHERE id % 89 = 0",   # over kept tombstones: one replaced, one kept
     "UPDATE {t} SET s = 'upd3' WHERE id % 97 = 0 AND id < 1000"],   # rows the first round changed
    ["INSERT INTO {t} VALUES (7, 70, 'back', 7.00)",        # a deleted key again
     "UPDATE {t} SET id = id + 5000 WHERE id = 1003",        # a key update, into another bucket
     "UPDATE {t} SET s = 'twice' WHERE id = 9", "UPDATE {t} SET s = 'thrice' WHERE id = 9",
     "DELETE FROM {t} WHERE id = 2500",
     "UPDATE {t} SET id = id + 7000 WHERE id = 1067", "UPDATE {t} SET s = 'd' WHERE id IN (1164, 1261)"],
    ["UPDATE {t} SET s = 'last' WHERE id % 50 = 0"],   # every bucket
)
SPARK_ROUND = 1   # ... which the driver's warehouse merges through Spark: its delete files then name delta rows


def rows(warehouse: Warehouse, src, table: str, ref: str = "main") -> list[dict]:
    """The ref's rows as pyiceberg reads them (position deletes applied), metadata but the merge time."""
    t = warehouse.load(src.source_id, table)
    if t.snapshot_by_name(ref) is None:
        return []
    data = t.scan().use_ref(ref).to_arrow().drop_columns(["_dblog_merged_at"])
    return sorted(data.to_pylist(), key=lambda r: (r["id"], r["_dblog_position"]))


def delete_files(warehouse: Warehouse, src, table: str) -> list:
    state = warehouse.state(src.source_id, table, files=True)
    return [d for b in state.buckets for d in b.deletes]


def test_scattered_changes_write_position_deletes_that_every_reader_applies_as_a_rewrite_would(
        src, spark, tmp_path, monkeypatch):
    table = src.table("wide")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, i BIGINT, s VARCHAR(20), d DECIMAL(10,2))")
    src.start_capture()
    for start in range(1, ROWS + 1, 500):
        src.sql(f"INSERT INTO {table} VALUES " + ", ".join(
            f"({k}, {k * 10}, 'row-{k}', {k}.25)" for k in range(start, start + 500)))
    settle(src)
    by_delta, by_rewrite = Warehouse(str(tmp_path / "delta")), Warehouse(str(tmp_path / "rewrite"))
    by_driver = Warehouse(str(tmp_path / "driver"))   # the in-place merge without Spark (`local_delta`)
    with src.store() as store:
        def merge(warehouse: Warehouse, ratio: int, driver: bool = False):
            monkeypatch.setenv("DBLOG_MERGE_DELTA_RATIO", str(ratio))
            monkeypatch.setenv("DBLOG_MERGE_LOCAL_ROWS", "20000" if driver else "0")
            return merge_table(spark, store, src.staged(), warehouse, src.source_id, table, bucket_rows=BUCKET_ROWS)

        merge(by_delta, 20), merge(by_rewrite, 0), merge(by_driver, 20, driver=True)
        assert warehouse_buckets(by_delta, src, table) == 4 and not delete_files(by_delta, src, table)
        # A dump of the table registered (not run): the merges keep their tombstones meanwhile.
        kept = create_dump(store, src.source(), DumpSpec(tables=[table]))
        for i, round_ in enumerate(ROUNDS):
            if i == len(ROUNDS) - 1:
                set_control(store, src.source_id, kept, state="cancelled")   # ... and purge them again
            src.sql(*[s.format(t=table) for s in round_])
            settle(src)
            small, whole = merge(by_delta, 20), merge(by_rewrite, 0)
            driver = merge(by_driver, 20, driver=i != SPARK_ROUND)
            assert "changed in place" in small.note and "changed in place" not in whole.note
            assert "without Spark" not in small.note
            assert ("changed in place without Spark" in driver.note) == (i != SPARK_ROUND), driver.note
            for done in (small, driver):
                assert (done.log_events, done.rows, done.tombstones) == (whole.log_events, whole.rows, whole.tombstones)
            for ref in ("main", BRANCH):
                assert rows(by_delta, src, table, ref) == rows(by_rewrite, src, table, ref), ref
                assert rows(by_driver, src, table, ref) == rows(by_rewrite, src, table, ref), ref
        assert sorted(duckdb_read(by_driver, src.source_id, table)["id"].to_pylist()) == \
            sorted(r["id"] for r in rows(by_rewrite, src, table))
        # On the driver, a bucket changed round after round keeps one delta file and one delete file
        # (those of the round through Spark folded in); through Spark, a file of each a round.
        state = by_driver.state(src.source_id, table, files=True)
        assert [len(b.deletes) for b in state.buckets] == [1] * len(state.buckets)
        assert [sum(is_delta(f.file_path) for f in b.files) for b in state.buckets] == [1] * len(state.buckets)
        assert len(delete_files(by_delta, src, table)) > 2 * len(state.buckets)
        assert_warehouse_equals_source(src, by_driver, tables=("wide",))
        written = delete_files(by_delta, src, table)
        assert len(written) >= 4 and all(deletes.is_delete(d) for d in written)   # every bucket took some
        # Other engines' readers apply them too: DuckDB, and Spark through dblog's Iceberg source.
        expected = sorted(r["id"] for r in rows(by_rewrite, src, table))
        assert sorted(duckdb_read(by_delta, src.source_id, table)["id"].to_pylist()) == expected
        assert sorted(r["id"] for r in spark_table(spark, by_delta, src.source_id, table).select("id").collect()) \
            == expected
        assert_warehouse_equals_source(src, by_delta, tables=("wide",))

        # A rewrite of the buckets (many keys at once) reads them without the deleted rows.
        src.sql(f"UPDATE {table} SET s = 'all' WHERE id % 2 = 0")
        settle(src)
        assert "changed in place" not in merge(by_delta, 20).note
        assert not delete_files(by_delta, src, table)
        assert_warehouse_equals_source(src, by_delta, tables=("wide",))

        # Maintenance compacts a bucket with position deletes into one file, rows unchanged.
        src.sql(f"UPDATE {table} SET s = 'one' WHERE id IN (11, 611, 1211, 1811)")
        settle(src)
        merge(by_delta, 20)
        before = rows(by_delta, src, table)
        assert delete_files(by_delta, src, table)
        assert compact(by_delta.load(src.source_id, table), 4, dry_run=False) >= 4
        assert not delete_files(by_delta, src, table) and rows(by_delta, src, table) == before
        assert_warehouse_equals_source(src, by_delta, tables=("wide",))


def warehouse_buckets(warehouse: Warehouse, src, table: str) -> int:
    return len(warehouse.state(src.source_id, table).buckets)



# The driver's case runs a dump's chunk merges in place through Spark too (their merges are not
# log-only), so the all-Spark case is `make test-full`'s.
@pytest.mark.parametrize("where", [pytest.param("spark", marks=pytest.mark.long), "driver"])
def test_merges_changing_buckets_in_place_during_a_dump_under_writes_converge_and_no_key_goes_back(
        src, spark, warehouse, monkeypatch, where):
    """Position deletes wherever a merge qualifies at all (ratio 1, small buckets, a writer slow
    enough that a merge brings fewer rows than its buckets hold): chunk survivors, rows dropped in
    windows, tombstones and key updates change buckets in place while the dump and the writer run,
    through Spark, or on the driver for the merges of log events alone (their delta and delete
    files rewritten merge after merge)."""
    monkeypatch.setenv("DBLOG_MERGE_DELTA_RATIO", "1")
    monkeypatch.setenv("DBLOG_MERGE_LOCAL_ROWS", "0" if where == "spark" else "20000")
    src.workload(seed=13, rows=1000).create()
    src.start_capture()
    settle(src)
    writer = src.spawn_workload(seconds=3600, seed=14, rows=1000, rate=40)
    dump = src.spawn("dump", "--source", src.source_id, "--all", "--chunk-size", "97", "--delay", "0.02")
    merges, history, problems = [], PositionHistory(), []
    with src.store() as store:
        def merge():
            merges.extend(merge_source(spark, store, src.staged(), warehouse, src.source_id, bucket_rows=200))
            problems.extend(history.observe(warehouse, src.source_id))
        deadline = time.monotonic() + 300
        wanted = "changed in place" if where == "spark" else "changed in place without Spark"
        while dump.poll() is None or sum(wanted in m.note for m in merges) < 2:
            assert time.monotonic() < deadline, [m.note for m in merges]
            merge()
        assert dump.returncode == 0, dump.stderr.read()
        writer.terminate(); writer.wait()
        settle(src)
        merge()
    assert not problems, problems[:5]
    assert_warehouse_equals_source(src, warehouse)
