"""Never silent: rows the log does not describe in full are repaired, never staged or merged as
if they were whole (partial MySQL row images, statement-logged writes, PostgreSQL TOAST)."""
import os
import threading

import pyarrow.parquet as pq
import pytest
from test_merge_converges import merge

from dblog.operations.verify import compare_warehouse
from dblog.snapshot.dump import dump_status
from dblog.snapshot.repair import repair_dumps, waiting

from conftest import settle, wait_for, warehouse_table


def make_items(src, rows: int = 20, body_chars: int = 0) -> str:
    """A table with a key, a counter, a text body (TOASTed when long) and a column with a default."""
    t = src.table("items")
    src.sql(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, qty INT, body TEXT, d INT DEFAULT 7)")
    for i in range(1, rows + 1):
        body = os.urandom(body_chars // 2).hex() if body_chars else f"body {i}"
        src.sql(f"INSERT INTO {t} (id, qty, body) VALUES (%s, %s, %s)", params=[i, i, body])
    return t


def start_capture(src, warehouse, *args):
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    return src.spawn("capture", "--source", src.source_id, *args, env={"DBLOG_WAREHOUSE": warehouse.root})


def repairs_done(src, at_least: int = 1) -> bool:
    from kazoo.exceptions import NoNodeError
    with src.store() as store:
        ids = repair_dumps(store, src.source_id)
        try:
            return len(ids) >= at_least and all(dump_status(store, src.source_id, d)["state"] == "done" for d in ids)
        except NoNodeError:   # a landed repair's record removed while it was read: ask again
            return False


def assert_equal(src, warehouse, table):
    diff = compare_warehouse(src.source(), warehouse, table)
    assert diff.equal, f"{len(diff.missing)} missing, {len(diff.extra)} extra, {len(diff.different)} different: {diff.keys()[:5]}"


def staged_keys(src, table) -> list:
    staged = src.staged()
    return [k for path in staged.segments(src.source_id, table) for k in pq.read_table(path, columns=["id"])["id"].to_pylist()]


def test_a_session_writing_minimal_row_images_is_repaired_by_a_key_list_dump_with_no_operator(mariadb, spark, warehouse):
    table = make_items(mariadb)
    capture = start_capture(mariadb, warehouse)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "items", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    mariadb.sql("SET SESSION binlog_row_image = 'MINIMAL'",
                f"UPDATE {table} SET qty = 99 WHERE id = 1",       # the after image holds qty only
                f"INSERT INTO {table} (id, qty) VALUES (100, 5)",  # body and d (default 7) left out
                f"DELETE FROM {table} WHERE id = 2")               # the before image holds the key only
    wait_for(lambda: repairs_done(mariadb), 120, what="the capture's repair dump")
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    assert_equal(mariadb, warehouse, table)
    assert None not in staged_keys(mariadb, table), "a partial image was staged with a NULL key"
    with mariadb.store() as store:
        assert not waiting(store, mariadb.source_id)
    capture.terminate(); capture.wait()
    assert "partial row image" in capture.stderr.read()


def test_until_a_repair_lands_status_and_the_merge_report_name_the_keys_that_wait(mariadb, spark, warehouse):
    table = make_items(mariadb, rows=5)
    start_capture(mariadb, warehouse, "--no-repair")
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "items", check=True)
    mariadb.sql("SET SESSION binlog_row_image = 'MINIMAL'", f"UPDATE {table} SET qty = 99 WHERE id = 3")
    settle(mariadb)
    status = mariadb.dblog("status", "--source", mariadb.source_id, check=True).stdout
    assert f"repair of {table} waits: 1 key(s), e.g. [[3]]" in status, status
    synced = mariadb.dblog("sync", "--source", mariadb.source_id, "--timeout", "60", check=True).stdout
    assert f"{table} is not in sync yet: a repair of 1 key(s) has not landed" in synced, synced
    (result,) = merge(spark, mariadb, warehouse, tables=[table])
    assert result.waiting["keys"] == 1 and result.waiting["sample"] == [[3]]
    assert_equal(mariadb, warehouse, table)  # meanwhile the merge filled the row from its previous version

    ran = mariadb.dblog("repair", "--source", mariadb.source_id, check=True).stdout
    assert '"ran": ["repair-' in ran
    settle(mariadb)
    (result,) = merge(spark, mariadb, warehouse, tables=[table])
    assert result.waiting is None and result.missing_rows == 0
    assert_equal(mariadb, warehouse, table)


def test_statement_logged_writes_trigger_a_full_repair_that_also_removes_the_rows_they_deleted(mariadb, spark, warehouse):
    table = make_items(mariadb)
    capture = start_capture(mariadb, warehouse)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "items", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    mariadb.sql("SET SESSION binlog_format = 'STATEMENT'", f"USE {mariadb.namespace}",
                "INSERT INTO items (id, qty, body) VALUES (101, 1, 'new')",
                "UPDATE items SET qty = qty + 1 WHERE id < 5",
                f"DELETE FROM {table} WHERE id = 3")
    wait_for(lambda: repairs_done(mariadb), 120, what="the full repair dump")
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])  # past the statement: the repair now finds what it deleted
    wait_for(lambda: repairs_done(mariadb, at_least=2), 120, what="the repair of the keys the statement deleted")
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    assert_equal(mariadb, warehouse, table)
    capture.terminate(); capture.wait()
    log = capture.stderr.read()
    assert "statement-logged write" in log and "re-reads every row of the table after it" in log, log[-3000:]
    assert "the source no longer has (rows it deleted) are removed" in log, "the log must not claim a dump undoes a DELETE"


