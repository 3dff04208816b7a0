"""Named crash points for the fault tests.

With DBLOG_CRASH_AT=<point>[@<n>] in its environment, a process kills itself with SIGKILL (as a
power cut or the OOM killer would: no cleanup, no finally) the n-th time (default: the first) it
reaches <point>. With DBLOG_CRASH_ONCE=<file> as well, only the first process to get there
does (it creates the file): for points reached in processes a retry starts afresh, such as a
Spark executor's Python worker. Unset, as in production, a point costs one string comparison.
"""
from __future__ import annotations

import os
import signal

_POINT, _, _NTH = os.environ.get("DBLOG_CRASH_AT", "").partition("@")
_reached = 0


def crash_point(name: str) -> None:
    global _reached
    if name != _POINT:
        return
    _reached += 1
    if _reached >= int(_NTH or 1) and _first_to_crash():
        os.kill(os.getpid(), signal.SIGKILL)


def _first_to_crash() -> bool:
    once = os.environ.get("DBLOG_CRASH_ONCE")
    if not once:
        return True
    try:
        os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
