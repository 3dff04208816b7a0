"""End to end through a running `airflow standalone`: trigger dblog_dump over the REST API (a
successful one: tests/e2e/test_dblog_page.py, which follows it on the DBLog page)."""
from __future__ import annotations

from urllib.parse import quote


def trigger_dump(standalone, conf: dict) -> str:
    response = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={"logical_date": None, "conf": conf})
    assert response.status_code == 200, response.text
    return response.json()["dag_run_id"]


def task_path(run_id: str, task_id: str) -> str:
    return f"/dags/dblog_dump/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"


def error_lines(standalone, run_id: str, task_id: str) -> list[str]:
    """The task's ERROR log lines, as the UI lists them for a failed task."""
    content = standalone.api("GET", f"{task_path(run_id, task_id)}/logs/1").json()["content"]
    return [m["event"] for m in content if isinstance(m, dict) and m.get("level") == "error"]


def dumps_of(src) -> set[str]:
    with src.store() as store:
        return set(store.children(f"/{src.source_id}/dumps"))


def dumped_rows_sent(standalone, table: str) -> float:
    """What the standalone's StatsD heard of `dblog.dump.rows` for a table (every dump of it so far)."""
    from dblog_airflow import metrics
    return sum(standalone.statsd.values(metrics.name("dump.rows", standalone.src.source_id, table)))


def assert_landed(standalone, run_id: str, table: str, rows_sent_before: float) -> None:
    """A successful dblog_dump run of one table triggered over the REST API: the warehouse table
    equals its source (pyiceberg and DuckDB), the continuous merge took its chunks, the run's
    `dump.rows` metrics add up to its dump's rows,
    and the dump task's OpenLineage event names the source table with its columns (what the merges
    write: tests/e2e/test_merge_under_the_scheduler.py)."""
    from dblog.coordination import store as paths
    from dblog.operations.verify import compare_warehouse
    from dblog.warehouse.readers import duckdb_read
    from dblog.warehouse.tables import Warehouse

    from conftest import PORTS, wait_for
    src = standalone.src
    warehouse = Warehouse(standalone.warehouse)
    diff = compare_warehouse(src.source(), warehouse, table)
    assert diff.equal and diff.source_rows > 1000, diff
    assert duckdb_read(warehouse, src.source_id, table).num_rows == diff.source_rows

    dump = standalone.api("GET", f"{task_path(run_id, src.source_id + '.start')}/xcomEntries/dump").json()["value"]
    with src.store() as store:
        progress = store.get(paths.table_progress_path(src.source_id, dump["dump_id"], table))
    rows = progress["rows"]
    # The run's merge task left the dump to the deployment's continuous merge (no second Spark
    # application) and reports the dump's chunks all merged (dblog.merge.handoff).
    merge_log = standalone.task_log("dblog_dump", run_id, "merge")
    assert "the continuous merge took every chunk of this run's dumps" in merge_log, merge_log[-3000:]
    assert f"merged {progress['chunks']} of {progress['chunks']} chunks" in merge_log, merge_log[-3000:]
    wait_for(lambda: dumped_rows_sent(standalone, table) - rows_sent_before == rows, 30,
             what=f"dblog.dump.rows of {table} to add up to this dump's {rows} rows")

    def read() -> list[dict]:
        return [d for e in standalone.lineage() if e["eventType"] == "COMPLETE"
                and e["job"]["name"] == f"dblog_dump.{src.source_id}.dump_table" for d in e["inputs"]]
    wait_for(read, 60, what="the dump task's OpenLineage event")
    assert any(d["namespace"] == f"mysql://127.0.0.1:{PORTS['MARIADB']}" and d["name"] == table
               and {"order_id", "line_no"} <= {f["name"] for f in d["facets"]["schema"]["fields"]} for d in read()), \
        read()


def test_a_chunk_size_of_zero_over_the_rest_api_fails_the_run_at_start_saying_what_to_set(standalone):
    src = standalone.src
    before = dumps_of(src)
    run_id = trigger_dump(standalone, {"source": src.source_id, "chunk_size": 0})
    assert standalone.wait_for_run("dblog_dump", run_id) == "failed"
    errors = error_lines(standalone, run_id, f"{src.source_id}.start")
    assert any("chunk_size = 0: a chunk reads 1 to 100,000 rows; set a whole number" in e for e in errors), errors
    assert dumps_of(src) == before


def test_misspelled_conf_keys_over_the_rest_api_fail_the_run_at_start_and_dump_nothing(standalone):
    src = standalone.src
    before = dumps_of(src)
    run_id = trigger_dump(standalone, {"source": src.source_id, "table": ["accounts"], "chunksize": 100})
    assert standalone.wait_for_run("dblog_dump", run_id) == "failed"
    tis = {t["task_id"]: t["state"] for t in standalone.api(
        "GET", f"/dags/dblog_dump/dagRuns/{quote(run_id, safe='')}/taskInstances").json()["task_instances"]}
    assert tis[f"{src.source_id}.start"] == "failed" and tis["merge"] == "upstream_failed", tis
    errors = error_lines(standalone, run_id, f"{src.source_id}.start")
    assert any("unknown param 'table' (did you mean 'tables'?)" in e and
               "unknown param 'chunksize' (did you mean 'chunk_size'?)" in e for e in errors), errors
    assert dumps_of(src) == before
