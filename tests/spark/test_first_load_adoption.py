"""A table's first load adopts its dump's chunk files as the table's data files (`dblog.merge.adopt`):
pyiceberg, DuckDB and Spark read the rows the rewriting first load writes, the files outlive the
staged log, later changes merge on top of them, and chunks that do not fit are rewritten, saying why."""
import logging
from pathlib import Path

import pytest

from dblog.coordination import loaded_tables
from dblog.coordination.store import dump_merged_path, table_progress_path
from dblog.model.staged_format import WarehouseForm
from dblog.spark.data_sources import spark_table
from dblog.warehouse.catalog import location
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse

from conftest import assert_warehouse_equals_source, settle, wait_for
from test_first_load import _load, _merge

SAME = ["_dblog_op", "_dblog_origin", "_dblog_dump_id", "_dblog_missing", "_dblog_bucket"]


def _many(src, rows: int = 30) -> str:
    ns = src.namespace
    # (A SMALLINT is staged as int16 under the table's int: Parquet stores both as INT32.)
    _load(src, f"CREATE TABLE {ns}.many (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(12,2), v BIGINT, "
               "q SMALLINT)", f"INSERT INTO {ns}.many VALUES (%s, %s, %s, %s, %s)",
          [(i, f"n{i}", f"{i}.25", i * 7, -i) for i in range(1, rows + 1)])
    return src.table("many")


def _read(warehouse, src, table: str, columns: list[str]) -> list[dict]:
    return sorted(warehouse.read(src.source_id, table, columns).to_pylist(), key=lambda r: r["id"])


@pytest.mark.both_sources
def test_a_first_load_adopts_its_chunk_files_and_every_reader_reads_what_a_rewritten_one_holds(
        src, spark, warehouse, tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_BUCKET_ROWS", "4")   # the dump's buckets and the merge's: 2 chunks of 2 rows each
    table = _many(src)
    src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "2", "--parallelism", "2",
              check=True, env={"DBLOG_BUCKET_ROWS": "4"})
    settle(src)
    result = _merge(spark, src, warehouse, table, bucket_rows=4)
    assert result.note == "first load: 15 chunk file(s) adopted as data files, none rewritten"
    assert result.survivors == 30 and result.buckets == 8
    state = warehouse.state(src.source_id, table, files=True)
    assert [b.rows for b in state.buckets] == [4] * 7 + [2]
    assert [b.lo for b in state.buckets] == [None] + [[str(k)] for k in range(5, 31, 4)]
    assert_warehouse_equals_source(src, warehouse, ["many"])   # pyiceberg and DuckDB

    monkeypatch.setenv("DBLOG_MERGE_ADOPT_FIRST_LOAD", "off")
    rewritten = Warehouse(str(tmp_path / "rewritten"))
    assert _merge(spark, src, rewritten, table, bucket_rows=4).note == \
        "first load: chunks written straight into their buckets"
    columns = [c for c, _ in state.columns] + SAME
    assert _read(warehouse, src, table, columns) == _read(rewritten, src, table, columns)
    # Each row's position is where its split was read: inside its window, so before that window's HW.
    adopted_at = {r["id"]: r["_dblog_position"] for r in _read(warehouse, src, table, ["id", "_dblog_position"])}
    at_hw = {r["id"]: r["_dblog_position"] for r in _read(rewritten, src, table, ["id", "_dblog_position"])}
    assert all(adopted_at[k] < at_hw[k] for k in at_hw)
    shown = ["id", "name", "amount", "v", "q", "_dblog_bucket"]
    by_spark = sorted((r.asDict() for r in spark_table(spark, warehouse, src.source_id, table).select(*shown).collect()),
                      key=lambda r: r["id"])
    by_duckdb = sorted(duckdb_read(warehouse, src.source_id, table).select(shown).to_pylist(), key=lambda r: r["id"])
    assert by_spark == by_duckdb == _read(rewritten, src, table, shown)
    # The staged columns stay in the files, unread: readers see the table's columns only.
    table_columns = [f.name for f in warehouse.load(src.source_id, table).schema().fields]
    assert duckdb_read(warehouse, src.source_id, table).column_names == table_columns
    assert warehouse.load(src.source_id, table).scan().to_arrow().column_names == table_columns

    # The table's files are its own: the staged chunks can go.
    staged = src.staged()
    staged.delete(staged.chunk_files(src.source_id, table))
    root = location(warehouse.root, src.source_id, table).split("://", 1)[-1]
    assert len([p for p in Path(root).rglob("*.parquet")]) == 15
    assert_warehouse_equals_source(src, warehouse, ["many"])

    # Changes after the load merge over the adopted rows.
    ns = src.namespace
    src.sql(f"UPDATE {ns}.many SET v = -1 WHERE id = 3", f"DELETE FROM {ns}.many WHERE id = 4",
            f"INSERT INTO {ns}.many VALUES (31, 'n31', 31.25, 217, -31)")
    settle(src)
    monkeypatch.delenv("DBLOG_MERGE_ADOPT_FIRST_LOAD")
    _merge(spark, src, warehouse, table, bucket_rows=4)
    assert_warehouse_equals_source(src, warehouse, ["many"])

    # The table holds a load: a refresh is no first load, so its chunks are staged plain.
    with src.store() as store:
        assert loaded_tables.holds(store, src.source_id, table)
    src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "10", check=True,
              env={"DBLOG_BUCKET_ROWS": "4"})
    refresh = [staged.read_chunk(p).schema for p in staged.chunk_files(src.source_id, table)]
    assert len(refresh) == 3 and not any(WarehouseForm.of_footer(s) or "_dblog_op" in s.names for s in refresh)
    settle(src)
    _merge(spark, src, warehouse, table, bucket_rows=4)
    assert_warehouse_equals_source(src, warehouse, ["many"])
    # Dropped, the table's next dump is a first load again.
    src.dblog("warehouse", "drop", "--source", src.source_id, "--table", "many", check=True,
              env={"DBLOG_WAREHOUSE": warehouse.root})
    with src.store() as store:
        assert not loaded_tables.holds(store, src.source_id, table)


