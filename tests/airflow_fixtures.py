"""Airflow under test: a metadata database of its own (SQLite in a temp AIRFLOW_HOME), this
project's DAGs and plugins, and connections that point at the test's own sources."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _airflow_settings(home: Path) -> dict[str, str]:
    from dblog_airflow.local import settings
    env = settings(home)
    # Connections and dblog roots come from each test; only Airflow's own settings are global.
    return {k: v for k, v in env.items()
            if (k.startswith("AIRFLOW") and not k.startswith("AIRFLOW_CONN_DBLOG")) or k in ("PATH", "PYSPARK_PYTHON")}


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
    and staging root), create their dump pools, return the Deployment."""
    def configure(*sources) -> Deployment:
        from airflow.models.pool import Pool
        first = sources[0]
        for s in sources:
            assert s.staging == first.staging and s.zk_chroot == first.zk_chroot, "share one deployment"
            monkeypatch.setenv(f"AIRFLOW_CONN_{s.source_id.upper()}", s.uri)
            Pool.create_or_update_pool(f"dblog_dump_{s.source_id}", slots=2, description="test",
                                       include_deferred=False)
        monkeypatch.setenv("DBLOG_SOURCES", ",".join(s.source_id for s in sources))
        monkeypatch.setenv("AIRFLOW_CONN_DBLOG_ZOOKEEPER", first.zk_uri)
        monkeypatch.setenv("DBLOG_STAGING", str(first.staging))
        monkeypatch.setenv("DBLOG_WAREHOUSE", str(tmp_path / "warehouse"))
        monkeypatch.setenv("DBLOG_ZK_SESSION_TIMEOUT", "3")
        return Deployment(sources)
    return configure
