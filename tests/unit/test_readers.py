"""Readers without Spark: DuckDB reads what pyiceberg reads; an S3 root's DuckDB secret; the Arrow
shaping the Spark data sources rely on (exact declared types, missing columns null)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

from dblog.spark.data_sources import conform, footer_schema, spark_schema
from dblog.warehouse import readers
from dblog.warehouse.tables import Warehouse

import iceberg_tables as IT


def test_duckdb_reads_the_current_snapshot_exactly_as_pyiceberg_does(tmp_path):
    w, _ = IT.build(str(tmp_path / "wh"))
    names = [f.name for f in w.load(IT.SOURCE, IT.TABLE).schema().fields]
    expected = w.read(IT.SOURCE, IT.TABLE, names)
    got = readers.duckdb_read(w, IT.SOURCE, IT.TABLE)
    assert got is not None and got.column_names == names
    assert IT.sorted_rows(got) == IT.sorted_rows(expected) and got.num_rows == 6   # live rows, no tombstone
    types = {f.name: f.type for f in got.schema}
    assert types["amount"] == pa.decimal128(38, 10) and types["price"] == pa.decimal128(12, 2)
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["local"] == pa.timestamp("us")
    assert types["data"] == pa.binary() and pa.types.is_list(types["_dblog_missing"])
    row = IT.sorted_rows(got)[0]
    assert row["amount"] == Decimal("12345678901234567890123456.2123456789")
    assert row["at"].microsecond == 999_996 and row["local"] == dt.datetime(1970, 1, 2, 0, 0, 0, 1)
    assert row["_dblog_missing"] == ["price", "no,te"] and row["note"] == "é1'r2" and row["extra"] == "x1"


def test_duckdb_reads_nothing_before_the_first_merge(tmp_path):
    assert readers.duckdb_read(Warehouse(str(tmp_path / "wh")), IT.SOURCE, IT.TABLE) is None


def test_an_object_store_root_gets_a_duckdb_secret_from_the_environment_not_from_the_root(monkeypatch):
    monkeypatch.setenv("DBLOG_S3_ENDPOINT", "http://127.0.0.1:8334")
    monkeypatch.setenv("DBLOG_S3_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3'cr3t")   # quoted, not SQL
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    con = readers.duckdb_connect("s3://bucket/warehouse")   # loads httpfs by path: no network
    (name, provider, described), = con.execute(
        "SELECT name, provider, secret_string FROM duckdb_secrets()").fetchall()
    assert name == "dblog_s3" and provider == "config"
    options = dict(p.split("=", 1) for p in described.split(";"))
    assert options["endpoint"] == "127.0.0.1:8334" and options["url_style"] == "path"
    assert options["use_ssl"] == "false" and options["region"] == "eu-west-3" and options["key_id"] == "key"
    assert options["secret"] == "redacted" and "s3'cr3t" not in described
    con.close()


def test_batches_take_exactly_the_declared_types_and_missing_columns_are_null():
    target = pa.schema([("id", pa.int64()), ("note", pa.string()), ("tags", pa.list_(pa.string())),
                        ("at", pa.timestamp("us", tz="UTC")), ("absent", pa.decimal128(12, 2))])
    batch = pa.RecordBatch.from_pydict({
        "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="+00:00")),
        "note": pa.array(["é"], pa.large_string()), "id": pa.array([1], pa.int32()),
        "tags": pa.array([["a"]], pa.large_list(pa.large_string()))})
    out = conform(batch, target)
    assert out.schema.equals(target) and out.to_pylist()[0]["absent"] is None and out.column("tags")[0].as_py() == ["a"]


def test_the_declared_schema_is_the_union_of_the_footers_all_nullable_without_field_ids(tmp_path):
    first = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "1"}),
                       ("at", pa.timestamp("us"))])
    pq.write_table(pa.table({"id": [1], "at": [None]}, schema=first), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": [2], "new": [b"\x00"]}), tmp_path / "b.parquet")
    union = footer_schema([str(tmp_path / "a.parquet"), f"file://{tmp_path}/b.parquet"])
    assert union.names == ["id", "at", "new"]
    schema = spark_schema(union)
    assert [f.dataType.simpleString() for f in schema.fields] == ["bigint", "timestamp_ntz", "binary"]
    assert all(f.nullable and not f.metadata for f in schema.fields)


def test_a_table_s_data_files_are_read_by_field_id_on_any_storage(tmp_path):
    """dblog_parquet (object stores) reads as Spark's own reader does with field ids: a renamed
    column keeps its values, a column replaced by another type (a new id) reads as null."""
    from pyspark.sql.datasource import InputPartition
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from dblog.spark.data_sources import FIELD_ID, ParquetReader

    def field(name, t, i):
        return pa.field(name, t, metadata={b"PARQUET:field_id": str(i).encode()})
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"id": [1, 2], "qty": ["5", "x"], "body": ["a", "b"]},
                            schema=pa.schema([field("id", pa.int64(), 1), field("qty", pa.string(), 2),
                                              field("body", pa.string(), 3)])), path)
    wanted = StructType([StructField("id", LongType(), True, {FIELD_ID: 1}),
                         StructField("qty", LongType(), True, {FIELD_ID: 7}),        # replaced: a new id
                         StructField("remark", StringType(), True, {FIELD_ID: 3})])  # renamed: the same id
    (batch,) = ParquetReader(wanted, [path], 1).read(InputPartition([path]))
    assert batch.to_pylist() == [{"id": 1, "qty": None, "remark": "a"}, {"id": 2, "qty": None, "remark": "b"}]


def test_files_whose_column_changed_type_read_as_the_newest_file_s_type_older_values_cast_or_null(tmp_path):
    older, newer = str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")
    pq.write_table(pa.table({"id": [1, 2], "qty": ["5", "x"]}), older)
    pq.write_table(pa.table({"id": [3], "qty": [7]}), newer)
    schema = footer_schema([older, newer])
    assert schema.field("qty").type == pa.int64()
    assert conform(pq.read_table(older).to_batches()[0], schema).column("qty").to_pylist() == [5, None]
