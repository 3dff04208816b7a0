"""Helpers shared by the benchmarks: admin connections, fresh state stores, timing."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from dblog_dev import local

ROOT = Path(__file__).resolve().parents[1]
PORTS = local.ports()
ADMIN = {"mysql": local.admin_uri("mariadb"), "postgres": local.admin_uri("postgres")}


def admin(kind: str):
    from dblog_dev.workload import connect
    conn = connect(ADMIN[kind])[1]
    if kind == "mysql":
        conn.autocommit(True)
    else:
        conn.autocommit = True
    return conn


def run_sql(kind: str, *statements: str) -> None:
    conn = admin(kind)
    cur = conn.cursor()
    for s in statements:
        cur.execute(s)
    conn.close()


def namespace(kind: str, name: str) -> None:
    """A fresh database (MariaDB) or schema (PostgreSQL) the dblog user may read."""
    if kind == "mysql":
        run_sql(kind, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}",
                f"GRANT SELECT ON {name}.* TO 'dblog'@'127.0.0.1'")
    else:
        run_sql(kind, f"DROP SCHEMA IF EXISTS {name} CASCADE", f"CREATE SCHEMA {name}",
                f"GRANT USAGE ON SCHEMA {name} TO dblog",
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA {name} GRANT SELECT ON TABLES TO dblog")


def uri(kind: str, ns: str, slot: str | None = None) -> str:
    """The capture user's connection URI for namespace `ns` (password: the one `make up` made)."""
    if kind == "mysql":
        return f"mysql://dblog:{local.password()}@127.0.0.1:{PORTS['MARIADB']}/{ns}"
    return (f"postgres://dblog:{local.password()}@127.0.0.1:{PORTS['POSTGRES']}/shop?schema={ns}"
            f"&slot={slot or 'bench_' + uuid.uuid4().hex[:8]}")


def source(kind: str, name: str, ns: str, slot: str | None = None, zk_chroot: str | None = None):
    """With `zk_chroot`: of that deployment, as `dblog` processes run with env_for(..., zk_chroot, ...)."""
    from dblog.connections import deployment_id, source_from_uri
    zk = f"zookeeper://127.0.0.1:{PORTS['ZK']}{zk_chroot}" if zk_chroot else None
    return source_from_uri(name, uri(kind, ns, slot), deployment_id(zk))


def store():
    from dblog.coordination.store import StateStore
    return StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/bench_{uuid.uuid4().hex[:8]}").start()


def staged():
    from dblog.stagedlog.staged_log import StagedLog
    return StagedLog(tempfile.mkdtemp(prefix="dblog-bench-", dir=str(ROOT / ".local")))


@contextmanager
def dump_rig(kind: str, name: str, ns: str):
    """(source, store, staged log) for in-process dumps of a bench table, the capture checkpoint
    set (a dump needs one, not a running capture); all of it removed afterwards."""
    from dblog.coordination.checkpoint import ensure_checkpoint
    src, st, stage = source(kind, name, ns), store(), staged()
    try:
        ensure_checkpoint(st, src)
        yield src, st, stage
    finally:
        shutil.rmtree(stage.root, ignore_errors=True)
        src.close()
        st.stop()
        if kind == "postgres":
            run_sql(kind, f"SELECT pg_drop_replication_slot('{src.slot}')")


def dump_rate(rig, spec) -> float:
    """Rows/s of one in-process dump of `spec` (a DumpSpec) on a `dump_rig`."""
    import dblog.snapshot.dump as D
    src, st, stage = rig
    dump_id = D.create_dump(st, src, spec)
    started = time.perf_counter()
    return D.run_dump(st, src, stage, dump_id)[0].rows / (time.perf_counter() - started)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def median(xs):
    return statistics.median(xs)


def env_for(name: str, uri: str, zk_chroot: str, staging: str) -> dict:
    return {**os.environ, f"AIRFLOW_CONN_{name.upper()}": uri,
            "AIRFLOW_CONN_DBLOG_ZOOKEEPER": f"zookeeper://127.0.0.1:{PORTS['ZK']}{zk_chroot}",
            "DBLOG_STAGING": staging, "PYTHONPATH": str(ROOT / "include")}


def spawn(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)


def grid_key(size: int, parallelism: int) -> str:
    """A sweep cell's name in results: chunk size x parallelism."""
    return f"{size}x{parallelism}"


def parse_key(key: str) -> tuple[int, int]:
    size, _, parallelism = str(key).partition("x")
    return int(size), int(parallelism or 1)


def save_result(name: str, result: dict) -> Path:
    """A one-off bench's result as bench/results/NAME.json (`when` and `result`), printed too."""
    print(json.dumps(result, indent=1))
    path = ROOT / "bench" / "results" / f"{name}.json"
    path.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "result": result}, indent=1) + "\n")
    return path
