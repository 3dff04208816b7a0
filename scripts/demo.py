"""`make demo`: the product end to end on the local services, through Airflow and Spark.

A clean slate (sample tables on MariaDB and PostgreSQL, empty staged log, warehouse and ZooKeeper
state), capture of both sources and a live write workload on each; a full dump of each source
through the `dblog_dump` DAG (`airflow dags test`: dump tasks, deferred wait for the capture,
spark-submit merge); then the writers stop, the `dblog_merge` DAG merges the rest and every
warehouse table is compared with its source. Prints a summary; exit 0 only if all are equal.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "include")]

from dblog import connections  # noqa: E402
from dblog.capture.capture_loop import caught_up, sync_point  # noqa: E402
from dblog.coordination.checkpoint import checkpoint_path  # noqa: E402
from dblog.coordination.store import StateStore
from dblog.operations.reconcile import rebuild  # noqa: E402
from dblog.operations.verify import compare_warehouse  # noqa: E402
from dblog.stagedlog.staged_log import StagedLog  # noqa: E402
from dblog.warehouse.readers import duckdb_read  # noqa: E402
from dblog.warehouse.tables import Warehouse  # noqa: E402
from dblog_airflow.local import settings  # noqa: E402
from dblog_dev import local, sample  # noqa: E402

SOURCES = ("dblog_mariadb", "dblog_postgres")
RATE = 300  # row changes/s per source: a busy OLTP table, with room left for Spark on 2 cores


def step(text: str) -> None:
    print(f"demo: {text}", flush=True)


def airflow(env: dict, *args: str) -> None:
    log = Path(env["AIRFLOW_HOME"]) / "demo.log"
    with open(log, "a") as out:
        done = subprocess.run(["airflow", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"demo: `airflow {' '.join(args)}` failed; see {log}")


def main() -> int:
    root = ROOT / ".local" / "demo"
    shutil.rmtree(root, ignore_errors=True)
    zk_uri = f"zookeeper://{local.zookeeper_hosts()}/dblog_demo"
    os.environ.update({"DBLOG_STAGING": str(root / "staging"), "DBLOG_WAREHOUSE": str(root / "warehouse"),
                       "DBLOG_SOURCES": ",".join(SOURCES)})
    env = {**os.environ, **settings(root / "airflow"), "AIRFLOW_CONN_DBLOG_ZOOKEEPER": zk_uri}
    os.environ.update(env)
    zk = connections.zookeeper(zk_uri)
    store = StateStore(zk.hosts, zk.chroot).start()
    for child in store.children("/"):
        store.delete(f"/{child}", recursive=True)

    step("loading the sample tables (accounts, order_lines; 20,000 accounts) on MariaDB and PostgreSQL")
    procs = []
    for sid in SOURCES:
        sample.load(sid, rows=20_000, reset=True)
        subprocess.run([sys.executable, "-m", "dblog.cli", "capture", "--init", "--source", sid], env=env,
                       check=True, capture_output=True)
        procs.append(subprocess.Popen([sys.executable, "-m", "dblog.cli", "capture", "--source", sid], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    writers = [subprocess.Popen([sys.executable, "-m", "dblog_dev.workload", sample.admin_uri(sid),
                                 connections.source(sid).namespace, "--seconds", "3600", "--seed", "2", "--rows", "20000", "--rate", str(RATE)],
                                env=env, stdout=subprocess.DEVNULL) for sid in SOURCES]
    procs += writers
    try:
        airflow(env, "db", "migrate")
        for sid in SOURCES:
            airflow(env, "pools", "set", f"dblog_dump_{sid}", "2", f"concurrent table dumps on {sid}")
        started = time.monotonic()
        for sid in SOURCES:
            step(f"capture and writers ({RATE} row changes/s) running; dblog_dump DAG on {sid} "
                 "(chunk size 500, then a Spark merge)")
            airflow(env, "dags", "test", "dblog_dump", "--conf", json.dumps({"source": sid, "chunk_size": 500}))
        step(f"dumps and their merges done in {time.monotonic() - started:.0f}s under writes; stopping the writers")
        for w in writers:
            w.terminate(); w.wait()
        staged, lags = StagedLog(env["DBLOG_STAGING"]), {}
        for sid in SOURCES:
            mark, deadline = sync_point(connections.source(sid)), time.monotonic() + 120
            while not caught_up(store, staged, sid, mark):
                if time.monotonic() > deadline:
                    raise SystemExit(f"demo: {sid}: the capture did not catch up within 120s")
                time.sleep(0.2)
            checkpoint = store.get(checkpoint_path(sid))
            lags[sid] = time.time() - checkpoint["commit_ts"]
        step("dblog_merge DAG: the rest of the change stream into the warehouse; then verify")
        airflow(env, "dags", "test", "dblog_merge")
        return summary(staged, Warehouse(env["DBLOG_WAREHOUSE"]), lags,
                       {sid: store.get(checkpoint_path(sid))["position"] for sid in SOURCES})
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate(); p.wait()
        store.stop()


def summary(staged: StagedLog, warehouse: Warehouse, lags: dict, upto: dict) -> int:
    rows, ok = [], True
    for sid in SOURCES:
        src = connections.source(sid)
        for t in sample.TABLES:
            table = f"{src.namespace}.{t}"
            diff = compare_warehouse(src, warehouse, table)
            duck = duckdb_read(warehouse, sid, table)   # an engine of its own, from the Iceberg metadata
            duck_rows = 0 if duck is None else duck.num_rows
            _, chunks = rebuild(staged, sid, table, upto[sid])
            ok &= diff.equal and duck_rows == diff.staged_rows
            rows.append((sid, table, diff.source_rows, duck_rows, len(chunks), sum(c.dropped for c in chunks),
                         f"{lags[sid]:.1f}s", "equal" if diff.equal else
                         f"DRIFT ({len(diff.missing)} missing, {len(diff.extra)} extra, {len(diff.different)} differ)"))
    header = ("source", "table", "rows", "DuckDB reads", "chunks", "dropped in windows", "capture lag",
              "warehouse vs source")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    step("every warehouse table equals its source" if ok else "DRIFT: see the table above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
