"""Reading Parquet files into Spark from any storage (placeholder: local paths only)."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession


def read_files(spark: SparkSession, uris: list[str]) -> DataFrame:
    return spark.read.option("mergeSchema", "true").parquet(*uris)
