"""A long `dblog` command shows a live bar per table in a terminal, and only its plain log lines
when its output is piped (as in an Airflow task's log)."""
from __future__ import annotations

from terminal import ESCAPE, in_a_terminal


def test_a_dump_draws_a_bar_per_table_in_a_terminal_and_plain_lines_when_piped(mariadb):
    mariadb.workload(seed=3, rows=300).create()
    mariadb.start_capture()
    table = mariadb.table("accounts")
    code, screen = in_a_terminal(["dump", "--source", mariadb.source_id, "--table", "accounts",
                                  "--chunk-size", "50"], mariadb.env)
    assert code == 0, screen[-3000:]
    assert ESCAPE in screen and "━" in screen, screen[-3000:]   # rich's live bar
    assert f"{table}" in screen and "rows/s" in screen and "300/300" in screen, screen[-3000:]
    assert "chunk 1, 50 rows" not in screen   # the bar replaces the line per chunk

    piped = mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "accounts", "--chunk-size", "50")
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert ESCAPE not in piped.stdout + piped.stderr and "━" not in piped.stderr
    assert f"{table}: chunk 1, 50 rows" in piped.stderr, piped.stderr[-3000:]
