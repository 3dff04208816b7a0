"""The DBLog page in a real browser (Debian's chromium, headless, driven by playwright) inside a
running `airflow standalone`: open it from Airflow's navigation, see the capture, follow a slow
dump triggered over the REST API, pause it (ZooKeeper and the worker's task log agree), resume it,
see it finish and merge, and its table land equal to the source.
Screenshots: .local/test-output/ui/."""
from __future__ import annotations

import re
import uuid

import requests

from browser import SHOTS, signed_in
from conftest import wait_for


def test_the_page_and_its_endpoints_refuse_requests_without_airflow_authentication(standalone):
    url = f"{standalone.url}/dblog"
    for method, path, kwargs in (("GET", "/", {}), ("GET", "/api/status", {}),
                                 ("POST", f"/api/dumps/{standalone.src.source_id}/x/pause", {"json": {}})):
        anonymous = requests.request(method, url + path, timeout=30, **kwargs)
        assert anonymous.status_code in (401, 403), (path, anonymous.status_code, anonymous.text[:200])
        forged = requests.request(method, url + path, timeout=30, cookies={"_token": "not-a-jwt"}, **kwargs)
        assert forged.status_code in (401, 403), (path, forged.status_code)
    bearer = {"Authorization": f"Bearer {standalone.token}"}
    signed_in = requests.get(f"{url}/api/status", timeout=30, headers=bearer)
    assert signed_in.status_code == 200
    assert [s["id"] for s in signed_in.json()["sources"]] == [standalone.src.source_id]
    # Which warehouse tables a source shows (a page of them, a search): a malformed view is named.
    sid = standalone.src.source_id
    found = requests.get(f"{url}/api/status", timeout=30, headers=bearer,
                         params={"view": f'{{"{sid}": {{"page": 3, "find": "no such table"}}}}'})
    assert found.status_code == 200 and found.json()["sources"][0]["warehouse"] == []
    assert found.json()["sources"][0]["warehouse_view"]["find"] == "no such table"
    bad = requests.get(f"{url}/api/status", timeout=30, headers=bearer, params={"view": f'{{"{sid}": {{"page": -1}}}}'})
    assert bad.status_code == 400 and "view is a JSON object" in bad.json()["detail"]


def _rows(row) -> int:
    return int(row.get_attribute("data-rows") or 0)


