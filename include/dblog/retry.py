"""Riding out a source restart: retry what failed only because the server was unreachable."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .sources.base import Source, SourceUnavailable

T = TypeVar("T")
log = logging.getLogger("dblog.retry")


def reconnecting(source: Source, attempt: Callable[[], T], what: str, *, stop: threading.Event | None = None,
                 give_up_after: float | None = None, max_backoff: float = 10.0) -> T:
    """Run `attempt` until it returns, retrying (with backoff) while the source is unavailable.

    Any other error is raised at once, as is the last one after `give_up_after` seconds of
    failures; `stop` being set ends the waiting early.
    """
    backoff, first_failure = 0.5, None
    while True:
        try:
            return attempt()
        except Exception as exc:
            if not source.transient(exc) or (stop is not None and stop.is_set()):
                raise
            first_failure = first_failure or time.monotonic()
            if give_up_after is not None and time.monotonic() - first_failure > give_up_after:
                raise SourceUnavailable(f"{source.name}: {what} kept failing for {give_up_after:.0f} s: {exc}. "
                                        "Check that the server runs; re-running resumes where this stopped.") from exc
            log.warning("%s: %s: source unavailable (%s); retrying in %.1f s", source.name, what,
                        str(exc).strip().splitlines()[0], backoff)
            if stop is not None:
                stop.wait(backoff)
            else:
                time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
