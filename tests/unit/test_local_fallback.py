"""Outside the local deployment the engine never guesses a connection or a root: it says what to
set. DBLOG_LOCAL=1 (the Makefile, the tests, `make airflow`) falls back to the `make up` services."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dblog import connections
from dblog.connections import ConfigError
from dblog_dev import local

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def deployed(monkeypatch):
    """An environment outside the local deployment: nothing set but what a test sets."""
    for name in ("DBLOG_LOCAL", "DBLOG_STAGING", "DBLOG_WAREHOUSE", "AIRFLOW_CONN_DBLOG_MARIADB",
                 "AIRFLOW_CONN_DBLOG_POSTGRES", "AIRFLOW_CONN_DBLOG_ZOOKEEPER"):
        monkeypatch.delenv(name, raising=False)


def test_a_missing_source_connection_names_its_variable_and_the_local_switch(deployed):
    with pytest.raises(ConfigError) as refused:
        connections.source("dblog_mariadb")
    message = str(refused.value)
    assert "no connection 'dblog_mariadb'" in message and "set AIRFLOW_CONN_DBLOG_MARIADB" in message
    assert "DBLOG_LOCAL=1 uses the local `make up` services" in message


def test_a_connection_without_a_host_is_refused_instead_of_reaching_127_0_0_1(deployed, monkeypatch):
    # What Airflow's get_uri() gives for a connection saved with an empty host field.
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_MARIADB", "mysql://cap:pw@/shop")
    with pytest.raises(ConfigError, match=r"connection dblog_mariadb: the URI names no host"):
        connections.source("dblog_mariadb")


def test_a_missing_zookeeper_connection_is_refused_with_an_example_uri(deployed):
    with pytest.raises(ConfigError, match=r"no connection 'dblog_zookeeper': set AIRFLOW_CONN_DBLOG_ZOOKEEPER to a "
                                          r"URI such as zookeeper://host:2181/dblog .*DBLOG_LOCAL=1"):
        connections.zookeeper()


@pytest.mark.parametrize("read, variable", [(connections.staging_root, "DBLOG_STAGING"),
                                            (connections.warehouse_root, "DBLOG_WAREHOUSE")])
def test_a_missing_root_names_its_variable_instead_of_writing_under_the_working_directory(deployed, read, variable):
    with pytest.raises(ConfigError, match=rf"^{variable} is not set: set it to the .* root .*; DBLOG_LOCAL=1 uses "):
        read()


def test_with_dblog_local_the_local_services_and_directory_stand_in(deployed, monkeypatch, tmp_path):
    monkeypatch.setenv("DBLOG_LOCAL", "1")
    monkeypatch.setenv("DBLOG_LOCAL_DIR", str(tmp_path))
    monkeypatch.setenv("DBLOG_PASSWORD", "pw")
    monkeypatch.setenv("DBLOG_MARIADB_PORT", "3317")
    assert connections.connection_uri("dblog_mariadb") == "mysql://dblog:pw@127.0.0.1:3317/shop"
    assert connections.zookeeper().hosts == f"127.0.0.1:{local.ports()['ZK']}"
    assert connections.staging_root() == str(tmp_path / "staging")
    assert connections.warehouse_root() == str(tmp_path / "warehouse")
    with pytest.raises(ConfigError, match="no connection 'prod_db'.*DBLOG_LOCAL=1 provides only dblog_mariadb, "
                                          "dblog_postgres, dblog_zookeeper"):
        connections.connection_uri("prod_db")


def test_settings_that_are_set_win_over_the_local_fallback(monkeypatch):
    monkeypatch.setenv("DBLOG_LOCAL", "1")
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_MARIADB", "mysql://u:p@db.example:3306/sales")
    monkeypatch.setenv("DBLOG_STAGING", "s3://bucket/staging")
    assert connections.connection_uri("dblog_mariadb") == "mysql://u:p@db.example:3306/sales"
    assert connections.staging_root() == "s3://bucket/staging"


def test_the_engine_does_not_load_the_development_package_without_dblog_local():
    code = ("import sys\nfrom dblog import cli, connections\n"
            "try:\n    connections.source('dblog_mariadb')\nexcept connections.ConfigError:\n    pass\n"
            "print('dblog_dev' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "DBLOG_LOCAL" and not k.startswith("AIRFLOW_CONN_")}
    loaded = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False", loaded.stderr


def test_the_python_defaults_of_the_local_ports_are_those_services_sh_starts_on(monkeypatch):
    for name in local.DEFAULT_PORTS:
        monkeypatch.delenv(f"DBLOG_{name}_PORT", raising=False)
    script = (ROOT / "scripts" / "services.sh").read_text()
    shell = {name: int(port) for name, port in re.findall(r"\$\{DBLOG_(\w+)_PORT:-(\d+)\}", script)}
    assert shell == local.ports() == local.DEFAULT_PORTS


def test_the_local_deployment_names_zookeeper_as_the_engine_looks_it_up():
    # dblog_dev.local keeps its own constants (the engine imports it, so it cannot import them back).
    assert local.ZOOKEEPER_CONN == connections.ZOOKEEPER_CONN
    assert local.CHROOT == connections.DEFAULT_CHROOT
