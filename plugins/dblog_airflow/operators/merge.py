"""Submit `spark_jobs/merge.py` through the Spark provider, then publish one Asset event per
warehouse table that got a new version (through the `dblog_warehouse` AssetAlias), so downstream
DAGs can be scheduled on fresh data: `schedule=[warehouse_asset("dblog_mariadb", "shop.accounts")]`.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias

from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, zookeeper_uri

WAREHOUSE_ALIAS = "dblog_warehouse"
MERGE_JOB = str(Path(__file__).resolve().parents[3] / "spark_jobs" / "merge.py")


def warehouse_asset(source: str, table: str, root: str | None = None) -> Asset:
    """The Asset of one warehouse table (the same name and URI the merge task emits)."""
    from dblog.config import warehouse_root
    root = root or warehouse_root()
    return Asset(name=f"dblog.{source}.{table}", uri=f"file://{root}/{source}/{table}", group="dblog")


class MergeOperator(SparkSubmitOperator):
    """`dblog merge` as a spark-submit job. `sources` / `tables`: comma-separated or lists (templated);
    empty means every configured source / every staged table."""

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "sources", "tables")

    def __init__(self, *, sources: Any = None, tables: Any = None, bucket_rows: int | None = None,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        kwargs.setdefault("application", os.environ.get("DBLOG_MERGE_JOB", MERGE_JOB))
        kwargs.setdefault("name", "dblog-merge")
        kwargs.setdefault("driver_memory", os.environ.get("DBLOG_SPARK_DRIVER_MEMORY", "2g"))
        kwargs.setdefault("outlets", [AssetAlias(WAREHOUSE_ALIAS)])
        super().__init__(**kwargs)
        self.sources, self.tables, self.bucket_rows = sources, tables, bucket_rows
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> list[dict]:
        with tempfile.TemporaryDirectory(prefix="dblog-merge-") as tmp:
            report = os.path.join(tmp, "report.json")
            args = list(self.application_args or [])
            for flag, value in (("--source", self.sources), ("--table", self.tables)):
                if value:
                    args += [flag, value if isinstance(value, str) else ",".join(value)]
            if self.bucket_rows:
                args += ["--bucket-rows", str(self.bucket_rows)]
            self.application_args = [*args, "--report", report]
            # The job reaches ZooKeeper through the Airflow connection, wherever it is defined.
            self.env_vars = {"PYSPARK_PYTHON": sys.executable, **(self.env_vars or {}),
                             "AIRFLOW_CONN_DBLOG_ZOOKEEPER": zookeeper_uri(self.zookeeper_conn_id)}
            self._hook = None
            super().execute(context)
            results = json.load(open(report))
        alias = context["outlet_events"][AssetAlias(WAREHOUSE_ALIAS)]
        for r in results:
            self.log.info("%s %s: version %s, %d log events, %d chunks (%d rows, %d dropped in windows), "
                          "%d rows", r["source"], r["table"], r["version"], r["log_events"], r["chunks"],
                          r["chunk_rows"], r["dropped"], r["rows"])
            if r["version"] is not None and (r["log_events"] or r["chunks"]):
                alias.add(warehouse_asset(r["source"], r["table"]),
                          extra={"version": r["version"], "upto": r["upto"], "rows": r["rows"]})
        return results
