"""The warehouse as Iceberg tables, without Spark: what one merge's commit does to a table and
what every reader (pyiceberg, DuckDB) then sees. Tables are built with the executors' writer
and the merge's commit (tests/iceberg_tables.py)."""
from __future__ import annotations

import decimal

import pytest
from pyiceberg.types import DecimalType, ListType, LongType, TimestampType, TimestamptzType

from dblog.warehouse import types as T
from dblog.warehouse.catalog import BRANCH, location, slug
from dblog.warehouse.merged_state import TableState, to_ranges
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse

from iceberg_tables import commit_rows

COLUMNS = [("id", "bigint"), ("amount", "decimal(12,2)"), ("note", "string")]


def row(i: int, position: str = "p1", **values) -> dict:
    return {"id": i, "amount": decimal.Decimal(f"{i}.25"), "note": f"n{i}", "_dblog_position": position, **values}


@pytest.fixture
def wh(tmp_path):
    return Warehouse(str(tmp_path / "wh"))


def test_spark_types_map_to_iceberg_types_and_back():
    assert T.iceberg_type("bigint") == LongType()
    assert T.iceberg_type("decimal(38,10)") == DecimalType(38, 10)
    assert T.iceberg_type("timestamp") == TimestamptzType() and T.iceberg_type("timestamp_ntz") == TimestampType()
    assert isinstance(T.iceberg_type("array<string>"), ListType)
    for spark in ("bigint", "double", "boolean", "binary", "date", "string", "timestamp", "timestamp_ntz",
                  "decimal(20,0)", "array<string>"):
        assert T.spark_type(T.iceberg_type(spark)) == spark
    with pytest.raises(ValueError, match="no Iceberg type"):
        T.iceberg_type("map<string,int>")
    schema = T.schema(COLUMNS)
    assert [f.name for f in schema.fields][-2:] == [T.MISSING, T.BUCKET]
    assert all(not f.required for f in schema.fields), "Spark writes nullable columns"
    assert T.data_columns(schema) == COLUMNS


def test_merged_chunk_numbers_are_kept_as_ranges():
    assert to_ranges(set()) == [] and to_ranges({5, 1, 2, 3, 9, 8}) == [[1, 3], [5, 5], [8, 9]]
    state = TableState("s", "t", ["id"], COLUMNS)
    state.add_chunks("d1", {0, 1, 2})
    state.add_chunks("d1", {4})
    state.add_chunks("d1", {3, 2})
    assert state.chunks == {"d1": [[0, 4]]}
    assert [state.chunk_merged("d1", n) for n in (0, 4, 5)] + [state.chunk_merged("d3", 0)] == [True, True, False, False]


def test_the_merged_state_round_trips_through_the_snapshot_summary_and_a_foreign_format_is_refused():
    state = TableState("s", "t", ["id"], COLUMNS, [], log_upto="p9", chunks={"d": [[0, 3]]}, merged_at=12.5)
    back = TableState.from_properties("s", "t", ["id"], COLUMNS, state.properties())
    assert (back.log_upto, back.chunks, back.merged_at) == ("p9", {"d": [[0, 3]]}, 12.5)
    with pytest.raises(ValueError, match="format"):
        TableState.from_properties("s", "t", ["id"], COLUMNS, {**state.properties(), "dblog.format": "9"})


def test_a_commit_swaps_only_the_touched_bucket_and_readers_never_see_tombstones(wh):
    commit_rows(wh, "src", "shop.t", [row(1), row(2)], COLUMNS, ["id"], bucket=0)
    commit_rows(wh, "src", "shop.t", [row(10), row(11)], COLUMNS, ["id"], bucket=1)
    untouched = {f.file_path for f in wh.state("src", "shop.t", files=True).buckets[0].files}
    commit_rows(wh, "src", "shop.t", [row(10, "p2", note="changed")], COLUMNS, ["id"], bucket=1,
                tombstones=[row(11, "p2")], log_upto="p2")
    state = wh.state("src", "shop.t", files=True)
    assert {f.file_path for f in state.buckets[0].files} == untouched, "bucket 0 was rewritten"
    assert (state.rows, state.tombstones, state.log_upto) == (3, 1, "p2")
    assert sorted(wh.keys("src", "shop.t")) == [(1,), (2,), (10,)]
    table = wh.load("src", "shop.t")
    dead = table.scan().use_ref(BRANCH).to_arrow()
    assert dead["id"].to_pylist() == [11] and dead["_dblog_op"].to_pylist() == ["d"]
    duck = duckdb_read(wh, "src", "shop.t").sort_by("id")
    assert duck["id"].to_pylist() == [1, 2, 10] and duck["note"].to_pylist() == ["n1", "n2", "changed"]
    assert duck["amount"].to_pylist()[0] == decimal.Decimal("1.25")


