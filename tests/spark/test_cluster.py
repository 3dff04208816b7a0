"""The pipeline beyond one process (`make cluster`, scripts/cluster.sh): a Spark standalone cluster
(a master, two workers with a directory each), the executors' Python and dblog's code shipped with
every job, the staged log and the warehouse on S3, the Iceberg catalog on PostgreSQL, ZooKeeper as
a three-node ensemble. Nothing is shared between the driver and the workers but those servers.

capture -> staged log on S3 -> dumps read by executors -> the continuous merge on the cluster ->
Iceberg tables on S3 -> pyiceberg and DuckDB, `dblog verify`: nothing on local disk."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dblog.operations.verify import compare_warehouse
from dblog.warehouse.tables import Warehouse

from conftest import ADMIN, ROOT, TABLES, assert_warehouse_equals_source, settle, wait_for

CLUSTER = ROOT / ".local" / "cluster"
ARCHIVE = CLUSTER / "executor-env.tar.gz"

# Run on the cluster by the probe: what each executor's Python is, where its dblog comes from, where it runs.
PROBE = """
import json, os, sys
from dblog.spark.session import session
def where(batches):
    import pyarrow as pa, dblog.warehouse.files as files
    for b in batches:
        yield pa.RecordBatch.from_pylist([{"executable": sys.executable, "dblog": files.__file__, "cwd": os.getcwd()}])
spark = session("dblog-probe")
rows = spark.range(0, 8, 1, 4).mapInArrow(where, "executable string, dblog string, cwd string").collect()
print(json.dumps([r.asDict() for r in rows]))
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(services):
    subprocess.run(["bash", str(ROOT / "scripts/cluster.sh"), "up"], check=True, capture_output=True)
    subprocess.run(["bash", str(ROOT / "scripts/executor_env.sh"), str(ARCHIVE)], check=True, capture_output=True)
    from dblog_dev.local import s3_env
    out = subprocess.run(["bash", str(ROOT / "scripts/cluster.sh"), "env"], check=True, capture_output=True, text=True)
    env = dict(line.split("=", 1) for line in out.stdout.split())
    yield {**env, **s3_env(), "DBLOG_SPARK_EXECUTOR_ENV": str(ARCHIVE), "DBLOG_SPARK_CORES_MAX": "1"}
    subprocess.run(["bash", str(ROOT / "scripts/cluster.sh"), "down"], check=True, capture_output=True)


def _catalog(tag: str) -> str:
    """A PostgreSQL database of its own for the test's Iceberg catalog."""
    from dblog_dev.workload import connect
    _, conn = connect(ADMIN["postgres"])
    conn.autocommit = True
    conn.cursor().execute(f"CREATE DATABASE catalog_{tag}")
    conn.close()
    admin = ADMIN["postgres"].split("://", 1)[1].rsplit("/", 1)[0]
    return f"postgresql+psycopg2://{admin}/catalog_{tag}"


def test_the_pipeline_on_a_spark_cluster_converges_under_writes_sharing_nothing_but_s3_postgres_and_zookeeper(
        mariadb, cluster, tmp_path, monkeypatch):
    src = mariadb
    src.zk_hosts = cluster["AIRFLOW_CONN_DBLOG_ZOOKEEPER"].split("://", 1)[1].split("/", 1)[0]
    bucket = f"c-{src.tag}"
    src.staging = f"s3://{bucket}/staged"
    for name, value in {**cluster, "DBLOG_WAREHOUSE": f"s3://{bucket}/wh", "DBLOG_ICEBERG_CATALOG": _catalog(src.tag),
                        "DBLOG_DUMP_READER": "spark"}.items():
        if name != "AIRFLOW_CONN_DBLOG_ZOOKEEPER":   # (the source's own: its chroot on the ensemble)
            monkeypatch.setenv(name, value)
    warehouse = Warehouse(f"s3://{bucket}/wh")
    src.workload(seed=7, rows=400).create()
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=8, rate=100)
    # The dump's windows are read by executors on one worker, the continuous merge runs on the other.
    dump = src.spawn("dump", "--source", src.source_id, "--all", "--chunk-size", "200", output=tmp_path / "dump.log")
    merging = src.spawn("merge", "--source", src.source_id, "--continuous", "--every", "2",
                        output=tmp_path / "merge.log")
    assert dump.wait(300) == 0, (tmp_path / "dump.log").read_text()[-3000:]
    writer.terminate(); writer.wait()
    settle(src)

    def converged() -> bool:
        assert merging.poll() is None, (tmp_path / "merge.log").read_text()[-3000:]
        return all(warehouse.load(src.source_id, src.table(t)) is not None and
                   compare_warehouse(src.source(), warehouse, src.table(t)).equal for t in TABLES)
    wait_for(converged, 300, interval=2, what="the continuous merge on the cluster to bring the tables to the source")
    merging.terminate()
    assert merging.wait(120) == 0, (tmp_path / "merge.log").read_text()[-3000:]
    assert_warehouse_equals_source(src, warehouse)   # pyiceberg and DuckDB (httpfs + an S3 secret)
    for t in TABLES:
        table = warehouse.load(src.source_id, src.table(t))
        assert table.metadata_location.startswith(f"s3://{bucket}/wh/"), table.metadata_location
    verify = src.dblog("verify", "--source", src.source_id, timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert not (tmp_path / "warehouse").exists() and not (tmp_path / "staging").exists()
    # The executors ran in the workers' directories, from the shipped environment and code.
    probe = subprocess.run([sys.executable, "-c", PROBE], env={**src.env, "PYTHONPATH": str(ROOT / "include")},
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    workers = [str(CLUSTER / "spark" / f"worker{n}") for n in (1, 2)]
    for r in seen:
        assert r["cwd"].startswith(tuple(workers)), r
        assert r["executable"].startswith(r["cwd"] + "/dblog_env/"), r   # not the driver's virtualenv
        assert r["dblog"].startswith("./dblog.zip/"), r   # the shipped code, in the executor's directory
