"""docker-compose.yaml stays consistent with the local set-up (no Docker engine here to run it)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def test_compose_runs_every_part_the_issue_names():
    assert {"mariadb", "postgres", "zookeeper", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "spark-master", "spark-worker"} <= set(SERVICES)


def test_airflow_containers_mount_the_project_folders_and_use_the_local_connection_ids():
    from dblog.config import local_connections, source_ids
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        service = SERVICES[name]
        mounts = {v.split(":")[0] for v in service["volumes"]}
        assert {"./dags", "./plugins", "./include", "./spark_jobs"} <= mounts
        env = service["environment"]
        for conn_id in local_connections():
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in env
        assert env["DBLOG_SOURCES"].split(",") == source_ids()


def test_the_image_pins_the_locked_airflow_and_sources_are_provisioned_by_the_same_sql():
    lock = (ROOT / "requirements.txt").read_text()
    airflow = re.search(r"^apache-airflow==([\d.]+)$", lock, re.M).group(1)
    assert f"FROM apache/airflow:{airflow}-" in (ROOT / "docker" / "Dockerfile").read_text()
    for db, sql in (("mariadb", "mariadb.sql"), ("postgres", "postgres.sql")):
        assert any(v.startswith(f"./scripts/sql/{sql}:/docker-entrypoint-initdb.d/") for v in SERVICES[db]["volumes"])
    assert "scripts/sql/mariadb.sql" in (ROOT / "scripts" / "services.sh").read_text()


def test_published_ports_listen_on_loopback_only():
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
