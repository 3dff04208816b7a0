"""Deployments that share a database server keep their watermarks apart; docs/sources.md shows the
set-up `dblog setup` checks."""
from __future__ import annotations

from pathlib import Path

import pytest

from dblog.connections import MAX_DEPLOYMENT_ID, ConfigError, deployment_id, source_from_uri
from dblog.model.events import ChangeEvent
from dblog.sources.base import WATERMARK_TABLE
from dblog.sources.mysql import MySQLSource
from dblog.sources.postgres import PostgresSource

SOURCES_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "sources.md").read_text()


@pytest.fixture(autouse=True)
def no_deployment_settings(monkeypatch):
    monkeypatch.delenv("DBLOG_DEPLOYMENT", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_DBLOG_ZOOKEEPER", raising=False)


def test_the_deployment_is_named_after_the_zookeeper_chroot_unless_set():
    assert deployment_id() == "dblog"  # the default chroot
    assert deployment_id("zookeeper://zk1:2181,zk2:2181/prod") == "prod"
    assert deployment_id("zookeeper://zk:2181/Team-A/eu") == "team_a_eu"


def test_the_environment_names_the_deployment_for_every_process(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_ZOOKEEPER", "zookeeper://127.0.0.1:2182/staging")
    assert deployment_id() == "staging"
    assert source_from_uri("s", "mysql://u:p@h:3306/shop").deployment == "staging"
    monkeypatch.setenv("DBLOG_DEPLOYMENT", "eu_prod")
    assert deployment_id("zookeeper://zk:2181/dblog") == "eu_prod"
    for bad in ("EU", "a-b", "x" * (MAX_DEPLOYMENT_ID + 1)):
        monkeypatch.setenv("DBLOG_DEPLOYMENT", bad)
        with pytest.raises(ConfigError, match="DBLOG_DEPLOYMENT"):
            deployment_id()


def test_an_ensemble_in_airflow_s_json_connection_form_names_the_same_deployment_and_hosts(monkeypatch):
    from dblog.connections import connection_uri, zookeeper
    from dblog_airflow.local import ensemble_connection
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_ZOOKEEPER", ensemble_connection("zk1:2181,zk2:2181,zk3:2181", "/prod"))
    assert deployment_id() == "prod"
    assert zookeeper().hosts == "zk1:2181,zk2:2181,zk3:2181" and zookeeper().chroot == "/prod"
    monkeypatch.setenv("AIRFLOW_CONN_SRC", '{"conn_type": "postgres", "host": "db", "port": 5432, "login": "u", '
                                           '"password": "p@ss/w", "schema": "shop", "extra": {"schema": "public"}}')
    source = source_from_uri("src", connection_uri("src"))
    assert source.dsn["host"] == "db" and source.dsn["port"] == 5432 and source.dsn["password"] == "p@ss/w"
    assert source.schema == "public"
    monkeypatch.setenv("AIRFLOW_CONN_SRC", '{"conn_type": "postgres", "host": "db", "extra": '
                                           '"{\\"schema\\": \\"s\\", \\"verify\\": true, \\"ca\\": null}"}')
    assert connection_uri("src") == "postgres://db/?schema=s&verify=true"   # (extra as a string, JSON's spelling)
    monkeypatch.setenv("AIRFLOW_CONN_SRC", '{"conn_type": "postgres", "host": "db", "extra": "[1]"}')
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_SRC: its extra must be a JSON object"):
        connection_uri("src")
    monkeypatch.setenv("AIRFLOW_CONN_SRC", '{"conn_type": "postgres"')
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_SRC is neither a URI nor valid JSON"):
        connection_uri("src")


def test_a_long_chroot_gives_a_short_distinct_deployment_id_that_fits_the_watermark_id_column():
    a = deployment_id("zookeeper://zk:2181/warehouse/deployments/europe-west-1")
    b = deployment_id("zookeeper://zk:2181/warehouse/deployments/europe-west-2")
    assert a != b and len(a) == len(b) == MAX_DEPLOYMENT_ID
    source = MySQLSource("s", "h", 3306, "u", "p", "shop")
    source.deployment = a
    assert len(source.watermark_id("f" * 40)) <= 64  # a dump's slot is a SHA-1; the column is VARCHAR(64)


def _event(table: str, row_id: str) -> ChangeEvent:
    return ChangeEvent("s", table, "u", "p", (row_id,), {"id": row_id, "value": "v"})


def test_a_capture_drops_only_the_watermarks_another_deployment_tagged():
    source = MySQLSource("s", "h", 3306, "u", "p", "shop")
    source.deployment = "blue"
    assert source.watermark_id("sync") == "blue:sync"
    events = [_event(WATERMARK_TABLE, "blue:sync"), _event(WATERMARK_TABLE, "green:sync"),
              _event(WATERMARK_TABLE, "0a1b"), _event("shop.accounts", "green:1")]
    kept = source.own_watermarks(events)
    # Untagged rows predate tags (an in-flight dump of an older version): dropping one would stall it.
    assert [e.after["id"] for e in kept] == ["blue:sync", "0a1b", "green:1"]
    deleted = ChangeEvent("s", WATERMARK_TABLE, "d", "p", ("green:x",), None, before={"id": "green:x"})
    assert source.own_watermarks([deleted]) == []
    source.deployment = None  # a source built by hand: writes and keeps every row as before
    assert source.watermark_id("sync") == "sync" and source.own_watermarks(events) == events


def test_the_sources_page_shows_the_watermark_table_and_the_set_up_order():
    for ddl in (MySQLSource.WATERMARK_DDL, PostgresSource.WATERMARK_DDL):
        assert ddl in SOURCES_PAGE, ddl
    assert "FOR TABLES IN SCHEMA public, TABLE dblog.watermarks" in SOURCES_PAGE
    assert "dblog setup --print-sql" in SOURCES_PAGE and "dblog sync" in SOURCES_PAGE


def test_a_sync_point_of_any_deployment_is_told_from_a_dump_s_watermark():
    """The capture stages a sync point at once (someone waits for it), a dump's watermark with
    its batch."""
    from dblog.capture.capture_loop import is_sync_point

    def write(row_id):
        return ChangeEvent("db", WATERMARK_TABLE, "u", "p", (row_id,), {"id": row_id, "value": "v"})
    assert is_sync_point(write("sync")) and is_sync_point(write("blue:sync"))
    assert not is_sync_point(write("3f2a9c")) and not is_sync_point(write("blue:3f2a9c"))
