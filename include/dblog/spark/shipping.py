"""What a job ships to executors on a cluster: dblog's code, its Python environment, its settings.

An executor on another machine has neither the driver's checkout nor its virtualenv, nor its
environment variables. So a session on a cluster (`DBLOG_SPARK_MASTER` or the session's master not
`local`, or `DBLOG_SPARK_EXECUTOR_ENV` set)
- ships an archive of the executors' environment when `DBLOG_SPARK_EXECUTOR_ENV` names one
  (`spark.archives`, unpacked in each executor's work directory as `dblog_env`) and runs their
  Python from it (without it, the workers' image has the environment: `PYSPARK_PYTHON`);
- ships dblog's own code as a zip built from the running package (`addPyFile`), so driver and
  executors run the same code;
- gives the driver's own Python workers (Spark plans a Python data source in one) the same
  relative path to the environment: the driver's JVM runs in a directory of its own where
  `dblog_env` is the driver's unpacked copy of the archive (`start`);
- passes the settings executors read (`DBLOG_*`, `AWS_*`, the `AIRFLOW_CONN_*` connections) as
  `spark.executorEnv.*`, and widens Spark's redaction to them, so no credential shows in its UI.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from pyspark import SparkFiles
from pyspark.sql import SparkSession

ENV_NAME = "dblog_env"
EXECUTOR_PYTHON = f"./{ENV_NAME}/bin/python"   # in each executor's work directory
FORWARDED = ("DBLOG_", "AWS_", "AIRFLOW_CONN_")
# Spark redacts a conf or environment entry whose key or value matches: its default, and
# connection URIs with a password in them.
REDACTION = r"(?i)secret|password|token|credential|access[.]key|airflow_conn|://[^/@]*:[^/@]*@"
# Not forwarded: the archive is the session's own, and executors never talk to the catalog (the
# driver commits) while its properties may hold an OAuth2 credential.
DRIVER_ONLY = ("DBLOG_SPARK_EXECUTOR_ENV", "DBLOG_ICEBERG_CATALOG_PROPERTIES")


def remote(master: str | None) -> bool:
    """Whether the session's executors run elsewhere: a master that is not `local`. Under
    spark-submit this process does not know the master (its SparkConf is empty until the context
    starts): set DBLOG_SPARK_MASTER beside the `spark_default` connection, or an executors'
    environment (DBLOG_SPARK_EXECUTOR_ENV), which implies a cluster."""
    return bool(master) and not str(master).startswith("local")


def cluster_conf(archive: str | None) -> dict[str, str]:
    """The session's settings that ship dblog's settings and the environment `archive` (if any)."""
    conf = {"spark.redaction.regex": REDACTION, **({"spark.archives": f"{archive}#{ENV_NAME}"} if archive else {})}
    for name, value in os.environ.items():
        if name.startswith(FORWARDED) and name not in DRIVER_ONLY:
            conf[f"spark.executorEnv.{name}"] = value
    return conf


def start(builder: SparkSession.Builder, archive: bool = True) -> SparkSession:
    """The session of `builder` (set with `cluster_conf`), its executors given dblog's code. A
    Python worker runs `./dblog_env/bin/python` relative to its JVM's directory: an executor's is
    its work directory, where the archive is unpacked; the driver's gets a link to the driver's
    unpacked copy. A JVM this process starts runs in a directory made for it; one spark-submit
    started first keeps spark-submit's directory (the merge task runs it in the job's own).
    Without an `archive`, only the code is shipped."""
    if not archive:
        spark = builder.getOrCreate()
        spark.sparkContext.addPyFile(code_zip())
        return spark
    home = tempfile.mkdtemp(prefix="dblog-driver-")
    before = os.getcwd()
    os.chdir(home)   # the JVM the builder starts inherits it; this process goes back at once
    try:
        spark = builder.getOrCreate()
    finally:
        os.chdir(before)
    jvm_dir = spark.sparkContext._jvm.java.lang.System.getProperty("user.dir")  # type: ignore[union-attr]
    unpacked = os.path.join(SparkFiles.getRootDirectory(), ENV_NAME)
    if jvm_dir and os.path.realpath(jvm_dir) != os.path.realpath(home):
        os.rmdir(home)   # (spark-submit's JVM: it never entered this one)
    link = os.path.join(jvm_dir or home, ENV_NAME)
    if os.path.isdir(unpacked) and not os.path.lexists(link):
        os.symlink(unpacked, link)
    spark.sparkContext.addPyFile(code_zip())   # executors import dblog from it, never from the checkout
    return spark


def code_zip() -> str:
    """dblog's package as a zip (its .py files), built once per process in a temporary directory."""
    global _ZIP
    if _ZIP is None or not Path(_ZIP).exists():
        package = Path(__file__).resolve().parents[1]
        out = Path(tempfile.mkdtemp(prefix="dblog-code-")) / "dblog.zip"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(package.rglob("*.py")):
                z.write(f, Path("dblog") / f.relative_to(package))
        _ZIP = str(out)
    return _ZIP


_ZIP: str | None = None
