"""End to end through a running `airflow standalone`: trigger dblog_dump over the REST API."""
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


def test_a_dump_triggered_over_the_rest_api_lands_a_warehouse_table_equal_to_its_source(standalone):
    from dblog.coordination import store as paths
    from dblog.operations.verify import compare_warehouse
    from dblog.warehouse.tables import Warehouse
    from dblog_airflow import metrics

    from conftest import PORTS, wait_for
    src = standalone.src
    sent = metrics.name("dump.rows", src.source_id, src.table("order_lines"))
    earlier = sum(standalone.statsd.values(sent))  # other tests' dumps of the table, on the same standalone
    run_id = trigger_dump(standalone, {"source": src.source_id, "tables": ["order_lines"], "chunk_size": 250})
    assert standalone.wait_for_run("dblog_dump", run_id) == "success"
    warehouse = Warehouse(standalone.warehouse)
    diff = compare_warehouse(src.source(), warehouse, src.table("order_lines"))
    assert diff.equal and diff.source_rows > 1000, diff
    from dblog.warehouse.readers import duckdb_read
    assert duckdb_read(warehouse, src.source_id, src.table("order_lines")).num_rows == diff.source_rows

    dump = standalone.api("GET", f"{task_path(run_id, src.source_id + '.start')}/xcomEntries/dump").json()["value"]
    with src.store() as store:
        rows = store.get(paths.table_progress_path(src.source_id, dump["dump_id"], src.table("order_lines")))["rows"]
    wait_for(lambda: sum(standalone.statsd.values(sent)) - earlier == rows, 30,
             what=f"{sent} to add up to this dump's {rows} rows")

    # Lineage, through Airflow's OpenLineage provider: the dump read the source table, with its
    # columns (what the merges write: tests/e2e/test_merge_under_the_scheduler.py).
    def read() -> list[dict]:
        return [d for e in standalone.lineage() if e["eventType"] == "COMPLETE"
                and e["job"]["name"] == f"dblog_dump.{src.source_id}.dump_table" for d in e["inputs"]]
    wait_for(read, 60, what="the dump task's OpenLineage event")
    assert any(d["namespace"] == f"mysql://127.0.0.1:{PORTS['MARIADB']}" and d["name"] == src.table("order_lines")
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
