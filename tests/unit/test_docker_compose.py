"""docker-compose.yaml stays consistent with the local set-up (no Docker engine here to run it)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def test_compose_runs_every_part_of_the_cluster_topology():
    assert {"mariadb", "postgres", "zookeeper-1", "zookeeper-2", "zookeeper-3", "redis", "seaweedfs",
            "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
            "airflow-worker", "spark-master", "spark-worker"} <= set(SERVICES)
    assert SERVICES["airflow-worker"]["deploy"]["replicas"] == SERVICES["spark-worker"]["deploy"]["replicas"] == 2


def test_compose_shares_no_volume_between_containers_and_names_the_whole_ensemble():
    """Parts reach each other through their servers only (the staged log and warehouse on S3)."""
    import json

    from dblog.connections import zookeeper
    named = [v.split(":")[0] for s in SERVICES.values() for v in s.get("volumes", []) if not v.startswith(".")]
    assert len(named) == len(set(named)), named
    env = SERVICES["airflow-scheduler"]["environment"]
    assert env["DBLOG_STAGING"].startswith("s3://") and env["DBLOG_WAREHOUSE"].startswith("s3://")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    hosts = json.loads(env["AIRFLOW_CONN_DBLOG_ZOOKEEPER"])["host"]
    assert zookeeper(f"zookeeper://{hosts}/dblog").hosts == ",".join(f"zookeeper-{n}:2181" for n in (1, 2, 3))


def test_airflow_containers_mount_the_project_folders_and_use_the_local_connection_ids():
    from dblog.connections import source_ids
    from dblog_dev.local import CONNECTION_IDS
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        service = SERVICES[name]
        mounts = {v.split(":")[0] for v in service["volumes"]}
        assert {"./dags", "./plugins", "./include", "./spark_jobs"} <= mounts
        env = service["environment"]
        for conn_id in CONNECTION_IDS:
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in env
        assert env["DBLOG_SOURCES"].split(",") == source_ids()
        # Not the local deployment: every setting the engine requires outside it is given.
        assert env["DBLOG_STAGING"] and env["DBLOG_WAREHOUSE"] and "DBLOG_LOCAL" not in env


def test_the_image_pins_the_locked_airflow_and_sources_are_provisioned_by_the_same_sql():
    lock = (ROOT / "requirements.txt").read_text()
    airflow = re.search(r"^apache-airflow==([\d.]+)$", lock, re.M).group(1)
    assert f"FROM apache/airflow:{airflow}-" in (ROOT / "docker" / "Dockerfile").read_text()
    for db in ("mariadb", "postgres"):
        volumes = SERVICES[db]["volumes"]
        assert "./scripts/sql:/dblog-sql:ro" in volumes
        assert any(v.startswith(f"./docker/initdb/{db}.sh:/docker-entrypoint-initdb.d/") for v in volumes)
        assert f"/dblog-sql/{db}.sql" in (ROOT / "docker" / "initdb" / f"{db}.sh").read_text()
    assert "scripts/sql/mariadb.sql" in (ROOT / "scripts" / "services.sh").read_text()


def test_published_ports_listen_on_loopback_only():
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_no_credential_is_written_into_the_compose_file_or_the_sql():
    """The capture user's password comes from DBLOG_PASSWORD only; compose refuses to start without it."""
    text = (ROOT / "docker-compose.yaml").read_text()
    for uri in re.findall(r"(?:mysql|postgres)://[^\s]+", text):
        assert ":${DBLOG_PASSWORD:?" in uri, uri
    for sql in (ROOT / "scripts" / "sql").glob("*.sql"):
        assert not re.search(r"(IDENTIFIED BY|PASSWORD)\s+'[^',]+'", sql.read_text()), sql


def test_the_init_container_loads_the_sample_through_the_services_own_addresses(monkeypatch):
    """Inside the init container 127.0.0.1 is the container itself: the sample's admin connections
    must reach the `mariadb` and `postgres` services on their container ports."""
    command = SERVICES["airflow-init"]["command"][-1].replace("\\\n", " ")
    line = next(part for part in command.splitlines() if "dblog_dev.sample" in part)
    for name, value in re.findall(r"(DBLOG_\w+|PGPASSWORD)=(\S+)", line):
        monkeypatch.setenv(name, value)
    from dblog_dev import local
    assert local.admin_uri("mariadb") == "mysql://root@mariadb:3306/mysql"
    assert local.admin_uri("postgres") == "postgres://postgres@postgres:5432/shop"
    assert SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"] == dict(
        re.findall(r"(PGPASSWORD)=(\S+)", line))["PGPASSWORD"]
