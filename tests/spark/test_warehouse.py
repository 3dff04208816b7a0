"""The warehouse table: what users read, the merge rule across merges, tombstones, crashes, schema."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_merge_converges import assert_warehouse_equals_source, merge

from dblog.coordination import store as paths
from dblog.coordination.checkpoint import checkpoint_path
from dblog.merge.job import MergeError, merge_table
from dblog.model.staged_format import POSITION, SegmentFile
from dblog.operations.verify import compare_warehouse
from dblog.warehouse.catalog import location
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.table_maintenance import reachable
from dblog.warehouse.tables import Warehouse

from conftest import ROOT, parquet_column_names, settle, wait_for, warehouse_table
from terminal import ESCAPE, in_a_terminal


def test_users_read_the_table_with_plain_spark_sql_and_source_types_stay_faithful(mariadb, spark, warehouse):
    w = mariadb.workload(seed=40, rows=300)
    w.create()
    mariadb.start_capture()
    mariadb.dblog("dump", "--source", mariadb.source_id, "--all", "--chunk-size", "100", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse)
    warehouse_table(spark, warehouse, mariadb.source_id, mariadb.table("accounts")).createOrReplaceTempView("t")
    types = dict(spark.sql("SELECT * FROM t").dtypes)
    assert types["balance"] == "decimal(12,2)" and types["data"] == "binary" and types["note"] == "string"
    assert types["updated_at"] in ("timestamp", "timestamp_ntz")
    assert {"_dblog_position", "_dblog_op", "_dblog_origin", "_dblog_dump_id", "_dblog_merged_at"} <= set(types)
    count, origins = spark.sql("SELECT count(*), collect_set(_dblog_origin) FROM t").first()
    assert count == mariadb.sql(f"SELECT count(*) FROM {mariadb.table('accounts')}")[0][0]
    assert set(origins) == {"dump"}
    # Microseconds and exact decimals survive the trip.
    row = mariadb.sql(f"SELECT id, balance, updated_at FROM {mariadb.table('accounts')} "
                      "WHERE updated_at IS NOT NULL ORDER BY id LIMIT 1")[0]
    got = spark.sql(f"SELECT balance, updated_at FROM t WHERE id = {row[0]}").first()
    assert got["balance"] == row[1] and got["updated_at"].replace(tzinfo=None).microsecond == row[2].microsecond


def test_the_first_merge_includes_changes_staged_before_the_first_chunk(postgres, spark, warehouse):
    w = postgres.workload(seed=41, rows=200)
    w.create()
    postgres.start_capture()
    w.run(seconds=1)  # changes staged before any dump exists
    settle(postgres)
    postgres.dblog("dump", "--source", postgres.source_id, "--table", "accounts", "--chunk-size", "50", check=True)
    settle(postgres)
    merge(spark, postgres, warehouse, tables=[postgres.table("accounts")])
    assert_warehouse_equals_source(postgres, warehouse, ["accounts"])


def test_a_chunk_reconciled_after_a_later_delete_of_one_of_its_keys_does_not_bring_the_row_back(mariadb, spark, warehouse,
                                                                                                monkeypatch):
    monkeypatch.setenv("DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS", "0")   # merged mid-dump (a first load otherwise waits)
    mariadb.workload(seed=42, rows=100).create()
    mariadb.start_capture()
    table = mariadb.table("accounts")
    store = mariadb.store()
    dump_id = mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", "--chunk-size", "10",
                            "--delay", "3600", "--create-only", check=True).stdout.strip()
    dumping = mariadb.spawn("dump", "run", dump_id, "--source", mariadb.source_id)  # waits after chunk 0
    progress = paths.table_progress_path(mariadb.source_id, dump_id, table)
    wait_for(lambda: (store.get(progress) or {}).get("chunks", 0) >= 1, 60, what="the first chunk")
    chunk = mariadb.staged().chunk_files(mariadb.source_id, table)[0]
    first_key = pq.read_table(chunk)["id"][0].as_py()
    late = chunk + ".late"
    os.rename(chunk, late)  # the chunk is staged late: its HW is in the log, its file not yet visible
    mariadb.sql(f"DELETE FROM {table} WHERE id = {first_key}")
    settle(mariadb)
    first = merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id, table)
    assert first.tombstones >= 1  # kept: the running dump could still stage an older chunk
    os.rename(late, chunk)
    second = merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id, table)
    assert second.chunks == 1 and second.survivors == 10
    rows = warehouse.read(mariadb.source_id, table, ["id"])["id"].to_pylist()
    assert first_key not in rows, "an older chunk row resurrected a deleted key"
    mariadb.dblog("dump", "cancel", dump_id, "--source", mariadb.source_id, check=True)
    dumping.kill(); dumping.wait()
    wait_for(lambda: not store.lock_holders(f"{progress}/lock"), 30, what="the dump's lease to go")
    mariadb.sql(f"DELETE FROM {table} WHERE id = {first_key + 1}")
    settle(mariadb)
    third = merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id, table)
    assert third.tombstones == 0 or third.buckets > 1  # purged where the merge rewrote them
    assert compare_warehouse(mariadb.source(), warehouse, table).equal is False  # chunks 1.. never ran


def test_re_running_a_merge_changes_nothing_and_repeated_staged_events_are_harmless(mariadb, spark, warehouse):
    w = mariadb.workload(seed=43, rows=300)
    w.create()
    mariadb.start_capture()
    w.run(seconds=1)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--all", "--chunk-size", "64", check=True)
    w.run(seconds=1)
    settle(mariadb)
    staged = mariadb.staged()
    for t in ("accounts", "order_lines"):  # re-stage every event once more, as a crashed capture would
        log = staged.read_log(mariadb.source_id, mariadb.table(t))
        half = log.slice(log.num_rows // 3)
        name = SegmentFile(half[POSITION][0].as_py(), half[POSITION][-1].as_py()).name
        pq.write_table(half, f"{staged.log_dir(mariadb.source_id, mariadb.table(t))}/{name}")
    merge(spark, mariadb, warehouse)
    assert_warehouse_equals_source(mariadb, warehouse)
    # The capture's last batch is one accounts event: the checkpoint ends exactly on its segment.
    mariadb.sql(f"INSERT INTO {mariadb.table('accounts')} (id, name) VALUES (999999, 'last')")
    with mariadb.store() as store:
        def last_event_checkpointed():
            log = staged.read_log(mariadb.source_id, mariadb.table("accounts"))
            checkpoint = store.get(checkpoint_path(mariadb.source_id))["position"]
            return log["name"][-1].as_py() == "last" and checkpoint == log["_position"][-1].as_py()
        wait_for(last_event_checkpointed, 60, what="the update to be checkpointed")
    merge(spark, mariadb, warehouse)
    before = {t: warehouse.state(mariadb.source_id, mariadb.table(t)) for t in ("accounts", "order_lines")}
    again = merge(spark, mariadb, warehouse)
    assert {r.note for r in again} == {"up to date"}
    for t, state in before.items():
        assert warehouse.state(mariadb.source_id, mariadb.table(t)) == state  # no new snapshot


def test_kill_9_during_a_merge_leaves_no_table_and_a_re_run_converges(mariadb, tmp_path):
    w = mariadb.workload(seed=44, rows=3000)
    w.create()
    mariadb.start_capture()
    mariadb.dblog("dump", "--source", mariadb.source_id, "--all", "--chunk-size", "500", check=True)
    settle(mariadb)
    env = {**mariadb.env, "DBLOG_WAREHOUSE": str(tmp_path / "wh"), "DBLOG_SPARK_MASTER": "local[1]"}
    cli = [sys.executable, "-m", "dblog.cli"]
    warehouse = Warehouse(str(tmp_path / "wh"))
    table = mariadb.table("order_lines")
    data_dir = Path(location(warehouse.root, mariadb.source_id, table).removeprefix("file://")) / "data"
    proc = subprocess.Popen(cli + ["merge", "--table", "order_lines"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: data_dir.is_dir() and any(data_dir.rglob("*.parquet")), 120, interval=0.01,
             what="the merge to start writing")
    os.killpg(proc.pid, signal.SIGKILL)  # the merge's Python and its JVM
    proc.wait()
    assert warehouse.load(mariadb.source_id, table) is None, "a killed first merge created the table"
    verify = subprocess.run(cli + ["verify", "--source", mariadb.source_id, "--table", "order_lines"], env=env,
                            capture_output=True, text=True)
    assert verify.returncode == 1 and "DRIFT" in verify.stdout
    # The re-run goes through spark-submit and the job's entry point, as Airflow submits it.
    venv_bin = os.path.dirname(sys.executable)
    rerun = subprocess.run([os.path.join(venv_bin, "spark-submit"), "--master", "local[1]",
                            str(ROOT / "spark_jobs" / "merge.py"), "--source", mariadb.source_id],
                           env={**env, "PATH": f"{venv_bin}:{env['PATH']}", "PYSPARK_PYTHON": sys.executable},
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert re.search(r"order_lines: snapshot \d+", rerun.stdout), rerun.stdout
    referenced = {task.file.file_path.removeprefix("file://")
                  for task in warehouse.load(mariadb.source_id, table).scan().plan_files()}
    leftovers = {str(p) for p in data_dir.rglob("*.parquet")} - referenced
    assert leftovers, "the killed merge's files are there for the orphan sweep"
    swept = subprocess.run(cli + ["maintain", "--source", mariadb.source_id, "--orphan-grace", "0"], env=env,
                           capture_output=True, text=True)
    assert swept.returncode == 0, swept.stderr
    # (Maintenance may also have compacted a bucket of the adopted first load's chunk files: the
    # snapshots it keeps still need them.)
    referenced = {p for p in reachable(warehouse.load(mariadb.source_id, table))[0] if p.endswith(".parquet")}
    assert {str(p) for p in data_dir.rglob("*.parquet")} == referenced, "the orphan sweep left files behind"
    verify = subprocess.run(cli + ["verify", "--source", mariadb.source_id, "--json"], env=env,
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert all(json.loads(line)["equal"] for line in verify.stdout.splitlines())


def test_verify_prints_the_drifted_key_ranges_and_exits_non_zero(mariadb, spark, warehouse, tmp_path):
    mariadb.workload(seed=45, rows=500).create()
    mariadb.start_capture()
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse)
    mariadb.sql(f"UPDATE {mariadb.table('accounts')} SET name = 'changed' WHERE id IN (1, 2)")  # not merged
    env = {**mariadb.env, "DBLOG_WAREHOUSE": warehouse.root}
    out = subprocess.run([sys.executable, "-m", "dblog.cli", "verify", "--source", mariadb.source_id, "--table",
                          "accounts", "--page", "100"], env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert "DRIFT" in out.stdout and "1 of 5 key ranges differ" in out.stdout
    assert "keys [1] .. [" in out.stdout
    code, screen = in_a_terminal(["verify", "--source", mariadb.source_id, "--table", "accounts", "--page", "100"], env)
    assert code == 1 and ESCAPE in screen, screen[-3000:]   # the same verdict, with a live bar of its rows
    assert f"verify {mariadb.source_id} {mariadb.table('accounts')}" in screen and "500/500" in screen, screen[-3000:]


def test_merges_of_one_table_are_serialized_while_other_tables_merge(mariadb, spark, warehouse):
    mariadb.workload(seed=46, rows=100).create()
    mariadb.start_capture()
    mariadb.dblog("dump", "--source", mariadb.source_id, "--all", check=True)
    settle(mariadb)
    store = mariadb.store()
    held = store.lease(paths.merge_lock(mariadb.source_id, mariadb.table("accounts")), "another-merge", 5)
    with pytest.raises(MergeError, match="another merge of .*accounts holds its lock"):
        merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id, mariadb.table("accounts"),
                    lock_timeout=1)
    other = merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id, mariadb.table("order_lines"))
    assert other.rows > 0
    held.release()
    assert merge_table(spark, store, mariadb.staged(), warehouse, mariadb.source_id,
                       mariadb.table("accounts")).rows > 0


def test_a_column_added_during_a_dump_reaches_the_warehouse_null_for_older_rows(src, spark, warehouse):
    w = src.workload(seed=47, rows=1000)
    w.create()
    src.start_capture()
    table = src.table("accounts")
    dumping = src.spawn("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "50",
                        "--delay", "0.05")
    wait_for(lambda: len(src.staged().chunk_files(src.source_id, table)) >= 5, 60, what="5 chunks")
    src.sql(f"ALTER TABLE {table} ADD COLUMN tier VARCHAR(8) NULL")
    src.sql(f"UPDATE {table} SET tier = 'gold' WHERE id % 7 = 0")
    assert dumping.wait(120) == 0, dumping.stderr.read()
    w.run(seconds=1)
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    assert_warehouse_equals_source(src, warehouse, ["accounts"])
    gold = warehouse_table(spark, warehouse, src.source_id, table).where("tier = 'gold'").count()
    assert gold > 0
    # DuckDB reads the added column too (older data files lack it: null there).
    assert (duckdb_read(warehouse, src.source_id, table).to_pandas()["tier"] == "gold").sum() == gold


def test_excluded_columns_never_reach_warehouse_files(mariadb, spark, warehouse, tmp_path):
    mariadb.query = "exclude=accounts.note,accounts.data"
    w = mariadb.workload(seed=48, rows=200)
    w.create()
    mariadb.start_capture()
    w.run(seconds=1)
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse)
    names = parquet_column_names(tmp_path / "warehouse")
    assert {"id", "name", "balance"} <= names and not {"note", "data"} & names
    assert compare_warehouse(mariadb.source(), warehouse, mariadb.table("accounts")).equal


@pytest.mark.parametrize("bad", [["merge", "--bucket-rows", "0"], ["verify", "--source", "nope"]])
def test_bad_merge_and_verify_options_fail_with_a_clear_error(bad, tmp_path):
    env = {**os.environ, "DBLOG_WAREHOUSE": str(tmp_path / "wh"), "PYTHONPATH": str(ROOT / "include")}
    out = subprocess.run([sys.executable, "-m", "dblog.cli", *bad], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.startswith("dblog: error:")
    assert not (tmp_path / "wh").exists()


def test_with_keep_dropped_columns_on_a_dropped_column_stays_in_the_table_null_for_rows_changed_since(
        mariadb, spark, warehouse, monkeypatch):
    monkeypatch.setenv("DBLOG_KEEP_DROPPED_COLUMNS", "on")
    mariadb.workload(seed=49, rows=200).create()
    mariadb.start_capture()
    table = mariadb.table("accounts")
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", check=True)
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    mariadb.sql(f"ALTER TABLE {table} DROP COLUMN data")
    mariadb.sql(f"UPDATE {table} SET balance = balance + 1 WHERE id <= 10")
    settle(mariadb)
    merge(spark, mariadb, warehouse, tables=[table])
    rows = {r["id"]: r for r in warehouse_table(spark, warehouse, mariadb.source_id, table).select("id", "data").collect()}
    assert all(rows[i]["data"] is None for i in range(1, 11))
    assert any(r["data"] is not None for i, r in rows.items() if i > 10)      # older rows keep their values
    assert compare_warehouse(mariadb.source(), warehouse, table).equal
