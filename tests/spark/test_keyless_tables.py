"""Tables without a primary key: keyed by a NOT NULL unique index, or by the columns a user names."""
from test_merge_converges import merge
from test_repairs import assert_equal, start_capture

from conftest import settle


def make_tables(src) -> tuple[str, str]:
    by_index, by_named = src.table("by_index"), src.table("by_named")
    # A nullable unique index cannot identify a row (NULLs are never equal): the NOT NULL one is taken.
    src.sql(f"CREATE TABLE {by_index} (code VARCHAR(10) NOT NULL, alias VARCHAR(10), n INT, "
            "CONSTRAINT uq_alias UNIQUE (alias), CONSTRAINT uq_code UNIQUE (code))",
            f"CREATE TABLE {by_named} (a INT NOT NULL, b INT NOT NULL, v VARCHAR(20))")
    if src.kind == "postgres":   # PostgreSQL sends an update's old key for the replica identity's columns
        src.sql(f"ALTER TABLE {by_index} REPLICA IDENTITY USING INDEX uq_code",
                f"ALTER TABLE {by_named} REPLICA IDENTITY FULL")
    for i in range(1, 101):
        src.sql(f"INSERT INTO {by_index} (code, alias, n) VALUES (%s, %s, %s)", params=[f"c{i}", f"a{i}", i])
        src.sql(f"INSERT INTO {by_named} (a, b, v) VALUES (%s, %s, %s)", params=[i % 10, i, f"v{i}"])
    return by_index, by_named


def test_tables_keyed_by_a_unique_index_or_named_columns_converge_under_changes_to_their_keys(src, spark, warehouse):
    src.query = "key_columns=by_named.a,by_named.b"
    by_index, by_named = make_tables(src)
    capture = start_capture(src, warehouse)
    src.dblog("dump", "--source", src.source_id, "--table", "by_index", "--table", "by_named", "--chunk-size", "30",
              check=True)
    src.sql(f"UPDATE {by_index} SET n = n + 1 WHERE n < 50", f"UPDATE {by_index} SET code = 'moved' WHERE code = 'c7'",
            f"DELETE FROM {by_index} WHERE code = 'c9'", f"INSERT INTO {by_index} (code, n) VALUES ('new', 0)",
            f"UPDATE {by_named} SET v = 'changed' WHERE a = 3", f"UPDATE {by_named} SET b = b + 1000 WHERE a = 4",
            f"DELETE FROM {by_named} WHERE a = 5")
    settle(src)
    merge(spark, src, warehouse, tables=[by_index, by_named])
    assert_equal(src, warehouse, by_index)
    assert_equal(src, warehouse, by_named)
    status = src.dblog("status", "--source", src.source_id, check=True).stdout
    assert f"{by_index} has no primary key: rows are matched by its unique index uq_code (code)" in status, status
    assert f"{by_named} has no primary key: rows are matched by its key_columns (a, b)" in status, status
    capture.terminate()
    capture.wait()
