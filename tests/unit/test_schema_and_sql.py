"""Types, key parsing and the generated SQL: values are always bound, identifiers always quoted."""
import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from dblog.model.schema import Column, TableSchema, coerce, decode_key, encode_key, from_json_value, normalize_key
from dblog.sources.base import Dialect
from dblog.sources.mysql import MySQLDialect

S = TableSchema("app.t", (Column("a", "int", pa.int64()), Column("b", "varchar", pa.string()),
                          Column("v", "decimal(5,2)", pa.decimal128(5, 2))), ("a", "b"))


def test_keys_given_as_json_are_typed_by_their_columns():
    assert decode_key([1, "x"], S) == (1, "x")
    assert decode_key(["2", 3], S) == (2, "3")


@pytest.mark.parametrize("bad, message", [
    ([1], "has 1 value(s); app.t has a key of 2 column(s): (a, b)"),
    (["one", "x"], "'one' is not an integer"),
    ([1.5, "x"], "1.5 is not an integer"),
    ([True, "x"], "True is not a int64 value"),
    ([1, {"x": 1}], "is not a scalar"),
])
def test_malformed_keys_are_refused_with_what_is_wrong(bad, message):
    with pytest.raises(ValueError) as exc:
        decode_key(bad, S)
    assert message in str(exc.value)


def test_values_round_trip_through_their_json_form():
    for value, t in [(Decimal("1.10"), pa.decimal128(5, 2)), (b"\x00\x01", pa.binary()),
                     (dt.datetime(2026, 1, 1, 1, 2, 3, 456789), pa.timestamp("us")), (dt.date(2026, 2, 3), pa.date32())]:
        import json
        assert from_json_value(json.loads(encode_key((value,)))[0], t) == value


def test_driver_values_are_coerced_to_the_staged_types():
    assert coerce(b"abc", pa.string()) == "abc"
    assert coerce({"b", "a"}, pa.string()) == "a,b"
    assert coerce(memoryview(b"\x01"), pa.binary()) == b"\x01"
    assert coerce(dt.datetime(2026, 1, 1), pa.timestamp("us", tz="UTC")).tzinfo == dt.UTC
    assert normalize_key((True, b"x"), S) == (1, "x")


def test_hostile_identifiers_are_quoted_and_values_are_bound():
    evil = TableSchema('s.t"; DROP TABLE x; --', (Column('id"`', "int", pa.int64()),), ('id"`',))
    sql, params = Dialect().chunk_query(evil, ("1; DROP",), 10)
    assert sql == ('SELECT "id""`" FROM "s"."t""; DROP TABLE x; --" WHERE "id""`" > %s '
                   'ORDER BY "id""`" LIMIT %s')
    assert params == ["1; DROP", 10]
    sql, _ = MySQLDialect().chunk_query(evil, None, 5)
    assert sql == 'SELECT `id"``` FROM `s`.`t"; DROP TABLE x; --` ORDER BY `id"``` LIMIT %s'


def test_composite_keys_page_with_row_values_between_bounds():
    sql, params = Dialect().chunk_query(S, (1, "a"), 100, upto_key=(9, "z"))
    assert 'WHERE ("a", "b") > (%s, %s) AND ("a", "b") <= (%s, %s) ORDER BY "a", "b" LIMIT %s' in sql
    assert params == [1, "a", 9, "z", 100]
    sql, params = Dialect().keys_query(S, [(1, "a"), (2, "b")])
    assert sql.endswith('WHERE ("a", "b") IN ((%s, %s), (%s, %s)) ORDER BY "a", "b"') and params == [1, "a", 2, "b"]


def test_a_mysql_composite_bound_is_spelled_out_column_by_column_so_it_is_a_key_range():
    sql, params = MySQLDialect().chunk_query(S, (1, "a"), 100, upto_key=(9, "z"))
    assert ("WHERE (`a` > %s OR (`a` = %s AND `b` > %s)) AND (`a` < %s OR (`a` = %s AND `b` <= %s)) "
            "ORDER BY `a`, `b` LIMIT %s") in sql
    assert params == [1, 1, "a", 9, 9, "z", 100]


@pytest.mark.parametrize("dialect", [Dialect(), MySQLDialect()])
def test_a_key_bound_selects_exactly_the_keys_past_it_in_key_order(dialect):
    """Both spellings against every key of a 3-column grid, evaluated by SQLite (which takes
    row values, backquotes and double quotes)."""
    import itertools
    import sqlite3
    keys = list(itertools.product(range(3), repeat=3))
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE t ("a" INT, "b" INT, "c" INT)')
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", keys)
    for bound in keys:
        for op, past in ((">", [k for k in keys if k > bound]), ("<=", [k for k in keys if k <= bound])):
            where, params = dialect.key_bound(("a", "b", "c"), op, bound)
            found = db.execute(f"SELECT a, b, c FROM t WHERE {where.replace('%s', '?')}", params).fetchall()
            assert sorted(found) == past, (op, bound, where)


def test_the_keys_a_table_without_a_primary_key_can_have_are_its_unique_indexes_on_not_null_columns_smallest_first():
    from dblog.sources.base import unique_keys
    rows = [("uq_alias", "alias", "YES"), ("uq_code", "code", "NO"), ("uq_pair", "a", "NO"), ("uq_pair", "b", "NO")]
    assert unique_keys(rows) == [("uq_code", ["code"]), ("uq_pair", ["a", "b"])]
    assert unique_keys([("uq_alias", "alias", "YES")]) == []


def test_key_columns_name_each_table_s_key_in_order_and_a_malformed_item_is_refused():
    import pytest

    from dblog.connections import table_columns
    from dblog.settings import ConfigError
    assert table_columns("c", "key_columns", "events.tenant,events.seq,other.logs.id", "shop") == {
        "shop.events": ["tenant", "seq"], "other.logs": ["id"]}
    with pytest.raises(ConfigError, match="key_columns item 'events' is not table.column"):
        table_columns("c", "key_columns", "events", "shop")
