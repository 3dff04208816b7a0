"""A signed-in page of the Airflow UI in Debian's chromium (headless, driven by playwright; no
browser download). Screenshots go to SHOTS."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow_fixtures import ROOT

SHOTS = ROOT / ".local" / "test-output" / "ui"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def signed_in(standalone) -> Iterator:
    """A page logged in to `standalone` as the local admin, on its home page."""
    from playwright.sync_api import sync_playwright

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
            yield page
        finally:
            browser.close()
