"""The pipeline beyond one process (`make cluster`, scripts/cluster.sh): Airflow with the
CeleryExecutor (api-server, scheduler, dag-processor, triggerer and two Celery workers, each in a
directory of its own), a Spark standalone cluster (a master, two workers with a directory each),
the executors' Python and dblog's code shipped with every job, the staged log and the warehouse on
S3, the Iceberg catalog on PostgreSQL, ZooKeeper as a three-node ensemble. Nothing is shared
between the processes but those servers.

capture DAG on a Celery worker -> staged log on S3 -> dump DAG (its windows read by executors in the long form) -> the
continuous merge DAG on the cluster -> Iceberg tables on S3 -> pyiceberg, DuckDB, `dblog verify`;
meanwhile a Celery worker is killed mid-dump and the ZooKeeper leader node is killed."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from dblog.operations.verify import compare_warehouse
from dblog.warehouse.tables import Warehouse
from dblog_airflow.local import PASSWORD, USER, ensemble_connection
from dblog_dev.local import postgres_database

from airflow_fixtures import Standalone
from chaos.oracles import PositionHistory
from cluster_faults import CLUSTER, airflow_url, cluster, settings, zookeeper_hosts, zookeeper_leader
from conftest import ROOT, TABLES, assert_warehouse_equals_source, settle, wait_for
from e2e.soak import CaptureProbe

ARCHIVE = CLUSTER / "executor-env.tar.gz"
OUT = ROOT / ".local" / "test-output"
# `make cluster-faults` (DBLOG_CLUSTER_FAULTS=all): more rows and writes, and beside the suite's
# faults a Spark worker killed mid-window and mid-merge, and the S3 server restarted.
LONG = os.environ.get("DBLOG_CLUSTER_FAULTS") == "all"
ROWS, RATE, CHUNK = (2000, 100, 200) if LONG else (200, 10, 20)
# The short form's dump reads its windows in the Celery worker (the threads reader): a Spark
# application per dump task costs a minute of this 2-core machine, twice with the retry. The
# executors still run dblog's shipped code for every merge (mapInArrow); the long form reads the
# dumps on the cluster too and kills a Spark worker mid-window.
READER = "spark" if LONG else "threads"


@pytest.fixture(scope="module")
def spark_cluster(services):
    """The cluster's servers; each test starts Airflow on it with its own sources."""
    cluster("up", env={**os.environ, "DBLOG_CLUSTER_AIRFLOW": "0"})
    subprocess.run(["bash", str(ROOT / "scripts/executor_env.sh"), str(ARCHIVE)], check=True, capture_output=True)
    from dblog_dev.local import s3_env
    yield {**settings(), **s3_env(), "DBLOG_SPARK_EXECUTOR_ENV": str(ARCHIVE), "DBLOG_SPARK_CORES_MAX": "1"}
    cluster("down")


def _task_instances(api: Standalone, run_id: str) -> list[dict]:
    return api.api("GET", f"/dags/dblog_dump/dagRuns/{run_id}/taskInstances", params={"limit": 100}).json()[
        "task_instances"]


def _kill_and_restart(name: str, env: dict) -> None:
    cluster("kill", name)
    time.sleep(5)   # (down for a while, as a crashed host)
    cluster("start", name, env=env)


class ExecutorWatch:
    """Spark's executor processes (their JVMs, and their Python workers running the interpreter the
    job shipped), polled all along the test (/proc): whether a shipped interpreter ran, and where
    any of them wrote, by working directory or a file open for writing, in the checkout outside its
    own worker's directory or in the test's (the driver's) temporary directories: nowhere, as on
    hosts that share no disk."""

    def __init__(self, tmp_path: Path):
        self.shipped, self.outside, self.forbidden = False, set(), (str(ROOT) + "/", str(tmp_path.parent.parent))

    def poll(self) -> bool:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
                python = exe.startswith(str(CLUSTER / "spark")) and "/dblog_env/" in exe
                if not python and b"CoarseGrainedExecutorBackend" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                cwd = os.readlink(f"/proc/{pid}/cwd") + "/"
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:   # (a process that ended meanwhile)
                continue
            self.shipped |= python
            own = next((str(CLUSTER / "spark" / w) + "/" for w in ("worker1", "worker2")
                        if cwd.startswith(str(CLUSTER / "spark" / w) + "/")), None)
            for path in [cwd, *self._written(pid, fds)]:
                if path.startswith(self.forbidden) and (own is None or not path.startswith(own)):
                    self.outside.add(path)
        return self.shipped

    @staticmethod
    def _written(pid: str, fds: list[str]) -> list[str]:
        out = []
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                flags = int(Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split()[3], 8)   # "flags:\t0100002"
            except (OSError, IndexError, ValueError):   # (closed meanwhile)
                continue
            if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) and flags & 3:
                out.append(target)
        return out


