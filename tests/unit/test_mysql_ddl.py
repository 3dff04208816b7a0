"""What a DDL statement in the binlog did to the captured tables, read from its text (the catalog
may be past it when the capture is behind)."""
import pytest

from dblog.sources.mysql_statements import read_ddl

TABLES = {"shop.orders", "shop.items", "shop._orders_gho", "shop.new"}


def ddl(query: str, default: str = "shop"):
    return read_ddl(query, default, "shop", TABLES)


@pytest.mark.parametrize("query, named, replaced, renamed", [
    ("ALTER TABLE orders ADD COLUMN c INT", {"orders"}, set(), set()),
    ("ALTER TABLE `shop`.`orders` RENAME COLUMN a TO b", {"orders"}, set(), set()),
    ("ALTER TABLE orders RENAME\n   COLUMN a TO b", {"orders"}, set(), set()),
    ("ALTER TABLE orders RENAME INDEX i TO j", {"orders"}, set(), set()),
    ("ALTER TABLE orders CHANGE COLUMN a b INT", {"orders"}, set(), set()),
    ("ALTER TABLE orders RENAME TO new", {"orders", "new"}, set(), {"orders", "new"}),
    ("RENAME TABLE orders TO _orders_old, _orders_gho TO orders", {"orders", "_orders_gho"}, set(),
     {"orders", "_orders_gho"}),
    ("RENAME TABLE tenant7.orders TO tenant7.orders_old", set(), set(), set()),   # another database's
    ("DROP TABLE IF EXISTS orders, items", {"orders", "items"}, {"orders", "items"}, set()),
    ("CREATE OR REPLACE TABLE orders (id INT PRIMARY KEY)", {"orders"}, {"orders"}, set()),
    ("CREATE TABLE new LIKE orders", {"new", "orders"}, {"new"}, set()),
    ("CREATE INDEX i ON orders (a)", {"orders"}, set(), set()),
    ("DROP INDEX i ON orders", {"orders"}, set(), set()),
])
def test_a_ddl_statement_names_what_it_touched_replaced_and_renamed(query, named, replaced, renamed):
    found = ddl(query)
    assert found is not None
    assert found.named == {f"shop.{t}" for t in named}
    assert found.replaced == {f"shop.{t}" for t in replaced}
    assert found.renamed == {f"shop.{t}" for t in renamed}


def test_columns_dropped_and_partition_writes_are_read_from_the_statement():
    assert ddl("ALTER TABLE orders DROP COLUMN v, ADD COLUMN v INT").readded == {"v"}
    assert ddl("ALTER TABLE orders DROP INDEX i, DROP PRIMARY KEY, DROP FOREIGN KEY f").readded == frozenset()
    assert ddl("ALTER TABLE orders TRUNCATE PARTITION p1").partition_write
    assert not ddl("ALTER TABLE orders ADD PARTITION (PARTITION p9 VALUES LESS THAN (9))").partition_write


def test_a_statement_that_is_no_schema_ddl_is_none():
    assert ddl("INSERT INTO orders VALUES (1)") is None and ddl("OPTIMIZE TABLE orders") is None


def test_columns_renamed_are_read_from_the_statement_in_its_order():
    assert ddl("ALTER TABLE orders RENAME COLUMN a TO b").renamed_columns == (("a", "b"),)
    assert ddl("ALTER TABLE orders CHANGE COLUMN `a``x` b INT, RENAME COLUMN IF EXISTS c TO `d`").renamed_columns == \
        (("a`x", "b"), ("c", "d"))
    assert ddl("ALTER TABLE orders CHANGE a a BIGINT").renamed_columns == ()   # a retype only
    assert ddl("ALTER TABLE orders RENAME INDEX i TO j").renamed_columns == ()
