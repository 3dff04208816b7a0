"""A `dblog` command run in a pseudo-terminal, as a user at a shell sees it."""
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
