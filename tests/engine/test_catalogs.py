"""The Iceberg catalog is configuration: the same warehouse on the SQL catalog in PostgreSQL (the
tables of Iceberg Java's JDBC catalog, which Spark and Trino read) as on the default SQLite file."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from dblog.warehouse import catalog
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse

from conftest import ADMIN
from iceberg_tables import commit_rows

COLUMNS = [("id", "bigint"), ("note", "string")]


@pytest.fixture
def postgres_catalog(services, monkeypatch):
    """A database of its own on the local PostgreSQL, dropped afterwards."""
    name = f"iceberg_{uuid.uuid4().hex[:8]}"
    server = ADMIN["postgres"].replace("postgres://", "postgresql+psycopg2://").rsplit("/", 1)[0]
    admin = create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    monkeypatch.setenv("DBLOG_ICEBERG_CATALOG", f"{server}/{name}")
    yield f"{server}/{name}"
    catalog._load.cache_clear()
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()


def test_a_postgresql_catalog_holds_the_tables_in_the_jdbc_catalogs_own_table(postgres_catalog, tmp_path):
    warehouse = Warehouse(str(tmp_path / "wh"))
    name = 'shop.we"ird ü'
    commit_rows(warehouse, "dblog_pg", name, [{"id": 1, "note": "a", "_dblog_position": "p1"}], COLUMNS, ["id"])
    commit_rows(warehouse, "dblog_pg", name, [{"id": 2, "note": "b", "_dblog_position": "p2"}], COLUMNS, ["id"],
                bucket=1)
    assert not (tmp_path / "wh" / "catalog.db").exists(), "the SQLite default was used"
    with create_engine(postgres_catalog).connect() as conn:
        rows = conn.execute(text("SELECT catalog_name, table_namespace, table_name, metadata_location "
                                 "FROM iceberg_tables")).all()
    assert [r[:3] for r in rows] == [("dblog", "dblog_pg", name)]
    assert rows[0][3] == warehouse.load("dblog_pg", name).metadata_location, "the catalog row is the current snapshot"
    assert warehouse.tables("dblog_pg") == [name] and sorted(warehouse.keys("dblog_pg", name)) == [(1,), (2,)]
    assert sorted(duckdb_read(warehouse, "dblog_pg", name)["id"].to_pylist()) == [1, 2]
