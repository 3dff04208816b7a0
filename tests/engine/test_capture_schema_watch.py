"""What the capture does with the source's schema: a table without any key has its changes left
out, said where the user looks, and the capture goes on; a change made while no capture ran is
found against the schema the staged log holds."""
from dblog.stagedlog import whole_tables

from conftest import settle, wait_for


def test_a_write_to_a_table_without_a_key_is_not_staged_and_the_capture_goes_on(src):
    capture = src.start_capture()
    settle(src)
    keyless, keyed = src.table("nokey"), src.table("keyed")
    src.sql(f"CREATE TABLE {keyless} (a INT, b TEXT)", f"INSERT INTO {keyless} VALUES (1, 'x')",
            f"CREATE TABLE {keyed} (id INT PRIMARY KEY)", f"INSERT INTO {keyed} VALUES (1)")
    settle(src)
    staged = src.staged()
    assert staged.read_log(src.source_id, keyed).num_rows == 1
    assert not staged.segments(src.source_id, keyless)
    # ... and, new in the captured schema, it is read whole (DBLOG_AUTO_DUMP_NEW_TABLES).
    wait_for(lambda: whole_tables.newest(staged, src.source_id, keyless) is not None, 60,
             what="the new keyless table's whole-table snapshot")
    assert whole_tables.newest(staged, src.source_id, keyless).rows == 1
    capture.terminate()
    capture.wait()
    log = capture.stderr.read()
    assert f"table {keyless} has no primary key and no unique index on NOT NULL columns" in log
    assert "Its changes are not staged" in log


def test_a_schema_change_made_while_no_capture_ran_is_found_against_the_staged_log_and_asks_for_a_re_read(src):
    from dblog.snapshot.repair import pending

    table = src.table("items")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, qty INT)", f"INSERT INTO {table} VALUES (1, 1), (2, 2)")
    capture = src.start_capture("--no-repair")
    settle(src)
    src.sql(f"UPDATE {table} SET qty = 3 WHERE id = 1")   # staged with the table's schema
    settle(src)
    capture.terminate()
    capture.wait()
    # A row written before the change: read again at restart, it meets the catalog past the change.
    src.sql(f"INSERT INTO {table} VALUES (9, 9)")
    src.sql(f"ALTER TABLE {table} ADD COLUMN tier VARCHAR(8) DEFAULT 'gold'")   # existing rows filled, no row events
    src.sql(f"UPDATE {table} SET qty = 4 WHERE id = 2")   # PostgreSQL: its Relation message comes with this row
    restarted = src.spawn("capture", "--source", src.source_id, "--no-repair")
    settle(src)
    with src.store() as store:
        asked = [r for r in pending(store, src.source_id) if r.table == table]
    assert asked and asked[0].kind == "table" and "column tier added with default" in asked[0].reason, asked
    restarted.terminate()
    restarted.wait()


def test_a_table_dropped_and_created_again_is_read_whole_even_when_the_capture_reads_both_late(src):
    from dblog.snapshot.repair import pending

    table = src.table("items")
    create = f"CREATE TABLE {table} (id INT PRIMARY KEY, qty INT)"
    src.sql(create, f"INSERT INTO {table} VALUES (1, 1), (2, 2)")
    capture = src.start_capture("--no-repair")
    settle(src)
    src.sql(f"UPDATE {table} SET qty = 3 WHERE id = 1")
    settle(src)
    if src.kind == "mariadb":   # read late: the catalog has the new table when the DROP is read
        capture.terminate()
        capture.wait()
    src.sql(f"DROP TABLE {table}", create, f"INSERT INTO {table} VALUES (5, 5)")
    if src.kind == "mariadb":
        capture = src.spawn("capture", "--source", src.source_id, "--no-repair")
    settle(src)
    with src.store() as store:
        asked = [r for r in pending(store, src.source_id) if r.table == table]
    assert asked and asked[0].kind == "table" and ("re-created" in asked[0].reason or
                                                   "created again" in asked[0].reason), asked
    capture.terminate()
    capture.wait()


def test_a_column_dropped_and_added_again_under_its_name_asks_for_a_re_read(src):
    from dblog.snapshot.repair import pending

    table = src.table("items")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    capture = src.start_capture("--no-repair")
    settle(src)
    src.sql(f"UPDATE {table} SET v = 'c' WHERE id = 1")
    settle(src)
    # Same name, same type: the catalog looks as before, while every value is gone.
    src.sql(f"ALTER TABLE {table} DROP COLUMN v, ADD COLUMN v VARCHAR(10)", f"UPDATE {table} SET v = 'd' WHERE id = 1")
    settle(src)
    with src.store() as store:
        asked = [r for r in pending(store, src.source_id) if r.table == table]
    assert asked and "column(s) v gone and v added" in asked[0].reason, asked
    capture.terminate()
    capture.wait()
