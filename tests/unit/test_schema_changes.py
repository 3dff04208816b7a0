"""Which schema changes rewrite a table's existing rows without row events (so the table is re-read)."""
import pyarrow as pa
import pytest

from dblog.model.schema import Column, TableSchema
from dblog.model.schema_changes import diff, widens

ID = Column("id", "int(11)", pa.int64(), False)


def table(*columns: Column, key=("id",)) -> TableSchema:
    return TableSchema("shop.t", (ID, *columns), key)


def col(name, source_type, arrow=None, nullable=True, default=None):
    return Column(name, source_type, arrow or pa.string(), nullable, default)


NOTE = col("note", "varchar(20)")
QTY = col("qty", "int(11)", pa.int64())


@pytest.mark.parametrize("before, after, rereads", [
    (table(NOTE), table(NOTE, col("tier", "varchar(8)")), False),                          # nullable, no default
    (table(NOTE), table(NOTE, col("tier", "varchar(8)", default="'gold'")), True),         # filled with a default
    (table(NOTE), table(NOTE, col("tier", "int(11)", pa.int64(), nullable=False)), True),  # NOT NULL: zero-filled
    (table(NOTE), table(NOTE, col("at", "timestamp", default="current_timestamp()")), True),
    (table(NOTE), table(NOTE, col("twice", "int(11)", pa.int64(), default="generated: qty * 2")), True),
    (table(NOTE, QTY), table(QTY), False),                                                 # a drop
    (table(NOTE), table(col("remark", "varchar(20)")), True),                              # a rename
    (table(QTY), table(col("qty", "bigint(20)", pa.int64())), False),                      # INT -> BIGINT
    (table(col("qty", "bigint(20)", pa.int64())), table(QTY), True),                       # BIGINT -> INT: clamped
    (table(NOTE), table(col("note", "varchar(40)")), False),                               # VARCHAR(n) -> (m > n)
    (table(NOTE), table(col("note", "varchar(5)")), True),                                 # truncated
    (table(NOTE), table(col("note", "text")), False),
    (table(NOTE), table(col("note", "char(20)")), True),                                   # CHAR strips spaces
    (table(col("p", "decimal(10,2)", pa.decimal128(10, 2))),
     table(col("p", "decimal(12,2)", pa.decimal128(12, 2))), False),                       # precision up
    (table(col("p", "decimal(10,2)", pa.decimal128(10, 2))),
     table(col("p", "decimal(10,3)", pa.decimal128(10, 3))), True),                        # scale: a new field
    (table(col("f", "float", pa.float64())), table(col("f", "double", pa.float64())), False),
    (table(NOTE), table(col("note", "int(11)", pa.int64())), True),                        # VARCHAR -> INT
    (table(QTY), table(col("qty", "varchar(20)")), True),                                  # INT -> VARCHAR
    (table(NOTE), table(col("note", "varchar(20)", nullable=False)), True),                # NULLs may become ''
    (table(col("note", "varchar(20)", nullable=False)), table(NOTE), False),
    (table(NOTE), table(col("note", "varchar(20)", default="'x'")), False),                # a new default only
    (table(NOTE), table(NOTE, key=("id", "note")), True),                                  # a new primary key
])
def test_a_change_asks_for_the_table_to_be_re_read_only_when_it_changed_existing_rows_values(before, after, rereads):
    change = diff(before, after)
    assert bool(change.rewrites_rows()) is rereads, change.describe()


def test_a_staged_schema_s_unknown_nullability_is_no_change():
    staged = table(col("note", "varchar(20)", nullable=None))
    assert not diff(staged, table(col("note", "varchar(20)", nullable=False))).any
    assert not diff(staged, table(NOTE)).any


def test_the_reason_names_the_columns_and_what_happened():
    why = diff(table(NOTE, QTY), table(col("remark", "varchar(20)"), col("qty", "varchar(9)"),
                                       col("tier", "int(11)", pa.int64(), default="1"))).rewrites_rows()
    text = "; ".join(why)
    assert "tier added with default 1" in text and "note gone and remark" in text and \
        "qty converted from int(11) to varchar(9)" in text


@pytest.mark.parametrize("old, new, promotes", [
    ("int", "bigint", True), ("int32", "int64", True), ("bigint", "int", False), ("float", "double", True),
    ("decimal(10,2)", "decimal(12,2)", True), ("decimal128(10, 2)", "decimal128(12, 2)", True),
    ("decimal(10,2)", "decimal(10,3)", False), ("string", "bigint", False), ("bigint", "string", False),
    ("string", "string", True),
])
def test_the_warehouse_widens_in_place_only_what_iceberg_promotes(old, new, promotes):
    assert widens(old, new) is promotes


