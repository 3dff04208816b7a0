"""`make demo`: capture + full dumps of both sources while a write workload runs, then a check.

Starts from a clean slate each time (sample tables, staged log, ZooKeeper state, slot), prints a
summary table and exits 0 only if every table rebuilt from the staged log equals its source.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from . import config
from .reconcile import rebuild, watermark_positions
from .staging import StagedLog
from .state import StateStore
from .verify import compare
from .workload import Workload, connect

ADMIN = {"dblog_mariadb": "mysql://root@127.0.0.1:{MARIADB}/mysql",
         "dblog_postgres": "postgres://postgres@127.0.0.1:{POSTGRES}/shop"}


def _ports() -> dict:
    return {k: os.environ.get(f"DBLOG_{k}_PORT", d) for k, d in (("MARIADB", "3307"), ("POSTGRES", "5433"))}


def main() -> int:
    root = os.path.abspath(".local/demo")
    shutil.rmtree(root, ignore_errors=True)
    env = {**os.environ, "DBLOG_STAGING": f"{root}/staging",
           "AIRFLOW_CONN_DBLOG_ZOOKEEPER": config.connection_uri(config.ZOOKEEPER_CONN).rsplit("/", 1)[0] + "/dblog_demo"}
    os.environ.update(env)
    zk = config.zookeeper()
    store = StateStore(zk.hosts, zk.chroot).start()
    for child in store.children("/"):
        store.zk.delete(f"/{child}", recursive=True)
    staged, sources, procs = StagedLog(env["DBLOG_STAGING"]), {}, []
    print("demo: loading sample tables (accounts, order_lines) on MariaDB and PostgreSQL")
    for sid in ("dblog_mariadb", "dblog_postgres"):
        src = config.source(sid)
        kind, conn = connect(ADMIN[sid].format(**_ports()))
        cur = conn.cursor()
        ns = src.namespace
        for t in ("order_lines", "accounts"):
            cur.execute(f"DROP TABLE IF EXISTS {ns}.{t}")
        conn.commit()
        if sid == "dblog_postgres":
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                        [src.slot])
            conn.commit()
        Workload(kind, conn, ns, seed=1, rows=20_000).create()
        conn.close()
        subprocess.run([sys.executable, "-m", "dblog.cli", "capture", "--init", "--source", sid], env=env,
                       check=True, capture_output=True)
        sources[sid] = src
        procs.append(subprocess.Popen([sys.executable, "-m", "dblog.cli", "capture", "--source", sid], env=env,
                                      stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen([sys.executable, "-m", "dblog.workload", ADMIN[sid].format(**_ports()), ns,
                                       "--seconds", "3600", "--seed", "2", "--rows", "20000"], env=env,
                                      stdout=subprocess.DEVNULL))
    started = time.monotonic()
    print("demo: capture and writers running; full dumps of both sources (chunk size 500)")
    for sid in sources:
        subprocess.run([sys.executable, "-m", "dblog.cli", "dump", "--all", "--source", sid, "--chunk-size", "500"],
                       env=env, check=True, capture_output=True)
    for p in procs[1::2]:
        p.terminate(); p.wait()
    print(f"demo: dumps done in {time.monotonic() - started:.1f}s with writes running; waiting for capture")
    rows, ok = [], True
    for sid, src in sources.items():
        from .capture import sync_point
        mark = sync_point(src)
        deadline = time.monotonic() + 120
        while mark not in watermark_positions(staged, sid):
            if time.monotonic() > deadline:
                print(f"demo: {sid}: capture did not catch up in 120s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        checkpoint = store.get(f"/{sid}/capture/checkpoint")
        lag = time.time() - checkpoint["commit_ts"] if checkpoint.get("commit_ts") else 0.0
        for t in ("accounts", "order_lines"):
            table = f"{src.namespace}.{t}"
            diff = compare(src, staged, table)
            _, results = rebuild(staged, sid, table)
            ok &= diff.equal
            rows.append((sid, table, diff.source_rows, len(results), sum(r.dropped for r in results),
                         f"{lag:.1f}s", "equal" if diff.equal else
                         f"DRIFT ({len(diff.missing)} missing, {len(diff.extra)} extra, {len(diff.different)} differ)"))
    for p in procs[0::2]:
        p.terminate(); p.wait()
    store.stop()
    header = ("source", "table", "rows", "chunks", "dropped in windows", "capture lag", "verify")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    print("demo: " + ("every table equals its source" if ok else "DRIFT: see the table above"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
