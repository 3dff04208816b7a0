"""Named crash points for the fault tests.

With DBLOG_CRASH_AT=<point>[@<n>] in its environment, a process kills itself with SIGKILL (as a
power cut or the OOM killer would: no cleanup, no finally) the n-th time (default: the first) it
reaches <point>. Unset, as in production, a point costs one string comparison.
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
    if _reached >= int(_NTH or 1):
        os.kill(os.getpid(), signal.SIGKILL)
