"""The Spark session every dblog job uses, with the settings the warehouse relies on."""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from ..settings import settings
from . import shipping

SETTINGS = {
    "spark.sql.session.timeZone": "UTC",                           # bucket bounds round-trip as text
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",   # not INT96: exact and readable anywhere
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # The merge reads a table's data files by Iceberg field id, as Iceberg readers do: a renamed
    # column keeps its values, a replaced or re-added one does not take the old values back.
    "spark.sql.parquet.fieldId.read.enabled": "true",
}

# A session that runs for hours keeps less history: Spark's UI state grows with every query.
LONG_RUNNING = {
    "spark.scheduler.mode": "FAIR",   # tables merged side by side share the executors (continuous.py)
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.ui.dagGraph.retainedRootRDDs": "100",
}


def session(app: str = "dblog", master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """`master` None: whatever spark-submit set, else `DBLOG_SPARK_MASTER`, else local[*]."""
    tuned = settings().spark
    builder = SparkSession.builder.appName(app)
    master = master or tuned.master
    if master:
        builder = builder.master(master)
    remote = shipping.remote(master) or bool(tuned.executor_env)
    # Under spark-submit the driver is already running: its memory is spark-submit's (the merge task
    # passes the same setting as --driver-memory).
    options = {**SETTINGS, "spark.sql.shuffle.partitions": str(tuned.shuffle_partitions),
               "spark.driver.memory": tuned.driver_memory,
               **({"spark.cores.max": str(tuned.cores_max)} if tuned.cores_max else {}),
               **(shipping.cluster_conf(tuned.executor_env) if remote else {}), **(conf or {})}
    if tuned.executor_env:   # (PySpark takes the executors' Python from the variable, not the conf)
        os.environ["PYSPARK_PYTHON"] = shipping.EXECUTOR_PYTHON
    elif not os.environ.get("PYSPARK_PYTHON"):
        # Executors run dblog's Python (the warehouse writers): this interpreter's packages, not
        # the system's (pyspark reads the variable, not the conf, when the context starts). On a
        # cluster, PYSPARK_PYTHON names the workers' environment.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    for k, v in options.items():
        builder = builder.config(k, v)
    spark = shipping.start(builder, bool(tuned.executor_env)) if remote else builder.getOrCreate()
    spark.sparkContext.setLogLevel(tuned.log_level)
    return spark
