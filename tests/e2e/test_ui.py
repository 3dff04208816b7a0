"""In a real browser (Debian's chromium, headless, driven by playwright): log in, open dblog_dump,
fill the trigger form, trigger, and see the run succeed. Screenshots: .local/test-output/ui/."""
from __future__ import annotations

import re

from airflow_fixtures import ROOT

SHOTS = ROOT / ".local" / "test-output" / "ui"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_a_dump_triggered_from_the_ui_form_runs_to_success(standalone):
    from playwright.sync_api import expect, sync_playwright

    from dblog_airflow.local import PASSWORD, USER
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(standalone.url)
            page.get_by_label("Username").fill(USER)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{standalone.url}/")

            page.goto(f"{standalone.url}/dags/dblog_dump")
            page.get_by_role("button", name="Trigger").first.click()
            form = page.get_by_role("dialog")
            expect(form.get_by_text("Chunk size (rows)")).to_be_visible()
            form.locator("textarea[name=element_tables]").fill("accounts")
            form.locator("input[name=element_chunk_size]").fill("300")
            page.screenshot(path=SHOTS / "1-trigger-form.png")
            form.get_by_role("button", name="Trigger").click()

            page.wait_for_url(re.compile(r".*/dags/dblog_dump/runs/.+"))
            run_id = page.url.rsplit("/runs/", 1)[1]
            from urllib.parse import unquote
            assert standalone.wait_for_run("dblog_dump", unquote(run_id)) == "success"
            page.reload()
            expect(page.get_by_text(f"{standalone.src.source_id}.start").first).to_be_visible()
            expect(page.get_by_text("Success").first).to_be_visible()
            page.screenshot(path=SHOTS / "2-run-succeeded.png")
        finally:
            browser.close()
    conf = standalone.api("GET", f"/dags/dblog_dump/dagRuns/{unquote(run_id)}").json()["conf"]
    assert conf["tables"] == ["accounts"] and conf["chunk_size"] == 300
