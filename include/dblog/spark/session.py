"""The Spark session every dblog job uses, with the settings the warehouse relies on."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

SETTINGS = {
    "spark.sql.session.timeZone": "UTC",                           # bucket bounds round-trip as text
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",   # not INT96: exact and readable anywhere
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def session(app: str = "dblog", master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """`master` None: whatever spark-submit set, else `DBLOG_SPARK_MASTER`, else local[*]."""
    builder = SparkSession.builder.appName(app)
    master = master or os.environ.get("DBLOG_SPARK_MASTER")
    if master:
        builder = builder.master(master)
    settings = {**SETTINGS, "spark.sql.shuffle.partitions": os.environ.get("DBLOG_SPARK_PARTITIONS", "8"),
                "spark.driver.memory": os.environ.get("DBLOG_SPARK_DRIVER_MEMORY", "4g"), **(conf or {})}
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DBLOG_SPARK_LOG_LEVEL", "WARN"))
    return spark
