"""Airflow under test: a metadata database of its own (SQLite in a temp AIRFLOW_HOME), this
project's DAGs and plugins, and connections that point at the test's own sources."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _airflow_settings(home: Path) -> dict[str, str]:
    from dblog_airflow.local import airflow_settings
    # Connections and dblog roots come from each test; only Airflow's own settings are global.
    return {**{k: v for k, v in airflow_settings(home).items() if k != "PYTHONPATH"},
            # Each test parses the DAGs with its own sources (the `source` param's choices): its
            # dag.test() must store them, not skip the write because another test's version is
            # under 30 s old (a DAG its run then triggers would refuse this test's source).
            "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0"}


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    """Set before the first `import airflow` of the run (Airflow reads its home at import)."""
    home = tmp_path_factory.mktemp("airflow")
    os.environ.update(_airflow_settings(home))
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   capture_output=True, env=os.environ)
    return home


@dataclass
class Deployment:
    """The DAGs as parsed with this test's sources configured."""
    sources: tuple

    def dag(self, dag_id: str):
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(str(ROOT / "dags"))
        assert not bag.import_errors, bag.import_errors
        return bag.get_dag(dag_id)

    def run(self, dag_id: str, conf: dict | None = None):
        """One DAG run through `dag.test()`; returns {task_id (or task_id[map_index]): state} and the run."""
        run = self.dag(dag_id).test(run_conf=conf)
        return task_states(run), run


def task_states(run) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id).all()
        return {ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state) for ti in tis}


@pytest.fixture
def deploy(airflow_home, monkeypatch, tmp_path):
    """deploy(src, ...): configure Airflow for these sources (they share the first's ZooKeeper chroot
    and staging root), create their dump pools, return the Deployment. The source and ZooKeeper
    connections are AIRFLOW_CONN_* variables, or with `in_metadata_db=True` rows of Airflow's
    metadata database (as the UI creates them), removed after the test."""
    stored: list[str] = []

    def configure(*sources, in_metadata_db: bool = False) -> Deployment:
        from airflow.models.pool import Pool
        first = sources[0]
        connections = {"dblog_zookeeper": first.zk_uri}
        for s in sources:
            assert s.staging == first.staging and s.zk_chroot == first.zk_chroot, "share one deployment"
            connections[s.source_id] = s.uri
            Pool.create_or_update_pool(f"dblog_dump_{s.source_id}", slots=2, description="test",
                                       include_deferred=False)
        if in_metadata_db:
            stored.extend(store_connections(connections))
        else:
            for conn_id, uri in connections.items():
                monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", uri)
        monkeypatch.setenv("DBLOG_SOURCES", ",".join(s.source_id for s in sources))
        monkeypatch.setenv("DBLOG_STAGING", str(first.staging))
        monkeypatch.setenv("DBLOG_WAREHOUSE", str(tmp_path / "warehouse"))
        monkeypatch.setenv("DBLOG_ZK_SESSION_TIMEOUT", "3")
        return Deployment(sources)
    yield configure
    delete_connections(stored)


def store_connections(uris: dict[str, str]) -> list[str]:
    """Connections in the metadata database, from their URIs; returns their ids."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    with create_session() as session:
        for conn_id, uri in uris.items():
            session.add(Connection(conn_id=conn_id, uri=uri))
    return list(uris)


def delete_connections(conn_ids: list[str]) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id.in_(conn_ids)).delete(synchronize_session=False)


class StatsdListener:
    """A UDP StatsD server on loopback that keeps every metric line Airflow sends it."""

    def __init__(self) -> None:
        import socket
        import threading
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                data = self.sock.recv(65535)
            except OSError:
                return
            self.lines.extend(data.decode(errors="replace").splitlines())

    def values(self, name: str) -> list[float]:
        """Values of the metric `name` (without Airflow's prefix), in arrival order."""
        out = []
        for line in list(self.lines):
            metric, _, rest = line.partition(":")
            if metric.split(".", 1)[-1] == name:
                out.append(float(rest.split("|", 1)[0]))
        return out

    def close(self) -> None:
        self.sock.close()


@dataclass
class Standalone:
    """A running `airflow standalone` (the product as users run it), its REST API and its source."""
    url: str
    token: str
    src: object
    warehouse: str
    statsd: StatsdListener
    log_dir: Path
    started: str = ""  # ISO time it was launched: what it did since then, the late tests count
    probe: object = None  # soak.CaptureProbe over its capture, sampling for its whole life

    def lineage(self) -> list[dict]:
        """The OpenLineage events the deployment's tasks sent so far (its file transport)."""
        path = self.log_dir.parent.parent / "lineage.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def api(self, method: str, path: str, **kwargs):
        import requests
        return requests.request(method, f"{self.url}/api/v2{path}", timeout=30,
                                headers={"Authorization": f"Bearer {self.token}"}, **kwargs)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 420) -> str:
        from conftest import wait_for
        return wait_for(lambda: self._finished(dag_id, run_id), timeout, interval=1, what=f"{dag_id} {run_id}")

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """Every try's log of a task ('' before it has one), as Airflow wrote it."""
        folder = self.log_dir / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return "".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log")))

    def _finished(self, dag_id: str, run_id: str) -> str | None:
        state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
        return state if state in ("success", "failed") else None


