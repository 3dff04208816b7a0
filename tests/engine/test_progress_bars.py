"""A long `dblog` command shows a live bar per table in a terminal, and only its plain log lines
when its output is piped (as in an Airflow task's log)."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

ESCAPE = "\x1b["


def in_a_terminal(args: list[str], env: dict, timeout: float = 300) -> tuple[int, str]:
    """Run `python -m dblog.cli ARGS` with a pseudo-terminal as its standard output and error."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dblog.cli", *args], env={**env, "COLUMNS": "160"},
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    said = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError(f"no output for {timeout}s: {said[-2000:]!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:   # the command exited and closed the terminal
            break
        if not chunk:
            break
        said += chunk
    os.close(leader)
    return proc.wait(timeout), said.decode(errors="replace")


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
