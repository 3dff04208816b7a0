"""The cluster of `make cluster` as a test drives it (scripts/cluster.sh): its settings, its Airflow
on Celery started with a test's own sources, and the faults a test injects (kill -9 of a process
group, as a crashed host would; the ZooKeeper leader found by asking each node)."""
from __future__ import annotations

import os
import subprocess
import time

from conftest import ROOT

CLUSTER = ROOT / ".local" / "cluster"
SCRIPT = str(ROOT / "scripts" / "cluster.sh")


def cluster(*args: str, env: dict | None = None, timeout: float = 300) -> str:
    """Run `scripts/cluster.sh ARGS`; fail with its output when it fails."""
    started = time.monotonic()
    done = subprocess.run(["bash", SCRIPT, *args], env=env or os.environ.copy(), capture_output=True, text=True,
                          timeout=timeout)
    if os.environ.get("DBLOG_TEST_TRACE"):
        print(f"[trace] {time.monotonic() - started:6.1f} s cluster.sh {' '.join(args)}", flush=True)
    assert done.returncode == 0, f"cluster.sh {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def settings() -> dict[str, str]:
    """What `cluster.sh env` prints: the ensemble, the Spark master, the broker."""
    from dblog_dev.local import exported
    return exported(cluster("env"))


def airflow_url() -> str:
    return settings()["AIRFLOW__API__BASE_URL"]


def zookeeper_hosts() -> str:
    import json
    return json.loads(settings()["AIRFLOW_CONN_DBLOG_ZOOKEEPER"])["host"]


def zookeeper_leader() -> str | None:
    """The ensemble's leader node (zk1..zk3), from each node's `srvr` answer (None while none leads)."""
    import socket
    for n, hostport in enumerate(zookeeper_hosts().split(","), 1):
        host, port = hostport.split(":")
        try:
            with socket.create_connection((host, int(port)), timeout=2) as s:
                s.sendall(b"srvr")
                answer = s.makefile().read()
        except OSError:
            continue
        if "Mode: leader" in answer:
            return f"zk{n}"
    return None

