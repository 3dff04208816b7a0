"""How a MySQL rows event becomes a change event when a session wrote partial row images, and which
captured tables a statement-logged write names (pure logic; the real binlog: tests/spark/test_repairs.py)."""
import pyarrow as pa
import pytest

from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import Op
from dblog.sources.base import UnreadableEvent
from dblog.sources.mysql import row_event
from dblog.sources.mysql_statements import statement_writes, strip_sql_comments

SCHEMA = TableSchema("shop.items", (Column("id", "bigint", pa.int64()), Column("qty", "int", pa.int64()),
                                    Column("body", "text", pa.string())), ("id",))
ALL = {"id", "qty", "body"}


def test_a_minimal_update_takes_its_key_from_the_before_image_and_lists_what_it_left_out():
    e = row_event("s", SCHEMA, Op.UPDATE, "p", {"id": 1, "qty": None, "body": None}, {"id": None, "qty": 99, "body": None},
                  {"qty", "body"}, {"id", "body"})
    assert e.key == (1,) and e.after["id"] == 1 and e.after["qty"] == 99
    assert e.unchanged == ["body"] and e.old_key is None
    assert e.before is None, "a partial before image must not be staged as a row"


def test_a_full_update_is_staged_whole_with_its_before_image_and_key_change():
    e = row_event("s", SCHEMA, Op.UPDATE, "p", {"id": 1, "qty": 1, "body": "b"}, {"id": 2, "qty": 1, "body": "b"},
                  set(), set())
    assert e.key == (2,) and e.old_key == (1,) and e.unchanged == [] and e.before["body"] == "b"


def test_a_minimal_insert_lists_the_defaulted_columns_it_left_out():
    e = row_event("s", SCHEMA, Op.INSERT, "p", None, {"id": 5, "qty": 1, "body": None}, set(), {"body"})
    assert e.key == (5,) and e.unchanged == ["body"]


def test_a_minimal_delete_needs_only_its_key():
    e = row_event("s", SCHEMA, Op.DELETE, "p", {"id": 5, "qty": None, "body": None}, None, {"qty", "body"}, set())
    assert e.key == (5,) and e.op == Op.DELETE


def test_an_image_without_the_key_stops_the_capture_with_the_fix():
    with pytest.raises(UnreadableEvent, match="binlog_row_image=FULL"):
        row_event("s", SCHEMA, Op.UPDATE, "p", {"id": None, "qty": 1, "body": None},
                  {"id": None, "qty": 2, "body": None}, {"id", "body"}, {"id", "body"})


@pytest.mark.parametrize("query, default, expected", [
    ("INSERT INTO items (id) VALUES (1)", "shop", ["items"]),
    ("update /* hint */ `shop`.`ITEMS` set qty = 1", "", ["items"]),
    ("DELETE FROM other.items WHERE id = 1", "other", []),
    ("INSERT INTO other.x SELECT 1", "shop", []),           # another database's table, from our session
    ("TRUNCATE other.t", "shop", []),
    ("/*!40000 ALTER TABLE items DISABLE KEYS */", "shop", []),
    ("UPDATE items i JOIN orders o ON o.id = i.id SET i.qty = o.qty", "shop", ["items", "orders"]),
    ("TRUNCATE TABLE items", "shop", ["items"]),
    ("SELECT bump_counters()", "shop", ["items", "orders", "other"]),
    ("SELECT bump_counters(1.5)", "shop", ["items", "orders", "other"]),
    ("UPDATE a_view v SET v.qty = 1", "shop", ["items", "orders", "other"]),  # a view: which table is unknown  # a stored function wrote: unknown what
    ("INSERT INTO dblog.watermarks VALUES ('a', 'b', now())", "dblog", []),
    ("BEGIN", "shop", []),
    ("ALTER TABLE items ADD COLUMN x INT", "shop", []),
])
def test_a_statement_in_the_log_names_the_captured_tables_it_may_have_written(query, default, expected):
    assert statement_writes(strip_sql_comments(query).strip(), default, "shop", ["items", "orders", "other"]) == expected


def test_a_minimal_update_of_one_column_of_a_composite_key_moves_the_row():
    schema = TableSchema("shop.pairs", (Column("a", "int", pa.int64()), Column("b", "int", pa.int64()),
                                        Column("v", "text", pa.string())), ("a", "b"))
    e = row_event("s", schema, Op.UPDATE, "p", {"a": 1, "b": 2, "v": None}, {"a": 5, "b": None, "v": None},
                  {"v"}, {"b", "v"})
    assert e.key == (5, 2) and e.old_key == (1, 2) and e.unchanged == ["v"]
