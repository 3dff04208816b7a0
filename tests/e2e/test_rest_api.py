"""End to end through a running `airflow standalone`: trigger dblog_dump over the REST API."""
from __future__ import annotations


def test_a_dump_triggered_over_the_rest_api_lands_a_warehouse_table_equal_to_its_source(standalone):
    from dblog.verify import compare_warehouse
    from dblog.warehouse.layout import Warehouse
    src = standalone.src
    response = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={
        "logical_date": None, "conf": {"source": src.source_id, "tables": ["order_lines"], "chunk_size": 250}})
    assert response.status_code == 200, response.text
    run_id = response.json()["dag_run_id"]
    assert standalone.wait_for_run("dblog_dump", run_id) == "success"
    diff = compare_warehouse(src.source(), Warehouse(standalone.warehouse), src.table("order_lines"))
    assert diff.equal and diff.source_rows > 1000, diff


def test_bad_params_are_refused_by_the_api_with_the_reason(standalone):
    response = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={
        "logical_date": None, "conf": {"source": standalone.src.source_id, "chunk_size": 0}})
    assert response.status_code == 400
    assert "chunk_size" in response.text
