"""Soft deletes without Spark: what the executors' writer and the merge's commit do to a table
whose deleted rows stay, flagged, and what readers then see."""
from __future__ import annotations

import pyarrow as pa
import pytest
from test_iceberg_warehouse import COLUMNS, row

from dblog.settings import settings
from dblog.warehouse.catalog import BRANCH
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse
from dblog.warehouse.types import DELETED

from iceberg_tables import commit_rows


@pytest.fixture
def wh(tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_SOFT_DELETE_TABLES", "shop.soft")
    return Warehouse(str(tmp_path / "wh"))


def test_the_settings_name_tables_or_every_table():
    tuned = settings({"DBLOG_SOFT_DELETE_TABLES": "shop.a, shop.b", "DBLOG_CHANGE_TABLES": "*"}).warehouse
    assert [tuned.soft_deletes(t) for t in ("shop.a", "shop.b", "shop.c")] == [True, True, False]
    assert tuned.change_table("anything") and not settings({}).warehouse.soft_deletes("shop.a")


def test_a_soft_delete_table_keeps_deleted_rows_on_main_flagged_and_dblog_readers_leave_them_out(wh):
    commit_rows(wh, "src", "shop.soft", [row(1), row(2), row(3)], COLUMNS, ["id"])
    commit_rows(wh, "src", "shop.soft", [row(1), row(3, "p2", note="changed")], COLUMNS, ["id"],
                tombstones=[row(2, "p2")], log_upto="p2")
    table = wh.load("src", "shop.soft")
    assert table.snapshot_by_name(BRANCH) is None, "no tombstone branch: deletes stay on main"
    stored = {r["id"]: (r[DELETED], r["_dblog_op"], r["note"]) for r in table.scan().to_arrow().to_pylist()}
    assert stored == {1: (False, "c", "n1"), 2: (True, "d", "n2"), 3: (False, "c", "changed")}
    assert sorted(wh.keys("src", "shop.soft")) == [(1,), (3,)]
    duck = {r["id"]: r[DELETED] for r in duckdb_read(wh, "src", "shop.soft").to_pylist()}
    assert duck == {1: False, 2: True, 3: False}, "another engine reads the flag as written"


def test_a_table_keeps_the_delete_mode_it_was_created_with_and_a_changed_setting_is_said_with_the_fix(
        wh, monkeypatch, caplog):
    commit_rows(wh, "src", "shop.soft", [row(1)], COLUMNS, ["id"])
    commit_rows(wh, "src", "shop.hard", [row(1)], COLUMNS, ["id"])
    monkeypatch.setenv("DBLOG_SOFT_DELETE_TABLES", "shop.hard")
    for table, soft, says in (("shop.soft", True, "no longer names"), ("shop.hard", False, "names the table")):
        pending = wh.begin("src", table, ["id"], COLUMNS, wh.state("src", table, files=True))
        assert pending.soft_deletes is soft
        assert (DELETED in pa.ipc.read_schema(pa.py_buffer(pending.schema_ipc)).names) is soft
        said = [r.getMessage() for r in caplog.records if table in r.getMessage()]
        assert said and says in said[0] and f"dblog warehouse drop --source src --table {table}" in said[0], said
