"""Schema churn with no drift and no hand work: each change the warehouse follows, and a change
that rewrote existing rows without row events re-reads the table by itself (a repair dump)."""
import threading

from test_merge_converges import merge
from test_repairs import assert_equal, repairs_done, start_capture

from conftest import settle, wait_for


def ddl(src, table: str, change: str) -> str:
    """One schema change, as each server spells it."""
    mysql = src.kind == "mariadb"
    return f"ALTER TABLE {table} " + {
        "add_default": "ADD COLUMN tier VARCHAR(8) DEFAULT 'gold'",
        "add_not_null": "ADD COLUMN flag INT NOT NULL DEFAULT 1",
        "add_nullable": "ADD COLUMN spare VARCHAR(8)",
        "rename": "RENAME COLUMN body TO remark",
        "convert": "MODIFY qty VARCHAR(20)" if mysql else "ALTER COLUMN qty TYPE VARCHAR(20)",
        "widen": "MODIFY d BIGINT DEFAULT 7" if mysql else "ALTER COLUMN d TYPE BIGINT",
        "drop": "DROP COLUMN spare",
    }[change]


class Writer(threading.Thread):
    """Updates and inserts through every change, with statements valid before and after each
    (`bodies`: inserted rows have a `body` of their own, for when it becomes the key)."""

    def __init__(self, src, table: str, bodies: bool = False):
        super().__init__(daemon=True)
        self.src, self.table, self.stop, self.writes, self.bodies = src, table, threading.Event(), 0, bodies

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            self.src.sql(f"UPDATE {self.table} SET d = d + 1 WHERE id = %s", params=[i % 150 + 1])
            if i % 5 == 0 and self.bodies:
                self.src.sql(f"INSERT INTO {self.table} (id, body, d) VALUES (%s, %s, %s)",
                             params=[1000 + i, f"new-{i}", i])
            elif i % 5 == 0:
                self.src.sql(f"INSERT INTO {self.table} (id, d) VALUES (%s, %s)", params=[1000 + i, i])
            self.writes += 1


def make_items(src, rows: int) -> str:
    t = src.table("items")
    src.sql(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, qty INT, body VARCHAR(40), d INT DEFAULT 7)")
    src.sql(f"INSERT INTO {t} (id, qty, body) " + (
        f"SELECT seq, seq, CONCAT('body ', seq) FROM {t.rpartition('.')[0]}.seq_1_to_{rows}" if src.kind == "mariadb" else
        f"SELECT g, g, 'body ' || g FROM generate_series(1, {rows}) g"))
    return t


def merged_items(src, spark, warehouse, rows: int):
    """The items table dumped and merged, and the capture running."""
    table = make_items(src, rows)
    capture = start_capture(src, warehouse)
    src.dblog("dump", "--source", src.source_id, "--table", "items", check=True)
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    return table, capture


def test_every_schema_change_under_writes_ends_with_the_warehouse_equal_to_the_source_and_no_manual_step(
        src, spark, warehouse):
    table, capture = merged_items(src, spark, warehouse, rows=300)
    writer = Writer(src, table)
    writer.start()
    notes: list[str] = []
    for change in ("add_default", "add_not_null", "add_nullable", "rename", "convert", "widen", "drop"):
        src.sql(ddl(src, table, change))
        wait_for(lambda n=writer.writes: writer.writes > n + 3, 30, what="writes after the change")
        notes += [r.note for r in merge(spark, src, warehouse, tables=[table])]   # between changes, as in production
        # A conversion rebuilds the table in one commit: until then it stays as it was, never half null.
        qty = warehouse.read(src.source_id, table, ["id", "qty"]).to_pydict()
        assert all(q is not None for i, q in zip(qty["id"], qty["qty"]) if i <= 300), change
    writer.stop.set()
    writer.join()
    # Rows changed without row events (the default, NOT NULL, rename, conversion) are re-read by
    # the repairs the capture asked for by itself.
    wait_for(lambda: repairs_done(src), 180, what="the schema changes' repair dumps")
    settle(src)
    notes += [r.note for r in merge(spark, src, warehouse, tables=[table])]
    assert any("rebuilt (its key" not in n and "column qty changed type from bigint to string" in n and "rebuilt" in n
               for n in notes), notes
    assert_equal(src, warehouse, table)
    t = warehouse.load(src.source_id, table)
    fields = {f.name: str(f.field_type) for f in t.schema().fields}
    assert {"tier", "flag", "remark"} <= set(fields) and not {"body", "spare"} & set(fields), fields
    assert fields["qty"] == "string" and fields["d"] == "long"
    # The column dropped from the current schema is still in older snapshots.
    first = t.snapshots()[0]
    assert "body" in {f.name for f in t.schemas()[t.snapshot_by_id(first.snapshot_id).schema_id].fields}
    capture.terminate()
    capture.wait()
    log = capture.stderr.read()
    assert f"the schema of {table} changed" in log and "converted from" in log, log[-3000:]


