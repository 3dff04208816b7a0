"""`make bench-cluster`: one Spark worker against two, on the deployment of `make cluster`.

A table of DBLOG_BENCH_CLUSTER_ROWS rows (default 1,000,000) on MariaDB, dumped with its windows
read by Spark executors (`DBLOG_DUMP_READER=spark`) and then merged (`dblog merge`), the staged log
and the warehouse on S3, the catalog on PostgreSQL, with `DBLOG_SPARK_CORES_MAX` 1 (one worker:
each has one core) and 2 (both), alternating, DBLOG_BENCH_CLUSTER_REPS times (default 2). Each run
is a deployment of its own (ZooKeeper chroot, staging, warehouse, source name). The 2 cores of this
machine, which also run both databases, bound what a second worker can buy: the figures say what
the cluster costs and that the work spreads. Writes bench/results/cluster.json.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bigtable import TABLE, create  # noqa: E402
from common import ROOT, uri  # noqa: E402

sys.path.insert(0, str(ROOT / "plugins"))
from dblog_airflow.local import ensemble_connection  # noqa: E402

ROWS = int(os.environ.get("DBLOG_BENCH_CLUSTER_ROWS", "1000000"))
REPS = int(os.environ.get("DBLOG_BENCH_CLUSTER_REPS", "2"))
NS = "bench_cluster"
OUT = ROOT / "bench" / "results" / "cluster.json"


def _cluster(*args: str, env: dict | None = None) -> str:
    return subprocess.run(["bash", str(ROOT / "scripts" / "cluster.sh"), *args], env=env or os.environ.copy(),
                          check=True, capture_output=True, text=True).stdout


def _dblog(env: dict, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dblog.cli", *args], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"dblog {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def run_once(cores: int, base: dict, catalog: str) -> dict:
    run = uuid.uuid4().hex[:8]
    name = f"bcl_{run}"
    env = {**base, f"AIRFLOW_CONN_{name.upper()}": uri("mysql", NS), "DBLOG_SOURCES": name,
           "AIRFLOW_CONN_DBLOG_ZOOKEEPER": ensemble_connection(json.loads(base["AIRFLOW_CONN_DBLOG_ZOOKEEPER"])["host"],
                                                               f"bench_{run}"),
           "DBLOG_STAGING": f"s3://bench-cluster/{run}/staged", "DBLOG_WAREHOUSE": f"s3://bench-cluster/{run}/wh",
           "DBLOG_ICEBERG_CATALOG": catalog, "DBLOG_DUMP_READER": "spark", "DBLOG_SPARK_CORES_MAX": str(cores),
           "PYTHONPATH": str(ROOT / "include")}
    _dblog(env, "capture", "--init", "--source", name)
    capture = subprocess.Popen([sys.executable, "-m", "dblog.cli", "capture", "--source", name], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        dump_s = _dblog(env, "dump", "--source", name, "--table", f"{NS}.{TABLE}")
        _dblog(env, "sync", "--source", name)   # the capture passed every window: the merge takes them all
        merge_s = _dblog(env, "merge", "--source", name)
    finally:
        capture.terminate()
        capture.wait()
    return {"cores": cores, "dump_s": round(dump_s, 1), "dump_rows_per_s": round(ROWS / dump_s),
            "merge_s": round(merge_s, 1)}


def main() -> None:
    _cluster("up", env={**os.environ, "DBLOG_CLUSTER_AIRFLOW": "0"})
    archive = ROOT / ".local" / "cluster" / "executor-env.tar.gz"
    subprocess.run(["bash", str(ROOT / "scripts" / "executor_env.sh"), str(archive)], check=True)
    from dblog_dev.local import exported, s3_env
    base = {**os.environ, **exported(_cluster("env")), **s3_env(),
            "DBLOG_SPARK_EXECUTOR_ENV": str(archive)}
    create("mysql", NS, ROWS)
    from dblog_dev.local import postgres_database
    catalog = postgres_database("bench_cluster_catalog")
    runs = [run_once(cores, base, catalog) for _ in range(REPS) for cores in (1, 2)]
    result = {"rows": ROWS, "reps": REPS, "runs": runs}
    for cores in (1, 2):
        mine = [r for r in runs if r["cores"] == cores]
        result[f"workers_{cores}"] = {"dump_rows_per_s": statistics.median(r["dump_rows_per_s"] for r in mine),
                                      "merge_s": statistics.median(r["merge_s"] for r in mine)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
