"""Tables without a primary key: keyed by a NOT NULL unique index, or by the columns a user names."""
from collections import Counter

from test_merge_converges import merge
from test_repairs import assert_equal, repairs_done, start_capture

from dblog.operations.verify import compare_warehouse
from dblog.warehouse.readers import duckdb_read

from conftest import settle, wait_for


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


def rows_of(src, table: str) -> Counter:
    return Counter(tuple(r) for r in src.sql(f"SELECT at, msg FROM {table}"))


def test_a_table_with_no_key_is_synced_by_whole_table_snapshots_each_replacing_it_in_one_commit(src, spark, warehouse):
    table = src.table("loglines")
    src.sql(f"CREATE TABLE {table} (at INT, msg VARCHAR(20))")
    if src.kind == "postgres":   # a published table without one takes no UPDATE or DELETE
        src.sql(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    for i in range(30):   # duplicates too: without a key, rows are a multiset
        src.sql(f"INSERT INTO {table} (at, msg) VALUES (%s, %s)", params=[i % 7, f"m{i % 5}"])
    capture = start_capture(src, warehouse)
    src.dblog("dump", "--source", src.source_id, "--table", "loglines", "--chunk-size", "8", check=True)
    settle(src)
    (first,) = merge(spark, src, warehouse, tables=[table])
    assert "whole-table snapshot" in first.note and first.rows == 30, first

    def stored() -> Counter:
        return Counter((r["at"], r["msg"]) for r in warehouse.read(src.source_id, table, ["at", "msg"]).to_pylist())
    assert stored() == rows_of(src, table)
    before = warehouse.load(src.source_id, table).current_snapshot().snapshot_id
    # Its changes are not staged (no row of it can be matched): the table waits for the next snapshot.
    src.sql(f"DELETE FROM {table} WHERE at = 3", f"UPDATE {table} SET msg = 'changed' WHERE at = 1",
            f"INSERT INTO {table} (at, msg) VALUES (99, 'new'), (99, 'new')")
    settle(src)
    (idle,) = merge(spark, src, warehouse, tables=[table])
    assert idle.commits == 0 and stored() != rows_of(src, table)
    diff = compare_warehouse(src.source(), warehouse, table)
    assert not diff.equal and diff.repair() == {"tables": [table], "keys": None}, diff
    said = src.dblog("verify", "--source", src.source_id, "--table", "loglines", env={"DBLOG_WAREHOUSE": warehouse.root})
    assert said.returncode == 1 and "DRIFT" in said.stdout and "(no key: compared whole)" in said.stdout, said.stdout
    src.dblog("dump", "--source", src.source_id, "--table", "loglines", check=True)
    (second,) = merge(spark, src, warehouse, tables=[table])
    t = warehouse.load(src.source_id, table)
    assert second.commits == 1 and t.current_snapshot().parent_snapshot_id == before, "one commit replaced it"
    assert stored() == rows_of(src, table) and compare_warehouse(src.source(), warehouse, table).equal
    duck = Counter((r["at"], r["msg"]) for r in duckdb_read(warehouse, src.source_id, table).to_pylist())
    assert duck == rows_of(src, table)
    status = src.dblog("status", "--source", src.source_id, check=True).stdout
    assert f"{table} has no key at all: each dump replaces its warehouse table whole" in status, status
    # A key added later: the capture has the table dumped under it, and the merge rebuilds it keyed.
    src.sql(f"ALTER TABLE {table} ADD COLUMN id INT AUTO_INCREMENT PRIMARY KEY" if src.kind == "mariadb" else
            f"ALTER TABLE {table} ADD COLUMN id SERIAL PRIMARY KEY")
    src.sql(f"INSERT INTO {table} (at, msg) VALUES (100, 'keyed')")   # (PostgreSQL tells on a row change)
    wait_for(lambda: repairs_done(src), 120, what="the dump under the new key")
    settle(src)
    rebuilt = merge(spark, src, warehouse, tables=[table])
    assert "to (id)), replacing every row" in rebuilt[0].note, rebuilt
    assert_equal(src, warehouse, table)
    capture.terminate()
    capture.wait()
