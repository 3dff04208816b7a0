"""The Python data sources Spark reads through without S3 or Iceberg jars: `dblog_parquet` reads
what Spark's own Parquet reader reads, `dblog_iceberg` what pyiceberg reads (any snapshot)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dblog.spark.data_sources import read_files, read_with_source, spark_table

import iceberg_tables as IT

UTC = dt.UTC


def write_files(folder) -> list[str]:
    """Three files as the staged log has them: types Spark must keep exactly, the second file
    without `note` and with a column the first lacks, the third with pyiceberg's large types."""
    def rows(ids):
        return {"id": pa.array(ids, pa.int64()),
                "amount": pa.array([Decimal(f"{i}2345678901234567890123456.0123456789") for i in ids],
                                   pa.decimal128(38, 10)),
                "at": pa.array([dt.datetime(2024, 2, 29, 23, 59, 59, 999_999 - i, tzinfo=UTC) for i in ids],
                               pa.timestamp("us", tz="UTC")),
                "local": pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, i) for i in ids], pa.timestamp("us")),
                "data": pa.array([bytes([0, 255, i]) for i in ids], pa.binary())}
    paths = [folder / f"{n}.parquet" for n in ("a", "b", "c")]
    pq.write_table(pa.table({**rows([1, 2]), "note": ["é", None]}), paths[0])
    pq.write_table(pa.table({**rows([3]), "added": pa.array([7], pa.int32())}), paths[1])
    third = pa.table({**rows([4, 5]), "note": pa.array(["x", "y'"], pa.large_string())})
    pq.write_table(third.set_column(4, "data", third["data"].cast(pa.large_binary())), paths[2])
    return [str(paths[0]), f"file://{paths[1]}", str(paths[2])]


def test_dblog_parquet_reads_the_rows_and_types_sparks_reader_reads(spark, tmp_path):
    uris = write_files(tmp_path)
    native = read_files(spark, uris)   # local files: Spark's own reader
    ours = read_with_source(spark, uris)
    assert native.inputFiles() and not ours.inputFiles(), "local files go through Spark's reader, not the source"
    assert dict(ours.dtypes) == dict(native.dtypes)
    assert dict(ours.dtypes) == {"id": "bigint", "amount": "decimal(38,10)", "at": "timestamp", "local": "timestamp_ntz",
                                 "data": "binary", "note": "string", "added": "int"}
    columns = [c for c, _ in native.dtypes]
    got = sorted(ours.select(*columns).toArrow().to_pylist(), key=lambda r: r["id"])
    assert got == sorted(native.toArrow().to_pylist(), key=lambda r: r["id"])
    assert [r["note"] for r in got] == ["é", None, None, "x", "y'"] and [r["added"] for r in got] == [None, None, 7, None, None]
    assert got[0]["amount"] == Decimal("12345678901234567890123456.0123456789")
    assert got[0]["at"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999_998, tzinfo=UTC)
    assert got[4]["local"] == dt.datetime(1969, 12, 31, 23, 59, 59, 5) and got[4]["data"] == b"\x00\xff\x05"
    assert ours.rdd.getNumPartitions() == 3   # one group of files each, up to twice the cores


def test_spark_reads_any_snapshot_of_an_iceberg_table_as_pyiceberg_does(spark, tmp_path):
    w, snapshots = IT.build(str(tmp_path / "wh"))
    table = w.load(IT.SOURCE, IT.TABLE)
    current = spark_table(spark, w, IT.SOURCE, IT.TABLE)
    assert current.rdd.getNumPartitions() == 2   # one per data file of main: the tombstone branch is not read
    types = dict(current.dtypes)
    assert types["amount"] == "decimal(38,10)" and types["price"] == "decimal(12,2)" and types["at"] == "timestamp"
    assert types["local"] == "timestamp_ntz" and types["data"] == "binary" and types["_dblog_missing"] == "array<string>"
    assert types["_dblog_bucket"] == "int" and types["extra"] == "string"
    got = IT.sorted_rows(current.toArrow())
    assert got == IT.sorted_rows(table.scan().to_arrow()) and len(got) == 6
    assert got[0]["amount"] == Decimal("12345678901234567890123456.2123456789") and got[0]["at"].microsecond == 999_996
    assert got[0]["_dblog_missing"] == ["price", "no,te"] and got[1]["price"] is None
    # An older snapshot: its own rows and its own schema (the column added later is not there).
    first = spark_table(spark, w, IT.SOURCE, IT.TABLE, snapshot_id=snapshots[0])
    old = IT.sorted_rows(first.toArrow())
    assert old == IT.sorted_rows(table.scan(snapshot_id=snapshots[0]).to_arrow())
    assert "extra" not in first.columns and {r["_dblog_position"] for r in old} == {"p0"}
    with pytest.raises(ValueError, match="no snapshot 42"):
        spark_table(spark, w, IT.SOURCE, IT.TABLE, snapshot_id=42)
