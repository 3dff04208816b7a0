"""Settings of the local deployments: Airflow on 127.0.0.1 with this project's DAGs and plugins,
the local services as connections, state under .local/.

    eval "$(python -m dblog_airflow.local)"            # `make airflow`: one `airflow standalone`
    eval "$(python -m dblog_airflow.local --celery)"   # `make cluster`: processes apart, Celery
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API_PORT = os.environ.get("DBLOG_AIRFLOW_PORT", "8093")
USER, PASSWORD = "admin", "admin"


def settings(home: Path | None = None) -> dict[str, str]:
    """Airflow's settings plus the dblog connections and roots of the local services."""
    from dblog_dev.local import connections
    os.environ.setdefault("DBLOG_LOCAL_DIR", str(ROOT / ".local"))  # where `make up` keeps the password
    env = {f"AIRFLOW_CONN_{conn_id.upper()}": uri for conn_id, uri in connections().items()}
    env.update({
        "DBLOG_LOCAL": "1",  # this deployment is the local one: the engine may fall back to its services
        # Explicit roots: Airflow runs tasks in temporary directories, so cwd-relative defaults would drift.
        "DBLOG_STAGING": os.environ.get("DBLOG_STAGING") or str(ROOT / ".local" / "staging"),
        "DBLOG_WAREHOUSE": os.environ.get("DBLOG_WAREHOUSE") or str(ROOT / ".local" / "warehouse"),
    })
    return {**airflow_settings(home), **env}


def airflow_settings(home: Path | None = None) -> dict[str, str]:
    """Airflow's own settings for a home under .local (or `home`); no connection, no dblog root."""
    home = Path(home or ROOT / ".local" / "airflow")
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "6",  # the default (32) forks 32 workers on 2 cores
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": API_PORT,
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{API_PORT}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW_CONN_SPARK_DEFAULT": "spark://local%5B2%5D",
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT / "include")]),
    }
    home.mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(f'{{"{USER}": "{PASSWORD}"}}')
    return env


CALLER_WINS = ("AIRFLOW_CONN_", "DBLOG_", "AWS_")  # dblog's settings: a test or a user brings its own


def celery_settings(home: Path, port: int, broker: str, spark_master: str, zookeeper: str,
                    database: str) -> dict[str, str]:
    """The deployment `make cluster` runs (scripts/cluster.sh): scheduler, dag-processor, triggerer,
    api-server and Celery workers as processes apart, tasks queued on Redis (`broker`), the metadata
    database `database` on the local PostgreSQL (created here if missing), Spark jobs submitted to
    `spark_master`, ZooKeeper on the ensemble `zookeeper` (host:port,...). A setting the caller's
    environment already holds for dblog (its connections, `DBLOG_*`) wins over these defaults."""
    from dblog_dev.local import postgres_database, s3_env
    metadata, catalog = postgres_database(database), postgres_database(f"{database}_catalog")
    secret = home / "secret"
    if not secret.exists():   # one secret that every process signs and checks the tasks' tokens with
        import secrets
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)   # never readable by others
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    # Nothing on a shared disk: the staged log and the warehouse on S3, the catalog on PostgreSQL,
    # the executors' Python shipped with each job (`make executor-env`).
    defaults = {**settings(home), **s3_env(), "AIRFLOW_CONN_DBLOG_ZOOKEEPER": ensemble_connection(zookeeper),
                "AIRFLOW_CONN_SPARK_DEFAULT": spark_master, "DBLOG_SPARK_MASTER": spark_master,
                "DBLOG_STAGING": "s3://dblog/staged", "DBLOG_WAREHOUSE": "s3://dblog/warehouse",
                "DBLOG_ICEBERG_CATALOG": catalog,
                "DBLOG_SPARK_EXECUTOR_ENV": str(home.parent / "executor-env.tar.gz"), "DBLOG_SPARK_CORES_MAX": "1"}
    env = {k: v for k, v in defaults.items() if not k.startswith(CALLER_WINS) or k not in os.environ}
    api = f"http://127.0.0.1:{port}"
    env.update({
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        # Captures, the continuous merge and dump tasks run for minutes each: with a worker gone,
        # the other must still take a capture's next slice beside a full dump pool.
        "AIRFLOW__CORE__PARALLELISM": "16", "AIRFLOW__CELERY__WORKER_CONCURRENCY": "8",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
        "AIRFLOW__CELERY__BROKER_URL": broker,
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{metadata}",
        "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": api,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secret.read_text().strip(),
        "AIRFLOW__API__SECRET_KEY": secret.read_text().strip(),
        # A worker killed mid-task: its task is failed (and retried on another worker) after this
        # long without a heartbeat, not the default 5 minutes.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": os.environ.get(
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "30"),
    })
    return env


def worker_hostname() -> str:
    """`[core] hostname_callable` of the cluster's Celery workers: each reports its own name
    (DBLOG_WORKER_NAME), as workers on separate hosts would, though they share this one: the UI and
    the REST API show which worker ran a task."""
    import socket
    return os.environ.get("DBLOG_WORKER_NAME") or socket.getfqdn()


def ensemble_connection(hosts: str, chroot: str = "dblog") -> str:
    """A ZooKeeper ensemble as an Airflow connection in an environment variable: JSON, since a URI
    holds one host:port (Airflow cannot parse `zookeeper://h1:2181,h2:2181/dblog`)."""
    import json
    return json.dumps({"conn_type": "zookeeper", "host": hosts, "schema": chroot.strip("/")})


def _main(argv: list[str]) -> None:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m dblog_airflow.local")
    parser.add_argument("--celery", action="store_true", help="the cluster's settings (scripts/cluster.sh)")
    parser.add_argument("--home", type=Path, default=ROOT / ".local" / "cluster" / "airflow")
    parser.add_argument("--port", type=int, default=8193)
    parser.add_argument("--broker", default="redis://127.0.0.1:6479/0")
    parser.add_argument("--spark-master", default="spark://127.0.0.1:7177")
    parser.add_argument("--zookeeper", default="127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283")
    parser.add_argument("--database", default="airflow_cluster")
    parser.add_argument("--ensemble", action="store_true", help="only the ZooKeeper connection of --zookeeper")
    a = parser.parse_args(argv)
    env = (celery_settings(a.home, a.port, a.broker, a.spark_master, a.zookeeper, a.database) if a.celery
           else {"AIRFLOW_CONN_DBLOG_ZOOKEEPER": ensemble_connection(a.zookeeper)} if a.ensemble
           else settings())
    for key, value in env.items():
        print(f"export {key}={shlex.quote(value)}")


if __name__ == "__main__":
    _main(sys.argv[1:])