@pytest.mark.timeout(1500)
def test_the_pipeline_on_celery_and_a_spark_cluster_converges_under_writes_through_a_worker_and_a_zookeeper_leader_killed(
        mariadb, postgres, spark_cluster, tmp_path, monkeypatch):
    sources = (mariadb, postgres)
    tag, hosts = mariadb.tag, zookeeper_hosts()
    bucket = f"c-{tag}"
    for s in sources:   # one deployment: one chroot on the ensemble, one staged log
        s.zk_hosts, s.chroot, s.staging = hosts, f"/cluster_{tag}", f"s3://{bucket}/staged"
    settings_ = {**spark_cluster, "DBLOG_WAREHOUSE": f"s3://{bucket}/wh",
                 "DBLOG_ICEBERG_CATALOG": postgres_database(f"catalog_{tag}"), "DBLOG_DUMP_READER": READER}
    for name, value in settings_.items():
        if name != "AIRFLOW_CONN_DBLOG_ZOOKEEPER":   # (the sources' own: their chroot on the ensemble)
            monkeypatch.setenv(name, value)
    warehouse = Warehouse(settings_["DBLOG_WAREHOUSE"])
    for n, s in enumerate(sources):   # tables made after the capture's start: order_lines comes by the stream
        s.dblog("capture", "--init", "--source", s.source_id, check=True)
        s.workload(seed=7 + n, rows=ROWS).create()
    airflow = {**mariadb.env, **settings_, f"AIRFLOW_CONN_{postgres.source_id.upper()}": postgres.uri,
               "DBLOG_SOURCES": f"{mariadb.source_id},{postgres.source_id}",
               "AIRFLOW_CONN_DBLOG_ZOOKEEPER": ensemble_connection(hosts, mariadb.chroot),
               "DBLOG_CLUSTER_AIRFLOW_DB": f"airflow_{tag}", "DBLOG_CAPTURE_SLICE_SECONDS": "30",
               "DBLOG_CAPTURE_STOPPED_GRACE_SECONDS": "180", "DBLOG_MERGE_SLICE_SECONDS": "900",
               "DBLOG_FULL_REFRESH_SCHEDULE": "", "DBLOG_VERIFY_SCHEDULE": "", "DBLOG_MAINTENANCE_SCHEDULE": "",
               "DBLOG_DUMP_POOL_SLOTS": "1",   # (a Spark application per dump task: one core each)
               "DBLOG_DUMP_RETRY_DELAY_SECONDS": "5",   # (the killed worker's dump task: retried sooner)
               # A dead worker's task is failed sooner: four of Airflow's 5-s task heartbeats missed
               # (the default 30 s: six).
               "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20"}
    cluster("start", "airflow", env=airflow)
    try:
        _run(sources, airflow, warehouse, tmp_path)
    finally:
        cluster("stop", "airflow", env=airflow)


