"""Named crash points for the fault tests.

With DBLOG_CRASH_AT=<point>[@<n>] in its environment, a process kills itself with SIGKILL (as a
power cut or the OOM killer would: no cleanup, no finally) the n-th time (default: the first) it
reaches <point>. With DBLOG_CRASH_ONCE=<file> as well, only the first process to get there
does (it creates the file): for points reached in processes a retry starts afresh, such as a
Spark executor's Python worker. With DBLOG_CRASH_DRIVER=1, the process that started the run (the
first to import this module with DBLOG_CRASH_AT set: a Spark driver, whose executors inherit its
environment) is killed first: a point reached in an executor then kills the whole job, as a lost
driver machine would. Unset, as in production, a point costs one string comparison.
"""
from __future__ import annotations

import os
import signal

_POINT, _, _NTH = os.environ.get("DBLOG_CRASH_AT", "").partition("@")
_reached = 0
if _POINT:
    os.environ.setdefault("DBLOG_CRASH_ROOT", str(os.getpid()))


def crash_point(name: str) -> None:
    global _reached
    if name != _POINT:
        return
    _reached += 1
    if _reached >= int(_NTH or 1) and _first_to_crash():
        if os.environ.get("DBLOG_CRASH_DRIVER") == "1":
            os.kill(int(os.environ["DBLOG_CRASH_ROOT"]), signal.SIGKILL)
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