SLICE_SECONDS = 20  # the standalone under test hands its capture over every 20 s
MERGE_SLICE_SECONDS = 45  # ... and its continuous merge every 45 s (the merge test waits for a slice to show a change)


_standalone_stops: list = []  # how to stop the running `standalone`, while one runs


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist hands the standalone's tests to one worker
def pytest_collection_modifyitems(items):
    """The standalone's tests marked `late(n)` count what the deployment did over its life (capture
    handovers, merge slices): they run after its other tests, so the stretch those take is counted
    rather than waited for again. Other tests keep their places."""
    def rank(item) -> int:
        mark = item.get_closest_marker("late")
        return mark.args[0] if mark else 0
    ordered = iter(sorted((i for i in items if "standalone" in i.fixturenames), key=rank))
    items[:] = [next(ordered) if "standalone" in i.fixturenames else i for i in items]


def pytest_runtest_teardown(item, nextitem):
    """Stop `standalone` once no test left to run needs it: its capture and continuous merge run
    slice after slice (a Spark job each), and would otherwise load both cores for the rest of the
    run. Its session-scoped fixture then only cleans up."""
    if not _standalone_stops or nextitem is None:
        return
    items = item.session.items
    if not any("standalone" in later.fixturenames for later in items[items.index(item) + 1:]):
        for stop in list(_standalone_stops):
            stop()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def standalone(services, airflow_home, tmp_path_factory):
    """`airflow standalone` on 127.0.0.1 with this project's DAGs, capturing a sample MariaDB
    source of its own (its dblog_capture and dblog_merge_continuous DAGs run, as in `make airflow`,
    in slices of `SLICE_SECONDS` and `MERGE_SLICE_SECONDS` so that the tests see many handovers) and sending its metrics to a StatsD
    listener of the test's."""
    import signal

    import requests

    from dblog_airflow.local import PASSWORD, USER, settings

    from conftest import make_env, wait_for
    base = tmp_path_factory.mktemp("standalone")
    src = make_env("mariadb", base)
    src.workload(seed=51, rows=3000).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    port = _free_port()
    statsd = StatsdListener()
    env = {**os.environ, **settings(base / "airflow"), **{k: v for k, v in src.env.items() if k.startswith("DBLOG_")
                                                             or k.startswith("AIRFLOW_CONN_")},
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
           "DBLOG_WAREHOUSE": str(base / "warehouse"), "DBLOG_FULL_REFRESH_SCHEDULE": "",
           "DBLOG_VERIFY_SCHEDULE": "", "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT / 'include'}",
           "DBLOG_CAPTURE_SLICE_SECONDS": str(SLICE_SECONDS), "DBLOG_CAPTURE_WAIT_TIMEOUT": "900",
           "DBLOG_CAPTURE_STOPPED_GRACE_SECONDS": str(3 * SLICE_SECONDS),
           "DBLOG_MERGE_SLICE_SECONDS": str(MERGE_SLICE_SECONDS), "DBLOG_CHANGE_TABLES": src.table("accounts"),
           # OpenLineage's provider, through its file transport: a JSON event per line
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                          "log_file_path": str(base / "lineage.jsonl")}),
           "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port)}
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    subprocess.run([airflow, "pools", "set", f"dblog_dump_{src.source_id}", "2", "dumps"], env=env, check=True,
                   capture_output=True)
    log = open(base / "standalone.log", "w")
    import datetime as dt
    launched = dt.datetime.now(dt.UTC).isoformat()   # (its first slices run while it starts answering)
    proc = subprocess.Popen([airflow, "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def stop() -> None:
        # Once, and the whole process group: a scheduler or task may outlive `standalone` itself.
        if stop in _standalone_stops:
            _standalone_stops.remove(stop)
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    _standalone_stops.append(stop)
    stack = contextlib.ExitStack()
    try:
        def healthy():
            assert proc.poll() is None, f"airflow standalone exited; see {base / 'standalone.log'}"
            try:
                return requests.get(f"{url}/api/v2/monitor/health", timeout=5).ok
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                return False
        wait_for(healthy, 180, interval=1, what="airflow standalone to answer")
        token = requests.post(f"{url}/auth/token", json={"username": USER, "password": PASSWORD},
                              timeout=30).json()["access_token"]
        from soak import CaptureProbe
        store = stack.enter_context(src.store())
        probe = stack.enter_context(CaptureProbe(store, src.source_id))
        deployment = Standalone(url, token, src, env["DBLOG_WAREHOUSE"], statsd, base / "airflow" / "logs",
                                launched, probe)
        wait_for(lambda: deployment.api("GET", "/dags/dblog_dump").ok, 180, interval=1,
                 what="the DAG processor to parse dblog_dump")
        yield deployment
    finally:
        stack.close()
        stop()
        log.close()
        statsd.close()
        src.teardown()
