"""What a session ships to executors on a cluster (`dblog.spark.shipping`): dblog's settings with
their secrets redacted, its code, and the executors' environment when there is an archive of it."""
from __future__ import annotations

import re
import zipfile

from dblog.spark import shipping


def test_only_a_master_that_is_not_local_runs_executors_elsewhere():
    assert shipping.remote("spark://master:7077") and shipping.remote("k8s://https://api:6443")
    assert not shipping.remote("local[2]") and not shipping.remote(None)


def test_settings_are_forwarded_redacted_and_the_archive_only_when_there_is_one(monkeypatch):
    monkeypatch.setenv("DBLOG_STAGING", "s3://b/staged")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", "mysql://u:secret@h/db")
    monkeypatch.setenv("HOME_MADE", "not forwarded")
    monkeypatch.setenv("DBLOG_ICEBERG_CATALOG_PROPERTIES", '{"credential": "id:s3cr3t"}')   # the driver's alone
    image = shipping.cluster_conf(None)   # the workers' image holds the environment
    assert "spark.archives" not in image
    assert image["spark.executorEnv.DBLOG_STAGING"] == "s3://b/staged"
    assert "spark.executorEnv.HOME_MADE" not in image
    assert not any("s3cr3t" in v for v in image.values())
    assert re.search(image["spark.redaction.regex"], "spark.executorEnv.AIRFLOW_CONN_SRC")
    packed = shipping.cluster_conf("/x/env.tar.gz")
    assert packed["spark.archives"] == "/x/env.tar.gz#dblog_env"


def test_the_shipped_code_is_the_running_package():
    with zipfile.ZipFile(shipping.code_zip()) as z:
        names = set(z.namelist())
    assert {"dblog/__init__.py", "dblog/spark/shipping.py", "dblog/merge/job.py"} <= names