def test_a_dump_triggered_over_rest_is_followed_paused_and_resumed_from_the_dblog_page_and_lands_its_table(
        standalone):
    from playwright.sync_api import expect
    from test_rest_api import assert_landed, dumped_rows_sent
    src = standalone.src
    rows_sent_before = dumped_rows_sent(standalone, src.table("order_lines"))   # (other tests' dumps of it)
    dump_id, run_id = f"page-{uuid.uuid4().hex[:8]}", f"dblog_page_{uuid.uuid4().hex[:8]}"
    with signed_in(standalone) as page:
        # The external view: an entry of Airflow's navigation that renders the page inside the UI.
        # Scoped to the navigation: the dashboard also lists runs and assets whose names hold "dblog".
        page.get_by_test_id("nav-sidebar").get_by_role("link", name="DBLog", exact=True).click()
        page.wait_for_url(re.compile(r".*/plugin/dblog.*"))
        frame = page.frame_locator("iframe[title='DBLog']")
        source = frame.locator(f"section[data-source='{src.source_id}']")
        expect(source.locator(".capture-state")).to_have_text("capturing", timeout=120_000)
        expect(source.locator("dd.position")).to_have_text(re.compile(r"^\S+\.\d+:\d+$"))  # binlog file:offset
        expect(source.locator("dd.lag")).to_have_text(re.compile(r"^\d+(\.\d)? s$|^\d+ min"))
        expect(source.locator("dd.staged")).to_have_text(re.compile(r" in [\d,]+ files$"))   # the staged log's size

        # The deployment's continuous merge has begun (its first slice starts Spark): the run's
        # merge task leaves the dump to it (`assert_landed`).
        from dblog.coordination.merge_beat import read_beat
        with src.store() as store:
            wait_for(lambda: read_beat(store, src.source_id), 180, interval=0.5,
                     what="the continuous merge's first cycle")
        expect(source.locator("dd.merge")).to_have_text(re.compile(r"^running .* ago\)$"), timeout=30_000)
        response = standalone.api("POST", "/dags/dblog_dump/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None,
            "conf": {"source": src.source_id, "tables": ["order_lines"], "chunk_size": 50,
                     "delay_seconds": 0.5, "dump_id": dump_id}})
        assert response.status_code == 200, response.text

        row = source.locator(f"tr[data-dump='{dump_id}']")
        expect(row).to_be_visible(timeout=180_000)
        first = wait_for(lambda: _rows(row), 180, interval=0.5, what="the dump's first chunk on the page")
        wait_for(lambda: _rows(row) > first, 120, interval=0.5, what="the dump's progress to advance")
        bar = row.get_by_role("progressbar")
        assert 0 < float(bar.get_attribute("aria-valuenow")) < 100  # an estimate was recorded at start
        expect(row.locator(".rate")).to_have_text(re.compile(r"^[\d,]+$"))
        expect(row.locator(".eta")).to_have_text(re.compile(r"\d"))
        # The capture hands over every 20 s here (SLICE_SECONDS); the picture shows it capturing.
        expect(source.locator(".capture-state")).to_have_text("capturing", timeout=60_000)
        page.screenshot(path=SHOTS / "3-dblog-page.png")

        row.get_by_role("button", name="Pause").click()
        expect(row.locator(".dump-state")).to_have_text("paused")
        with src.store() as store:
            from dblog.coordination.store import control_path
            assert store.get(control_path(src.source_id, dump_id))["state"] == "paused"
        wait_for(lambda: "paused; waiting for resume" in standalone.task_log("dblog_dump", run_id, f"{src.source_id}.dump_table"),
                 120, interval=1, what="the dump worker's task log to say it paused")
        expect(row.locator(".eta")).to_have_text("paused")

        # Bad throttle input: the engine's own message, shown on the page (an HTTP 400).
        row.get_by_label(f"Chunk size for {dump_id}").fill("0")
        row.get_by_role("button", name="Throttle").click()
        expect(row.get_by_role("status")).to_have_text("chunk size must be a whole number from 1 to 100,000, got 0")
        page.screenshot(path=SHOTS / "4-dump-paused.png")

        paused_at = _rows(row)
        row.get_by_label(f"Chunk size for {dump_id}").fill("200")
        row.get_by_label(f"Delay (s) for {dump_id}").fill("0")
        row.get_by_label(f"Parallelism for {dump_id}").fill("2")
        row.get_by_role("button", name="Throttle").click()
        expect(row.get_by_role("status")).to_have_text("throttle: done")
        row.get_by_role("button", name="Resume").click()
        expect(row.locator(".dump-state")).not_to_have_text("paused")
        wait_for(lambda: _rows(row) > paused_at, 120, interval=0.5, what="the dump to advance after resume")
        assert standalone.wait_for_run("dblog_dump", run_id) == "success"
        expect(row.locator(".dump-state")).to_have_text("done")
        expect(bar).to_have_attribute("aria-valuenow", "100")
        table = source.locator(f"tr[data-table='{src.table('order_lines')}']")
        expect(table).to_be_visible(timeout=30_000)  # the run's merge published a warehouse version
        _pages_through_many_tables(standalone, source)
    assert_landed(standalone, run_id, src.table("order_lines"), rows_sent_before)
    with src.store() as store:
        from dblog.coordination.store import control_path
        assert store.get(control_path(src.source_id, dump_id)) == {"state": "running", "chunk_size": 200,
                                                                   "delay_s": 0, "parallelism": 2}


def _pages_through_many_tables(standalone, source) -> None:
    """A source of many warehouse tables shows 50 of them at a time, with Next and a search box."""
    from playwright.sync_api import expect

    from dblog.warehouse.tables import Warehouse

    from iceberg_tables import commit_rows
    src = standalone.src
    many = [f"{src.namespace}.zz_many_{i:02d}" for i in range(55)]   # named to sort after the others
    warehouse = Warehouse(standalone.warehouse)
    try:
        for t in many:
            commit_rows(warehouse, src.source_id, t, [{"id": 1, "_dblog_position": "p1"}], [("id", "bigint")], ["id"])
        shown = source.locator(".pager .shown")

        def listed() -> int:   # the page refreshes on its own: a refresh during the commits lists some
            found = re.fullmatch(r"tables 1-50 of ([\d,]+)", shown.text_content() or "")
            return int(found.group(1).replace(",", "")) if found else 0
        total = wait_for(lambda: listed() if listed() >= len(many) else 0, 60, interval=0.5,
                         what="the page to list every new table")
        expect(source.locator("tr.table")).to_have_count(50)
        source.get_by_role("button", name="Next").click()
        expect(shown).to_have_text(f"tables 51-{min(total, 100)} of {total}")
        expect(source.locator(f"tr[data-table='{many[-1]}']")).to_be_visible()   # the last by name
        source.get_by_label(f"Find a warehouse table of {src.source_id}").fill("zz_many_1")
        expect(shown).to_have_text("tables 1-10 of 10")
        expect(source.locator("tr.table")).to_have_count(10)
    finally:
        for t in many:
            warehouse.drop(src.source_id, t)
