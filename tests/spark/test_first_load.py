"""A table's first load (nothing stored, no event, one dump's disjoint chunks) is written straight
into its buckets (`dblog.merge.first_load`): the same rows and values the general merge writes,
and the general merge whenever the source's key order is not Spark's."""
from pathlib import Path

from dblog.merge import job
from dblog.merge.job import merge_table
from dblog.warehouse.catalog import location
from dblog.warehouse.tables import Warehouse

from conftest import assert_warehouse_equals_source, settle
from kinds_table import KINDS, rows

COMPARED = ["_dblog_position", "_dblog_op", "_dblog_origin", "_dblog_dump_id", "_dblog_missing"]


def _load(src, create: str, insert: str, values: list[tuple]) -> None:
    """The table and its rows exist before the capture starts: its log stays empty."""
    src.sql(create)
    admin = src.admin()
    try:
        admin.cursor().executemany(insert, values)
        admin.commit()
    finally:
        admin.close()
    src.start_capture()


def _merge(spark, src, warehouse, table: str, **options):
    with src.store() as store:
        return merge_table(spark, store, src.staged(), warehouse, src.source_id, table, **options)


def _rows(warehouse, src, table: str) -> list[dict]:
    columns = [c for c, _ in warehouse.state(src.source_id, table).columns] + COMPARED
    return sorted(warehouse.read(src.source_id, table, columns).to_pylist(), key=lambda r: r["id"])


def test_a_first_load_writes_every_column_kind_as_the_general_merge_does_with_spark_or_on_the_driver(
        src, spark, warehouse, tmp_path, monkeypatch):
    create, insert = (s.format(ns=src.namespace) for s in KINDS[src.kind])
    _load(src, create, insert, rows(src.kind))
    table = src.table("kinds")
    src.dblog("dump", "--source", src.source_id, "--table", "kinds", "--chunk-size", "1", check=True)
    settle(src)
    fast = _merge(spark, src, warehouse, table, bucket_rows=1)
    assert fast.note.startswith("first load") and fast.survivors == 3 and fast.log_events == 0
    assert [b.rows for b in warehouse.state(src.source_id, table, files=True).buckets] == [1, 1, 1]
    assert_warehouse_equals_source(src, warehouse, ["kinds"])

    # The chunks carry the warehouse form for the default bucket size: written, not adopted, here.
    monkeypatch.setenv("DBLOG_MERGE_ADOPT_FIRST_LOAD", "off")
    small = Warehouse(str(tmp_path / "small"))   # one bucket of at most DBLOG_MERGE_LOCAL_ROWS: no Spark job
    on_driver = _merge(spark, src, small, table)
    assert on_driver.note.endswith("on the driver (small)") and on_driver.survivors == 3
    assert _rows(small, src, table) == _rows(warehouse, src, table)

    general = Warehouse(str(tmp_path / "general"))
    monkeypatch.setattr(job, "first_load", lambda *a, **k: None)   # the path every later merge takes
    slow = _merge(spark, src, general, table, bucket_rows=1)
    assert not slow.note and slow.survivors == 3
    assert _rows(warehouse, src, table) == _rows(general, src, table)


def test_a_first_load_whose_key_order_is_not_sparks_takes_the_general_merge_and_leaves_no_file(
        mariadb, spark, warehouse):
    # A case-insensitive collation reads a, B, c; Spark orders B before a.
    _load(mariadb, f"CREATE TABLE {mariadb.namespace}.names (id VARCHAR(10) PRIMARY KEY, v INT) "
                   "DEFAULT CHARSET=utf8mb4 COLLATE utf8mb4_general_ci",
          f"INSERT INTO {mariadb.namespace}.names VALUES (%s, %s)", [("a", 1), ("B", 2), ("c", 3)])
    table = mariadb.table("names")
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "names", "--chunk-size", "1", check=True)
    settle(mariadb)
    result = _merge(spark, mariadb, warehouse, table, bucket_rows=1)
    assert not result.note.startswith("first load") and result.survivors == 3
    assert_warehouse_equals_source(mariadb, warehouse, ["names"])
    root = location(warehouse.root, mariadb.source_id, table).split("://", 1)[-1]
    on_disk = {str(p) for p in Path(root).rglob("*.parquet")}
    assert on_disk == {u.split("://", 1)[-1] for u in warehouse.data_files(mariadb.source_id, table)}


def test_a_first_load_takes_any_key_column_names_and_a_composite_key(postgres, spark, warehouse):
    # Names a Spark DDL string cannot hold, one also a column of the merge's own file list.
    ns = postgres.namespace
    _load(postgres, f'CREATE TABLE {ns}.odd ("bucket" INT, "order id" TEXT, v INT, PRIMARY KEY ("bucket", "order id"))',
          f"INSERT INTO {ns}.odd VALUES (%s, %s, %s)", [(b, o, b * 10) for b in (1, 2, 3) for o in ("a", "b")])
    table = postgres.table("odd")
    postgres.dblog("dump", "--source", postgres.source_id, "--table", "odd", "--chunk-size", "2", check=True)
    settle(postgres)
    result = _merge(spark, postgres, warehouse, table, bucket_rows=2)
    assert result.note.startswith("first load") and result.buckets == 3
    assert_warehouse_equals_source(postgres, warehouse, ["odd"])


def test_a_first_load_writes_many_buckets_per_spark_task_each_its_own_key_range(src, spark, warehouse):
    # 15 buckets, more than the few tasks a core the load runs (local[2]: 4), so tasks write several.
    ns = src.namespace
    _load(src, f"CREATE TABLE {ns}.many (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(12,2))",
          f"INSERT INTO {ns}.many VALUES (%s, %s, %s)", [(i, f"n{i}", f"{i}.25") for i in range(1, 31)])
    table = src.table("many")
    src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "2", check=True)
    settle(src)
    result = _merge(spark, src, warehouse, table, bucket_rows=2)
    assert result.note.startswith("first load") and result.buckets == 15 and result.survivors == 30
    buckets = warehouse.state(src.source_id, table, files=True).buckets
    assert [b.rows for b in buckets] == [2] * 15
    assert [b.lo for b in buckets[1:]] == [[str(k)] for k in range(3, 31, 2)]  # each bucket's lowest key
    assert_warehouse_equals_source(src, warehouse, ["many"])


def test_a_first_load_over_a_gap_its_dump_stepped_through_keeps_the_fast_path(src, spark, warehouse):
    """Ids 1-40 and 101-140, four ranges of 5 a window: the windows step by arithmetic through
    the first run and stage empty chunks across the gap; their footers' ranges keep the chain of
    the dump's chunks whole, so the first load still needs no ranking."""
    ns = src.namespace
    _load(src, f"CREATE TABLE {ns}.gap (id INT PRIMARY KEY, v VARCHAR(20))", f"INSERT INTO {ns}.gap VALUES (%s, %s)",
          [(i, f"v{i}") for i in [*range(1, 41), *range(101, 141)]])
    table = src.table("gap")
    dump = src.dblog("dump", "--source", src.source_id, "--table", "gap", "--chunk-size", "5", "--parallelism", "4",
                     check=True)
    assert f"{table}: windows now split the keys by arithmetic" in dump.stderr
    staged = src.staged()
    empty = [p for p in staged.chunk_files(src.source_id, table) if staged.read_chunk(p).num_rows == 0]
    assert empty, "no stepped split crossed the gap empty: the test does not exercise the chain"
    settle(src)
    result = _merge(spark, src, warehouse, table, bucket_rows=20)
    assert result.note.startswith("first load") and result.survivors == 80
    assert_warehouse_equals_source(src, warehouse, ["gap"])
