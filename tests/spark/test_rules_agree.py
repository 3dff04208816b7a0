"""The Spark rules give exactly what the Python rules give, on every shared scenario."""
import pytest
from pyspark.sql import types as S
from rule_cases import CASES, T, WM, python_visible

from dblog.spark.rules import latest, records, visible, watermark_positions, window_survivors

KEY = S.StructType([S.StructField("id", S.LongType())])
LOG = S.StructType([S.StructField("id", S.LongType()), S.StructField("v", S.StringType()),
                    S.StructField("_position", S.StringType()), S.StructField("_op", S.StringType()),
                    S.StructField("_old_key", KEY), S.StructField("_unchanged", S.ArrayType(S.StringType()))])
CHUNK = S.StructType([S.StructField("id", S.LongType()), S.StructField("v", S.StringType()),
                      S.StructField("_lw", S.StringType()), S.StructField("_hw", S.StringType()),
                      S.StructField("_op", S.StringType())])
WMS = S.StructType([S.StructField("value", S.StringType()), S.StructField("_position", S.StringType())])


def spark_visible(spark, log, chunks):
    events = [e for e in log if e.table == T]
    log_df = spark.createDataFrame(
        [(e.key[0], (e.after or {}).get("v"), e.position, e.op,
          None if e.old_key is None else (e.old_key[0],), e.unchanged or None) for e in events], LOG)
    wm_df = spark.createDataFrame([(e.after["value"], e.position) for e in log if e.table == WM], WMS)
    chunk_df = spark.createDataFrame([(r["id"], r["v"], lw, hw, "r") for lw, hw, rows in chunks for r in rows], CHUNK)
    survivors = window_survivors(chunk_df, log_df, watermark_positions(wm_df), ["id"])
    state = latest(records(log_df, survivors, ["id"], ["id", "v"]), ["id"], ["id", "v"])
    return {r["id"]: r["v"] for r in visible(state).collect()}


@pytest.mark.parametrize("name", CASES)
def test_spark_and_python_rules_agree(spark, name):
    log, chunks, expected = CASES[name]
    assert spark_visible(spark, log, chunks) == python_visible(log, chunks) == expected


def test_replaying_the_same_records_changes_nothing(spark):
    log, chunks, expected = CASES["paper_k1_to_k6"]
    assert spark_visible(spark, log + log, chunks + chunks) == expected