def test_a_renamed_column_keeps_its_field_and_every_row_s_value_with_no_re_read(src, spark, warehouse):
    """One merge spans the renames (a key column's too): events before them name the old columns,
    events after the new; a key update before them still removes its old key."""
    from dblog.coordination import store as paths
    from dblog.snapshot.repair import repair_dumps
    from dblog.warehouse.readers import duckdb_read
    table, capture = merged_items(src, spark, warehouse, rows=60)
    ids = {n: warehouse.load(src.source_id, table).schema().find_field(n).field_id for n in ("id", "body")}
    src.sql(f"UPDATE {table} SET body = CONCAT('before ', id) WHERE id <= 10" if src.kind == "mariadb" else
            f"UPDATE {table} SET body = 'before ' || id WHERE id <= 10")
    src.sql(f"UPDATE {table} SET id = 900 WHERE id = 20")   # a key update: its old key is a tombstone
    settle(src)   # read before the renames (a capture behind them finds PostgreSQL's catalog past them: a re-read)
    if src.kind == "mariadb":   # one statement: a capture behind a later DDL sees the catalog past it
        src.sql(f"ALTER TABLE {table} RENAME COLUMN body TO remark, CHANGE id item_id BIGINT NOT NULL")
    else:
        src.sql(ddl(src, table, "rename"), f"ALTER TABLE {table} RENAME COLUMN id TO item_id")
    src.sql(f"UPDATE {table} SET remark = 'after' WHERE item_id BETWEEN 5 AND 15")
    src.sql(f"INSERT INTO {table} (item_id, qty, remark) VALUES (500, 1, 'new row')")
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    t = warehouse.load(src.source_id, table)
    assert {n: t.schema().find_field(n).field_id for n in ("item_id", "remark")} == {"item_id": ids["id"],
                                                                                     "remark": ids["body"]}
    assert_equal(src, warehouse, table)   # rows the log never touched since keep their values under the new name
    with src.store() as store:
        assert not repair_dumps(store, src.source_id) and not store.children(paths.repairs_path(src.source_id))
    duck = {r["item_id"]: r["remark"] for r in duckdb_read(warehouse, src.source_id, table).to_pylist()}
    assert duck[1] == "before 1" and duck[12] == "after" and duck[40] == "body 40" and duck[500] == "new row"
    assert 20 not in duck and duck[900] == "body 20"
    if src.kind == "mariadb":   # (PostgreSQL tells a rename with the table's next row change)
        src.sql(f"ALTER TABLE {table} RENAME COLUMN remark TO note")   # and no row changes after it
        settle(src)
        merge(spark, src, warehouse, tables=[table])
        assert warehouse.load(src.source_id, table).schema().find_field("note").field_id == ids["body"]
        assert_equal(src, warehouse, table)
    capture.terminate()
    capture.wait()
    assert "renamed remark" in capture.stderr.read()


