"""A small merge runs without Spark (`dblog.merge.small_merge`) and leaves the table exactly as the
Spark merge does: the same schema, rows, tombstones and metadata columns, from the merge that
creates the table on, round after round, for inserts, updates, deletes, a re-insert and a
primary-key update, on both sources."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from dblog.merge.job import merge_table
from dblog.storage import filesystem
from dblog.warehouse.tables import Warehouse

from conftest import assert_warehouse_equals_source, settle

ROUNDS = (
    ["UPDATE {t} SET i = i + 1, s = 'upd' WHERE id < 6", "DELETE FROM {t} WHERE id IN (7, 8)",
     "INSERT INTO {t} VALUES (100, 1, 'new', 1.50, '2026-01-02 03:04:05', 0.5, NULL)"],
    ["INSERT INTO {t} VALUES (7, 70, 'back', 7.00, '2026-02-03 04:05:06', 7.5, 7)",   # a deleted key again
     "UPDATE {t} SET id = id + 1000 WHERE id = 3",                                     # a key update
     "UPDATE {t} SET n = 1 WHERE id = 9", "UPDATE {t} SET n = 2 WHERE id = 9", "DELETE FROM {t} WHERE id = 100"],
)


def everything(warehouse: Warehouse, src, table: str) -> list[dict]:
    """Every stored row, live and tombstone, with its metadata but the merge's wall-clock time."""
    state = warehouse.state(src.source_id, table, files=True)
    parts = []
    for f in [f for b in state.buckets for f in b.files + b.tombstones]:
        fs, path = filesystem(f.file_path)
        parts.append(pq.read_table(path, filesystem=fs))
    rows = pa.concat_tables(parts).drop_columns(["_dblog_merged_at"]).to_pylist()
    return sorted(rows, key=lambda r: (r["_dblog_position"], r["id"]))


def test_a_small_merge_without_spark_leaves_the_table_as_the_spark_merge_does(src, spark, tmp_path, monkeypatch):
    table = src.table("small")
    stamp = "DATETIME" if src.kind == "mariadb" else "TIMESTAMP"
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, i BIGINT, s VARCHAR(20), d DECIMAL(10,2), t {stamp}, "
            "f DOUBLE PRECISION, n INT)")
    src.start_capture()
    src.sql(f"INSERT INTO {table} VALUES " + ", ".join(
        f"({k}, {k * 10}, 'row-{k}', {k}.25, '2026-01-01 00:00:{k:02d}', {k}.5, {k if k % 2 else 'NULL'})"
        for k in range(1, 41)))
    settle(src)
    local, spark_only = Warehouse(str(tmp_path / "local")), Warehouse(str(tmp_path / "spark"))
    with src.store() as store:
        def merge(warehouse: Warehouse, local_rows: int):
            monkeypatch.setenv("DBLOG_MERGE_LOCAL_ROWS", str(local_rows))
            return merge_table(spark, store, src.staged(), warehouse, src.source_id, table)

        first, created = merge(local, 20_000), merge(spark_only, 0)   # a first merge creates the table
        assert first.note == "merged without Spark (small)" and created.note != first.note
        assert local.load(src.source_id, table).schema() == spark_only.load(src.source_id, table).schema()
        assert everything(local, src, table) == everything(spark_only, src, table)
        for statements in ROUNDS:
            src.sql(*[s.format(t=table) for s in statements])
            settle(src)
            small, big = merge(local, 20_000), merge(spark_only, 0)
            assert small.note == "merged without Spark (small)" and big.note != small.note
            assert (small.log_events, small.rows, small.tombstones, small.buckets_written) == \
                   (big.log_events, big.rows, big.tombstones, big.buckets_written)
            assert everything(local, src, table) == everything(spark_only, src, table)

        # Turned down once the transaction is open (its stored files): the same events through Spark.
        from dblog.merge import small_merge
        monkeypatch.setattr(small_merge, "_stored", lambda bucket, target: None)
        src.sql(f"UPDATE {table} SET s = 'late' WHERE id IN (1, 2)", f"DELETE FROM {table} WHERE id = 4")
        settle(src)
        fallback, big = merge(local, 20_000), merge(spark_only, 0)
        assert fallback.note != "merged without Spark (small)" and fallback.log_events == big.log_events == 3
        assert everything(local, src, table) == everything(spark_only, src, table)
    assert_warehouse_equals_source(src, local, tables=("small",))


def test_a_one_bucket_table_past_the_row_limit_merges_without_spark_while_its_stored_files_are_small(
        mariadb, spark, tmp_path, monkeypatch):
    """DBLOG_MERGE_LOCAL_BUCKET_BYTES: a table of more rows than DBLOG_MERGE_LOCAL_ROWS still merges
    on the driver while its bucket's files are small; with the byte limit at 0 it takes Spark."""
    src, table = mariadb, mariadb.table("grown")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, s VARCHAR(20))")
    src.start_capture()
    src.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({k}, 'row-{k}')" for k in range(1, 101)))
    settle(src)
    warehouse = Warehouse(str(tmp_path / "wh"))
    monkeypatch.setenv("DBLOG_MERGE_LOCAL_ROWS", "50")   # fewer than the table's 100 rows
    with src.store() as store:
        merge_table(spark, store, src.staged(), warehouse, src.source_id, table)
        for limit, small in ((0, False), (32 << 20, True)):
            monkeypatch.setenv("DBLOG_MERGE_LOCAL_BUCKET_BYTES", str(limit))
            src.sql(f"UPDATE {table} SET s = 'upd-{limit}' WHERE id < 4")
            settle(src)
            result = merge_table(spark, store, src.staged(), warehouse, src.source_id, table)
            assert (result.note == "merged without Spark (small)") is small, result.note
            assert (result.log_events, result.rows) == (3, 100)
    assert_warehouse_equals_source(src, warehouse, tables=("grown",))
