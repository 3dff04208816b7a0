"""Settings of the local deployment (`make airflow`, `make demo`, the tests): Airflow on 127.0.0.1
with this project's DAGs and plugins, the local services as connections, state under .local/.

    eval "$(python -m dblog_airflow.local)"    # export them into a shell
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


if __name__ == "__main__":
    for key, value in settings().items():
        print(f"export {key}={shlex.quote(value)}")
