"""In a real browser (Debian's chromium, headless, driven by playwright): log in, open dblog_dump,
fill the trigger form, trigger, and see the run succeed. Screenshots: .local/test-output/ui/."""
from __future__ import annotations

import re

from browser import SHOTS, signed_in


def test_a_dump_triggered_from_the_ui_form_runs_to_success(standalone):
    from urllib.parse import unquote

    from playwright.sync_api import expect
    with signed_in(standalone) as page:
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
        assert standalone.wait_for_run("dblog_dump", unquote(run_id)) == "success"
        page.reload()
        expect(page.get_by_text(f"{standalone.src.source_id}.start").first).to_be_visible()
        expect(page.get_by_text("Success").first).to_be_visible()
        page.screenshot(path=SHOTS / "2-run-succeeded.png")
    conf = standalone.api("GET", f"/dags/dblog_dump/dagRuns/{unquote(run_id)}").json()["conf"]
    assert conf["tables"] == ["accounts"] and conf["chunk_size"] == 300


def test_a_chunk_size_of_zero_typed_in_the_form_is_not_clamped_and_fails_the_run_with_the_reason(standalone):
    from urllib.parse import unquote

    from playwright.sync_api import expect
    from test_rest_api import dumps_of, error_lines
    before = dumps_of(standalone.src)
    with signed_in(standalone) as page:
        page.goto(f"{standalone.url}/dags/dblog_dump")
        page.get_by_role("button", name="Trigger").first.click()
        form = page.get_by_role("dialog")
        chunk = form.locator("input[name=element_chunk_size]")
        chunk.fill("0")
        form.locator("textarea[name=element_tables]").click()  # leave the field: the form clamped here
        expect(chunk).to_have_value("0")
        form.get_by_role("button", name="Trigger").click()
        page.wait_for_url(re.compile(r".*/dags/dblog_dump/runs/.+"))
        run_id = unquote(page.url.rsplit("/runs/", 1)[1])
    assert standalone.api("GET", f"/dags/dblog_dump/dagRuns/{run_id}").json()["conf"]["chunk_size"] == 0
    assert standalone.wait_for_run("dblog_dump", run_id) == "failed"
    errors = error_lines(standalone, run_id, f"{standalone.src.source_id}.start")
    assert any("chunk_size = 0" in e and "set a whole number" in e for e in errors), errors
    assert dumps_of(standalone.src) == before