def test_a_column_added_later_reads_as_null_in_older_files_in_every_reader(wh):
    commit_rows(wh, "src", "shop.t", [row(1)], COLUMNS, ["id"], bucket=0)
    commit_rows(wh, "src", "shop.t", [row(10, tier="gold")], [*COLUMNS, ("tier", "string")], ["id"], bucket=1)
    got = {r["id"]: r["tier"] for r in wh.read("src", "shop.t", ["id", "tier"]).to_pylist()}
    assert got == {1: None, 10: "gold"}
    duck = duckdb_read(wh, "src", "shop.t")
    assert dict(zip(duck["id"].to_pylist(), duck["tier"].to_pylist())) == got


def test_unproven_values_are_listed_per_row_and_found_by_bucket(wh):
    commit_rows(wh, "src", "shop.t", [row(1), row(2, _dblog_missing=["note", "a,b"])], COLUMNS, ["id"], bucket=0)
    assert wh.missing_keys("src", "shop.t", [0]) == {(2,): ["note", "a,b"]}
    duck = duckdb_read(wh, "src", "shop.t").sort_by("id")
    assert duck[T.MISSING].to_pylist() == [None, ["note", "a,b"]], "the list elements carry their field id"


def test_a_hostile_table_name_is_the_identifier_but_never_a_path(wh):
    name = 'shop.we"ird/ ../t%2F ü'
    commit_rows(wh, "src", name, [row(1)], COLUMNS, ["id"])
    assert wh.tables("src") == [name]
    where = location(wh.root, "src", name)
    assert ".." not in where and "%" not in where and '"' not in where and where.count("/") == wh.root.count("/") + 2
    assert slug(name) != slug('shop.we"ird/ ../t%2F ü2') and slug("plain_name") == "plain_name"


def test_an_uncommitted_merge_changes_nothing_a_reader_sees(wh):
    commit_rows(wh, "src", "shop.t", [row(1)], COLUMNS, ["id"])
    before = wh.state("src", "shop.t")
    wh.begin("src", "shop.t", ["id"], [*COLUMNS, ("tier", "string")], wh.state("src", "shop.t", files=True))
    assert wh.state("src", "shop.t") == before and "tier" not in wh.load("src", "shop.t").schema().column_names
    assert wh.load("src", "other") is None and wh.state("src", "other") is None


def test_manifests_stay_few_over_many_merges(wh):
    """The merging overwrite (a pyiceberg private API) still merges: fails loudly on an upgrade."""
    for i in range(40):
        commit_rows(wh, "src", "shop.t", [row(i % 4, f"p{i:03d}")], COLUMNS, ["id"], bucket=i % 4)
    table = wh.load("src", "shop.t")
    assert len(table.current_snapshot().manifests(table.io)) <= 10
    assert sorted(wh.keys("src", "shop.t")) == [(0,), (1,), (2,), (3,)]


def test_a_merge_transaction_reads_the_metadata_once_per_set_of_updates_and_commits_the_same(wh):
    """`MergeTransaction` (a pyiceberg private API) caches what pyiceberg recomputes at each read."""
    commit_rows(wh, "src", "shop.t", [row(1)], COLUMNS, ["id"])
    pending = wh.begin("src", "shop.t", ["id"], [*COLUMNS, ("tier", "string")], wh.state("src", "shop.t", files=True))
    tx = pending.tx
    first = tx.table_metadata
    assert tx.table_metadata is first and "tier" in first.schema().column_names   # the schema update applied
    tx.set_properties({"dblog.probe": "1"})
    assert tx.table_metadata is not first and tx.table_metadata.properties["dblog.probe"] == "1"
    commit_rows(wh, "src", "shop.t", [row(2)], COLUMNS, ["id"])   # through a MergeTransaction
    assert wh.state("src", "shop.t").rows == 1 and wh.keys("src", "shop.t") == [(2,)]


def test_a_first_merge_that_loses_the_race_to_create_the_namespace_takes_the_winners(wh, monkeypatch):
    """Tables merged side by side: two first merges of one source both find no namespace."""
    create = wh.catalog.create_namespace_if_not_exists

    def raced(namespace, *args, **kwargs):
        create(namespace)   # the other merge's, a moment earlier
        raise RuntimeError("UNIQUE constraint failed: iceberg_namespace_properties")
    monkeypatch.setattr(wh.catalog, "create_namespace_if_not_exists", raced)
    pending = wh.begin("src_raced", "db.t", ["id"], [("id", "int")], None)
    assert pending.location and wh.catalog.namespace_exists(("src_raced",))


def test_the_configured_catalog_properties_reach_the_catalog_and_its_warehouse_wins_over_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_ICEBERG_CATALOG", f"sqlite:///{tmp_path}/c.db")
    monkeypatch.setenv("DBLOG_ICEBERG_CATALOG_PROPERTIES", '{"warehouse": "s3://tables/", "rest.signing-name": "s3tables"}')
    catalog = Warehouse(str(tmp_path / "wh")).catalog
    assert catalog.properties["warehouse"] == "s3://tables/" and catalog.properties["rest.signing-name"] == "s3tables"
    monkeypatch.setenv("DBLOG_ICEBERG_CATALOG_PROPERTIES", "")
    assert Warehouse(str(tmp_path / "wh")).catalog.properties["warehouse"] == f"file://{tmp_path}/wh"