@pytest.mark.parametrize("before, after, rereads", [
    (col("at", "datetime", pa.timestamp("us")), col("at", "datetime(6)", pa.timestamp("us")), False),
    (col("at", "datetime(6)", pa.timestamp("us")), col("at", "datetime", pa.timestamp("us")), True),   # rounded
    (col("e", "enum('a','b')"), col("e", "enum('a','b','c')"), False),
    (col("e", "enum('a','b')"), col("e", "enum('a','bc')"), True),
    (col("p", "decimal(10,2) unsigned", pa.decimal128(10, 2)),
     col("p", "decimal(12,2) unsigned", pa.decimal128(12, 2)), False),
    (col("v", "character varying"), col("v", "text"), False),                 # PostgreSQL
])
def test_widenings_of_time_precision_enum_members_unsigned_decimals_and_postgres_text_keep_values(
        before, after, rereads):
    assert bool(diff(table(before), table(after)).rewrites_rows()) is rereads


def test_a_column_made_not_null_is_re_read_only_where_the_server_may_have_filled_its_nulls():
    change = diff(table(NOTE), table(col("note", "varchar(20)", nullable=False)))
    assert change.rewrites_rows(not_null_fills=True) and not change.rewrites_rows(not_null_fills=False)


def test_a_column_dropped_and_added_again_under_its_name_is_re_read_by_its_ident_or_the_statement():
    old_v, new_v = col("v", "varchar(10)"), col("v", "varchar(10)")
    assert not diff(table(old_v), table(new_v)).rewrites_rows()
    assert diff(table(old_v), table(new_v), readded=frozenset({"v"})).rewrites_rows()       # MySQL: the statement
    pg_old = Column("v", "character varying", pa.string(), True, None, 2)
    pg_new = Column("v", "character varying", pa.string(), True, None, 4)                  # PostgreSQL: a new attnum
    assert diff(table(pg_old), table(pg_new)).rewrites_rows()
    assert not diff(table(pg_old), table(pg_old)).any


def test_a_rename_the_source_names_is_a_rename_not_a_re_read_and_a_key_column_renamed_is_no_new_key():
    note, remark = Column("note", "varchar(20)", pa.string(), True), Column("remark", "varchar(20)", pa.string(), True)
    # MariaDB: the statement names it; its case may differ from the catalog's.
    change = diff(table(note), table(remark), renamed=(("NOTE", "Remark"),))
    assert change.renamed == (("note", "remark"),) and not change.added and not change.dropped
    assert not change.rewrites_rows() and change.any
    # PostgreSQL: the attnum is the column's, whatever its name.
    pg = [Column(n, "character varying", pa.string(), True, None, 2) for n in ("note", "remark")]
    assert diff(table(pg[0]), table(pg[1])).renamed == (("note", "remark"),)
    # A rename that also narrows the type converts the values: re-read.
    narrowed = diff(table(note), table(Column("remark", "varchar(5)", pa.string(), True)), renamed=(("note", "remark"),))
    assert narrowed.renamed and "converted" in " ".join(narrowed.rewrites_rows())
    key = TableSchema("shop.t", (Column("code", "int", pa.int64(), False),), ("code",))
    moved = TableSchema("shop.t", (Column("sku", "int", pa.int64(), False),), ("sku",))
    assert not diff(key, moved, renamed=(("code", "sku"),)).key_changed
    assert diff(key, moved).key_changed   # unnamed: a dropped key column and a new one


def test_a_rename_without_a_name_for_it_stays_a_drop_and_an_add_that_re_reads_the_rows():
    note, remark = col("note", "varchar(20)"), col("remark", "varchar(20)")
    change = diff(table(note), table(remark))
    assert not change.renamed and change.rewrites_rows()
    # A name the statement gives that the new catalog no longer has (renamed again since): not followed.
    assert not diff(table(note), table(col("later", "varchar(20)")), renamed=(("note", "remark"),)).renamed


def test_a_renamed_name_taken_again_in_the_same_statement_or_a_swap_is_re_read_not_followed():
    a, b, a2 = col("a", "varchar(20)"), col("b", "varchar(20)"), col("a", "int(11)", pa.int64())
    again = diff(table(a), table(b, a2), renamed=(("a", "b"),))   # RENAME COLUMN a TO b, ADD a INT
    assert not again.renamed and again.rewrites_rows()
    swap = diff(table(a, b), table(col("b", "varchar(20)"), col("a", "varchar(20)")), renamed=(("a", "b"), ("b", "a")))
    assert not swap.renamed and swap.rewrites_rows()