def test_a_first_load_whose_windows_grew_on_a_quiet_source_is_still_adopted_whole(mariadb, spark, warehouse):
    """Growing windows (`snapshot/window_growth`) keep a first load's window within a bucket, so
    its chunks are adopted as they are: splits of 2 rows grow to 4 (8-row buckets, two splits).
    On MariaDB, whose counter grows windows at once (PostgreSQL's waits 1.5 s: the engine's growth
    test runs on both)."""
    src = mariadb
    table = _many(src, rows=60)
    env = {"DBLOG_BUCKET_ROWS": "8", "DBLOG_DUMP_QUIET_CHUNK_SIZE": "100"}
    src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "2", "--parallelism", "2",
              check=True, env=env)
    staged = src.staged()
    sizes = [staged.read_chunk(p).num_rows for p in staged.chunk_files(src.source_id, table)]
    assert max(sizes) == 4 and sizes[0] == 2, f"the splits did not grow from 2 to 4 rows: {sizes}"
    settle(src)
    result = _merge(spark, src, warehouse, table, bucket_rows=8)
    assert result.note == f"first load: {len(sizes)} chunk file(s) adopted as data files, none rewritten"
    assert all(b.rows <= 2 * 8 for b in warehouse.state(src.source_id, table).buckets)
    assert_warehouse_equals_source(src, warehouse, ["many"])


def test_a_first_load_whose_dump_made_other_buckets_is_rewritten_and_says_why(src, spark, warehouse, caplog):
    caplog.set_level(logging.INFO, "dblog.merge")
    table = _many(src, rows=6)
    src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "2", check=True,
              env={"DBLOG_BUCKET_ROWS": "4"})
    settle(src)
    result = _merge(spark, src, warehouse, table, bucket_rows=2)
    assert result.note.startswith("first load: chunks written straight")
    assert "rewritten, not adopted: its dump made buckets of 4 rows, this merge 2" in caplog.text
    assert_warehouse_equals_source(src, warehouse, ["many"])


