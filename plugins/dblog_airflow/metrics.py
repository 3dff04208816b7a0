"""dblog's metrics, sent through Airflow's own metrics backend (StatsD or OpenTelemetry, whatever
the deployment's `[metrics]` section configures), so existing dashboards and alerts pick them up.

Every name is `dblog.<metric>.<subject...>` (plain StatsD has no tags) and carries the same facts
as tags (`source`, `table`, `dump_id`) for backends that keep them. The names and their meaning
are listed in docs/airflow.md (Metrics).
"""
from __future__ import annotations

import re
from typing import Any

PREFIX = "dblog"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def name(metric: str, *subject: str) -> str:
    """`dblog.<metric>.<subject...>`; each subject part (a source or table name, which may hold any
    character) reduced to one dotted part of the characters every StatsD backend accepts."""
    return ".".join([PREFIX, metric, *(_UNSAFE.sub("_", str(p)).strip("_") or "_" for p in subject)])


def _stats():
    from airflow.sdk.observability import stats
    return stats


def gauge(metric: str, value: float, subject: tuple[str, ...], **tags: Any) -> None:
    _stats().gauge(name(metric, *subject), value, tags=_tags(tags))


def incr(metric: str, count: int, subject: tuple[str, ...], **tags: Any) -> None:
    _stats().incr(name(metric, *subject), count, tags=_tags(tags))


def timing(metric: str, seconds: float, subject: tuple[str, ...], **tags: Any) -> None:
    import datetime as dt
    _stats().timing(name(metric, *subject), dt.timedelta(seconds=seconds), tags=_tags(tags))


def _tags(tags: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in tags.items() if v is not None}