def test_a_dump_window_that_read_rows_before_a_statement_logged_write_loses_to_its_repair(mariadb, spark, warehouse):
    """The window reads, a statement-logged write changes and deletes rows, the write's repair
    reads them after it and closes first, and only then does the window stage its rows and write
    its HW: stamped after the repair's, its stale rows would win. The window must keep none."""
    import uuid

    from dblog.model.staged_format import ChunkMeta, Op
    table = make_items(mariadb)
    start_capture(mariadb, warehouse)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "items", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    source = mariadb.source()
    lw, hw = str(uuid.uuid4()), str(uuid.uuid4())
    source.write_watermark("slow-window", lw)
    rows = [tuple(r) for r in mariadb.sql(f"SELECT id, qty, body, d FROM {table} ORDER BY id")]
    mariadb.sql("SET SESSION binlog_format = 'STATEMENT'", f"USE {mariadb.namespace}",
                "UPDATE items SET qty = qty + 100 WHERE id <= 10", "DELETE FROM items WHERE id > 15")
    wait_for(lambda: repairs_done(mariadb), 120, what="the statement's full repair")
    mariadb.staged().write_chunk(mariadb.source_id, source.table_schema(table), ChunkMeta("slow-window", 0, lw, hw),
                                 rows, Op.READ)
    source.write_watermark("slow-window", hw)
    settle(mariadb)
    (result,) = merge(spark, mariadb, warehouse, tables=[table])
    assert result.blind_chunks == 1 and result.blind_rows == 20
    wait_for(lambda: repairs_done(mariadb, at_least=2), 120, what="the removal of the rows the statement deleted")
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    assert_equal(mariadb, warehouse, table)
    source.close()


def test_a_truncate_is_repaired_so_the_warehouse_loses_the_rows_too(src, spark, warehouse):
    table = make_items(src, rows=10)
    start_capture(src, warehouse)
    src.dblog("dump", "--source", src.source_id, "--table", "items", check=True)
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    src.sql(f"TRUNCATE TABLE {table}", f"INSERT INTO {table} (id, qty, body) VALUES (42, 1, 'after')")
    wait_for(lambda: repairs_done(src), 120, what="the full repair dump")
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    wait_for(lambda: repairs_done(src, at_least=2), 120, what="the repair of the truncated keys")
    settle(src)
    (result,) = merge(spark, src, warehouse, tables=[table])
    assert result.rows == 1
    assert_equal(src, warehouse, table)


def _update_loop(src, table, stop: threading.Event) -> int:
    conn = src.admin()
    cur, n = conn.cursor(), 0
    while not stop.is_set():
        cur.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id = %s", [n % 40 + 1])
        conn.commit()
        n += 1
    conn.close()
    return n


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_unchanged_toast_values_survive_updates_inside_the_windows_that_drop_their_chunk_rows(
        postgres, spark, warehouse, identity):
    table = make_items(postgres, rows=40, body_chars=40_000)
    postgres.sql(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")
    start_capture(postgres, warehouse, "--no-repair")
    dropped = 0
    for _ in range(5):  # an update lands in some one-row window of a dump most times, not every time
        stop = threading.Event()
        writer = threading.Thread(target=_update_loop, args=(postgres, table, stop))
        writer.start()
        try:
            postgres.dblog("dump", "--source", postgres.source_id, "--table", "items", "--chunk-size", "1",
                           check=True)
        finally:
            stop.set(); writer.join()
        settle(postgres)
        (result,) = merge(spark, postgres, warehouse, tables=[table])
        dropped += result.dropped
        if dropped:
            break
    assert dropped > 0, "no update landed inside a window in five dumps: the test did not test the rule"
    # The event (FULL: the old row) or the window (DEFAULT: the chunk row it drops) proves every value.
    assert result.missing_rows == 0 and result.repairs_requested == 0
    assert_equal(postgres, warehouse, table)


def test_a_toast_value_nothing_proves_is_re_read_by_a_repair_dump_not_left_null(postgres, spark, warehouse):
    table = make_items(postgres, rows=3, body_chars=40_000)
    start_capture(postgres, warehouse)
    postgres.sql(f"UPDATE {table} SET qty = 50 WHERE id = 2")  # no dump yet: no earlier version of row 2
    settle(postgres)
    (result,) = merge(spark, postgres, warehouse, tables=[table])
    assert result.missing_rows == 1 and result.repairs_requested == 1
    row = warehouse_table(spark, warehouse, postgres.source_id, table).where("id = 2").first()
    assert row["body"] is None and row["_dblog_missing"] == ["body"], "an unknown value must be flagged, not guessed"
    wait_for(lambda: repairs_done(postgres), 120, what="the repair dump the merge asked for")
    settle(postgres)
    (result,) = merge(spark, postgres, warehouse, tables=[table])
    assert result.missing_rows == 0 and result.waiting is None
    body = postgres.sql(f"SELECT body FROM {table} WHERE id = 2")[0][0]
    assert warehouse_table(spark, warehouse, postgres.source_id, table).where("id = 2").first()["body"] == body