@pytest.mark.both_sources
def test_a_first_load_under_writes_adopts_its_chunks_less_the_rows_their_windows_drop_then_merges_its_events(
        src, spark, warehouse, tmp_path, monkeypatch):
    from dblog.snapshot.dump import create_dump, run_dump
    from dblog.snapshot.dump_spec import DumpSpec
    monkeypatch.setenv("DBLOG_BUCKET_ROWS", "4")
    table, ns = _many(src), src.namespace
    src.sql(f"UPDATE {ns}.many SET v = -7 WHERE id = 1")   # an event before the dump
    source = src.source()
    read, changed = type(source).select_chunk_table, []

    def read_then_a_write(self, schema, after, limit, upto=None, native=True):
        rows = read(self, schema, after, limit, upto, native)
        if rows.num_rows and rows.column("id")[0].as_py() in (5, 17):
            # Changed after the read and before the split's log head: the staged row is stale and
            # carries a position after the change. Only the window rule keeps it out.
            changed.append(rows.column("id")[-1].as_py())
            src.sql(f"UPDATE {ns}.many SET v = v + 1000 WHERE id = {changed[-1]}")
        return rows
    monkeypatch.setattr(type(source), "select_chunk_table", read_then_a_write)
    with src.store() as store:
        dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=2))
        run_dump(store, source, src.staged(), dump_id)
    assert changed == [6, 18]
    src.sql(f"DELETE FROM {ns}.many WHERE id = 9", f"INSERT INTO {ns}.many VALUES (31, 'n31', 31.25, 217, -31)")
    settle(src)

    result = _merge(spark, src, warehouse, table, bucket_rows=4)
    assert result.note.startswith("first load: 15 chunk file(s) adopted as data files, none rewritten (2 row(s) "
                                  "their windows drop deleted by position); its events merged over it next")
    assert result.commits == 2 and result.dropped == 2
    with src.store() as store:   # the dump's totals, recorded once (by the load's commit)
        assert store.get(dump_merged_path(src.source_id, dump_id, table)) == {"chunks": 15, "rows": 30, "dropped": 2}
    assert_warehouse_equals_source(src, warehouse, ["many"])   # pyiceberg and DuckDB
    # The same rows the general merge writes from the same chunks and events, through Spark too.
    monkeypatch.setenv("DBLOG_MERGE_ADOPT_FIRST_LOAD", "off")
    general = Warehouse(str(tmp_path / "general"))
    assert "adopted" not in _merge(spark, src, general, table, bucket_rows=4).note
    shown = ["id", "name", "amount", "v", "q", "_dblog_op"]
    by_spark = sorted((r.asDict() for r in spark_table(spark, warehouse, src.source_id, table).select(*shown).collect()),
                      key=lambda r: r["id"])
    assert by_spark == _read(warehouse, src, table, shown) == _read(general, src, table, shown)


@pytest.mark.parametrize("waits", ["600", "0"])
def test_a_first_load_is_merged_once_its_dump_has_read_the_table_not_piecemeal_while_it_reads(
        src, spark, warehouse, monkeypatch, waits):
    monkeypatch.setenv("DBLOG_BUCKET_ROWS", "4")
    monkeypatch.setenv("DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS", waits)
    table = _many(src)
    env = {"DBLOG_BUCKET_ROWS": "4"}
    dump_id = src.dblog("dump", "--source", src.source_id, "--table", "many", "--chunk-size", "2", "--parallelism",
                        "2", "--delay", "3600", "--create-only", check=True, env=env).stdout.strip()
    worker = src.spawn("dump", "run", dump_id, "--source", src.source_id, env=env)   # waits an hour after a window
    with src.store() as store:
        progress = lambda: store.get(table_progress_path(src.source_id, dump_id, table)) or {}
        wait_for(lambda: progress().get("chunks", 0) >= 2, 60, what="the first window's chunks")
        settle(src)
        during = _merge(spark, src, warehouse, table, bucket_rows=4)
        stored = warehouse.state(src.source_id, table)
        src.dblog("dump", "throttle", dump_id, "--source", src.source_id, "--delay", "0", check=True)
        assert worker.wait(120) == 0 and progress()["status"] == "done"
    settle(src)
    after = _merge(spark, src, warehouse, table, bucket_rows=4)
    if waits != "0":   # nothing committed while the worker read; then the whole load, adopted in one commit
        assert during.note.startswith(f"first load in progress: dump {dump_id} has read ") and during.commits == 0
        assert during.chunks_waiting >= 2 and stored is None
        assert after.note == "first load: 15 chunk file(s) adopted as data files, none rewritten"
        assert after.commits == 1 and after.survivors == 30
    else:   # the chunks staged so far are the first load; the rest merge into its stored buckets
        assert during.note.startswith("first load: ") and during.commits == 1 and stored.rows == 4
        assert not after.note.startswith("first load")
    assert_warehouse_equals_source(src, warehouse, ["many"])