def _run(sources, airflow: dict, warehouse: Warehouse, tmp_path: Path) -> None:
    mariadb, postgres = sources
    url = airflow_url()
    token = requests.post(f"{url}/auth/token", json={"username": USER, "password": PASSWORD}, timeout=30).json()[
        "access_token"]
    api = Standalone(url, token, mariadb, warehouse.root, None, CLUSTER / "airflow" / "logs")
    wait_for(lambda: api.api("GET", "/dags/dblog_dump").ok, 180, interval=1, what="the DAG processor to parse dblog_dump")
    writers = [s.spawn_workload(seconds=3600, seed=20 + n, rate=RATE) for n, s in enumerate(sources)]
    history, went_back, watch = PositionHistory(), [], ExecutorWatch(tmp_path)
    with mariadb.store() as store, CaptureProbe(store, mariadb.source_id) as probe:
        wait_for(lambda: probe.leaders(), 240, interval=1, what="the capture DAG to capture on a Celery worker")
        runs = {}
        # MariaDB's accounts by a dump (windows a second apart: a worker dies while they run); the
        # other tables come by the stream alone (made after the capture started).
        for s in sources if LONG else sources[:1]:
            run = api.api("POST", "/dags/dblog_dump/dagRuns", json={"logical_date": None, "conf": {
                "source": s.source_id, "tables": ["accounts"], "chunk_size": CHUNK, "delay_seconds": 1}})
            assert run.status_code == 200, run.text
            runs[s.source_id] = run.json()["dag_run_id"]

        def dumping() -> tuple[str, str] | None:
            for source_id, run_id in runs.items():
                for ti in _task_instances(api, run_id):
                    if ti["task_id"].endswith("dump_table") and ti["state"] == "running" and ti["hostname"]:
                        return source_id, ti["hostname"]
            return None
        victim_source, victim = wait_for(dumping, 300, interval=0.5, what="a dump task running on a Celery worker")
        cluster("kill", victim)   # the Celery worker and every task it runs, as a crashed host
        leader = wait_for(zookeeper_leader, 30, interval=0.5, what="the ZooKeeper ensemble's leader")
        cluster("kill", leader)
        wait_for(lambda: zookeeper_leader() not in (None, leader), 60, interval=0.5, what="the ensemble to elect another leader")
        cluster("start", leader, env=airflow)
        if LONG:   # a Spark worker and its executors, mid-window (the dumps read on Spark)
            _kill_and_restart("worker1", airflow)
        assert wait_for(watch.poll, 300, interval=1, what="an executor's Python from the shipped environment")
        def dumped(run_id: str) -> list[dict] | None:
            tables = [ti for ti in _task_instances(api, run_id)   # (the other source's group is skipped)
                      if ti["task_id"].endswith("dump_table") and ti["state"] != "skipped"]
            # (a task lost with its worker that is not retried fails its group: upstream_failed)
            assert not any(ti["state"] in ("failed", "upstream_failed") for ti in tables), tables
            return tables if tables and all(ti["state"] == "success" for ti in tables) else None
        # The killed worker's dump task was failed by the scheduler and retried on the other worker.
        # (The runs' merge tasks leave their chunks to the continuous merge once it beats; their
        # success is checked at the end.)
        retried = [ti for ti in wait_for(lambda: dumped(runs[victim_source]), 900, interval=2,
                                         what="the dump's tables, one retried after its worker was killed")
                   if ti["try_number"] > 1]
        assert retried and all(ti["hostname"] != victim for ti in retried), retried
        for run_id in runs.values():
            wait_for(lambda r=run_id: dumped(r), 900, interval=2, what="every dump's tables")
        cluster("start", victim, env=airflow)
        if LONG:   # mid-merge (the continuous merge runs on), then the object store
            _kill_and_restart("worker2", airflow)
            subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "stop", "seaweedfs"], check=True,
                           capture_output=True)
            subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "start", "seaweedfs"], check=True,
                           capture_output=True)
        for w in writers:
            w.terminate(); w.wait()
        for s in sources:
            settle(s)

        def converged() -> bool:
            watch.poll()
            for s in sources:
                went_back.extend(history.observe(warehouse, s.source_id))
            return all(warehouse.load(s.source_id, s.table(t)) is not None and
                       compare_warehouse(s.source(), warehouse, s.table(t)).equal for s in sources for t in TABLES)
        wait_for(converged, 420, interval=3, what="the continuous merge on the cluster to bring both sources' tables")
        for run_id in runs.values():
            assert api.wait_for_run("dblog_dump", run_id, timeout=600) == "success", \
                api.task_log("dblog_dump", run_id, "merge")[-3000:]
        report = probe.report()
        captures = api.api("GET", "/dags/dblog_capture/dagRuns/~/taskInstances", params={"limit": 200}).json()[
            "task_instances"]
    assert not went_back, went_back[:5]   # no key ever went back in time across the warehouse's versions
    assert not watch.outside, sorted(watch.outside)
    for s in sources:
        assert_warehouse_equals_source(s, warehouse)   # pyiceberg and DuckDB (httpfs + an S3 secret)
        for t in TABLES:
            assert warehouse.load(s.source_id, s.table(t)).metadata_location.startswith(warehouse.root + "/")
    verify = mariadb.dblog("verify", "--source", mariadb.source_id, timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert not (tmp_path / "warehouse").exists() and not (tmp_path / "staging").exists()
    ran_on = {ti["hostname"] for ti in captures if ti["hostname"]}
    assert ran_on <= {"celery1", "celery2"} and ran_on, ran_on   # every task on a Celery worker
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cluster-handovers.json").write_text(json.dumps({
        "summary": report.summary(), "killed_worker": victim, "killed_zookeeper_leader": leader,
        "capture_slices_per_worker": {w: sum(ti["hostname"] == w for ti in captures) for w in sorted(ran_on)},
        "handover_gaps_s": [h.gap_s for h in report.handovers]}, indent=1))
    print(f"\ncluster: {report.summary()}; capture slices per worker "
          f"{ {w: sum(ti['hostname'] == w for ti in captures) for w in sorted(ran_on)} }")