def test_a_column_renamed_and_one_converted_while_a_dump_reads_the_table_converge_with_no_manual_step(
        src, spark, warehouse):
    """The dump's chunks span both changes: the conversion rebuilds the table from the repair dump
    the capture asks for, and the renamed field keeps its id through it."""
    table, capture = merged_items(src, spark, warehouse, rows=600)
    body_id = warehouse.load(src.source_id, table).schema().find_field("body").field_id
    staged = src.staged()
    before = len(staged.chunk_files(src.source_id, table))
    dumping = src.spawn("dump", "--source", src.source_id, "--table", "items", "--chunk-size", "40", "--delay", "0.1")
    wait_for(lambda: len(staged.chunk_files(src.source_id, table)) >= before + 3, 60, what="3 chunks")
    src.sql(ddl(src, table, "rename"))
    src.sql(f"UPDATE {table} SET remark = 'renamed', d = d + 1 WHERE id % 9 = 0")
    src.sql(ddl(src, table, "convert"))
    src.sql(f"UPDATE {table} SET qty = 'q' WHERE id % 11 = 0")
    assert dumping.wait(180) == 0, dumping.stderr.read()
    wait_for(lambda: repairs_done(src), 180, what="the conversion's repair dump")
    settle(src)
    notes = [r.note for r in merge(spark, src, warehouse, tables=[table])]
    assert any("rebuilt (column qty changed type" in n for n in notes), notes
    assert_equal(src, warehouse, table)
    t = warehouse.load(src.source_id, table)
    assert t.schema().find_field("remark").field_id == body_id and str(t.schema().find_field("qty").field_type) == "string"
    capture.terminate()
    capture.wait()


def test_a_table_created_or_renamed_while_the_capture_runs_is_dumped_by_itself(src, spark, warehouse):
    capture = start_capture(src, warehouse)
    settle(src)   # the capture is streaming: the tables below are created after it started
    created, old, renamed = src.table("created"), src.table("before_rename"), src.table("renamed")
    src.sql(f"CREATE TABLE {old} (id INT PRIMARY KEY, v VARCHAR(10))")
    src.sql(f"INSERT INTO {old} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    src.sql(f"CREATE TABLE {created} (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO {created} VALUES (1, 'x')")
    settle(src)
    # Its rows are in no log under the new name.
    src.sql(f"ALTER TABLE {old} RENAME TO {renamed if src.kind == 'mariadb' else renamed.rpartition('.')[2]}")
    src.sql(f"UPDATE {renamed} SET v = 'B' WHERE id = 2")
    try:
        wait_for(lambda: repairs_done(src, at_least=2), 120, what="the new tables' dumps")
    except AssertionError:
        capture.terminate()
        raise AssertionError(capture.stderr.read()[-5000:]) from None
    settle(src)
    merge(spark, src, warehouse, tables=[created, renamed])
    assert_equal(src, warehouse, created)
    assert_equal(src, warehouse, renamed)
    capture.terminate()
    capture.wait()
    assert "DBLOG_AUTO_DUMP_NEW_TABLES" in capture.stderr.read()


def test_a_table_whose_primary_key_changed_under_writes_is_rebuilt_under_the_new_one_in_one_commit(src, spark,
                                                                                                  warehouse):
    table, capture = merged_items(src, spark, warehouse, rows=200)
    writer = Writer(src, table, bodies=True)
    writer.start()
    pk = "DROP PRIMARY KEY" if src.kind == "mariadb" else f"DROP CONSTRAINT {table.rpartition('.')[2]}_pkey"
    src.sql(f"ALTER TABLE {table} MODIFY body VARCHAR(40) NOT NULL" if src.kind == "mariadb" else
            f"ALTER TABLE {table} ALTER COLUMN body SET NOT NULL")
    src.sql(f"ALTER TABLE {table} {pk}, ADD PRIMARY KEY (body)")
    # An update that moves a row under the new key: under the old one it stayed the same row.
    src.sql(f"UPDATE {table} SET body = 'moved' WHERE id = 5")
    wait_for(lambda n=writer.writes: writer.writes > n + 3, 30, what="writes after the change")
    merges = merge(spark, src, warehouse, tables=[table])   # waits for the full dump, or rebuilds
    writer.stop.set()
    writer.join()
    wait_for(lambda: repairs_done(src), 180, what="the key change's full dump")
    settle(src)
    merges += merge(spark, src, warehouse, tables=[table])
    assert any("rebuilt (its key changed from (id) to (body))" in r.note for r in merges), [r.note for r in merges]
    t = warehouse.load(src.source_id, table)
    assert t.properties["dblog.key"] == '["body"]'
    assert_equal(src, warehouse, table)
    stored = warehouse.read(src.source_id, table, ["body"])["body"].to_pylist()
    assert "moved" in stored and "body 5" not in stored
    capture.terminate()
    capture.wait()
