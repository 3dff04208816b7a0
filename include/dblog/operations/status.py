"""What `dblog status` reports: capture state, leader, position and lag; the continuous merge's last
cycle and the tables it fails on (`coordination.merge_beat`); dumps and their progress; the staged
log's size, file count and oldest retained position (`staged_maintain.staged_usage`).

`page_snapshot` is the same picture for the DBLog page in Airflow: per source the capture's
health, the staged log, the recent dumps with progress, current rate and ETA, and the warehouse
tables.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..coordination import store as paths
from ..coordination.health import LAG_SAMPLE_S, capture_health
from ..coordination.merge_beat import read_beat
from ..coordination.store import StateStore
from ..model.schema import WHOLE_TABLE
from ..settings import settings
from ..snapshot.dump import CANCELLED, DONE, RUNNING, dump_status
from ..snapshot.repair import waiting
from ..sources.base import Source
from ..stagedlog.staged_log import StagedLog
from .staged_maintenance import StagedUsage, staged_usage


def capture_status(store: StateStore, source: Source) -> dict:
    health = capture_health(store, source.name)
    return {**asdict(health), "leaders": ([health.leader] if health.leader else []) + health.standby,
            "staged_at": health.last_flush, "head": source.head()}


def merge_status(store: StateStore, source: str, now: float) -> dict | None:
    """The continuous merge's last heartbeat (when it last ran, which tables it merges, which it
    failed on last) and whether it is `live`: dump runs leave their chunks to it (a beat within
    `DBLOG_MERGE_HANDOFF_SECONDS`, which is not 0); None when none ever ran for the source."""
    beat = read_beat(store, source)
    if beat is None:
        return None
    grace = settings().merge.handoff_seconds
    return {**beat.record(), "live": grace > 0 and beat.age(now) <= grace}


def source_status(store: StateStore, source: Source, staged: StagedLog) -> dict:
    dumps = [dump_status(store, source.name, d) for d in store.children(paths.dumps_path(source.name))]
    return {"kind": source.kind, "capture": capture_status(store, source), "merge": merge_status(store, source.name, time.time()),
            "dumps": dumps,
            "repairs": waiting(store, source.name), "staged": asdict(staged_usage(staged, source.name))}


# -- the DBLog page ---------------------------------------------------------------------------
RECENT_DUMPS = 15  # the page lists this many dumps of a source, newest first
TABLES_PER_PAGE = 50   # warehouse tables a source shows at once (each costs a catalog load)
DUMP_TABLES_SHOWN = 20   # a dump's tables named on the page; the rest are counted by status


@dataclass(frozen=True)
class TableView:
    """Which of a source's warehouse tables the page shows: names containing `find`
    (case-insensitive), page `page` of TABLES_PER_PAGE in name order."""
    page: int = 0
    find: str = ""


def progress_fraction(rows: int, estimated: int | None, status: str) -> float | None:
    """Rows done of the estimated total, 0..1; None when there is no estimate. The estimate is a
    catalog statistic, so a running table may pass it: it then shows 99 % until it is done."""
    if status == DONE:
        return 1.0
    if not estimated or estimated <= 0:
        return None
    return round(min(rows / estimated, 0.99), 4)


def eta_seconds(rows: int, estimated: int | None, rate: float | None, chunk_size: int | None,
                delay_s: float | None, parallelism: int | None = 1) -> float | None:
    """Seconds left: the remaining rows at the current reading rate, plus the throttle delay after
    each remaining window of `parallelism` chunk-size splits (the rate excludes both pauses and
    delays). None when unknown."""
    if not estimated or not rate or rate <= 0:
        return None
    remaining = max(estimated - rows, 0)
    window = (chunk_size or 0) * (parallelism or 1)
    chunks = math.ceil(remaining / window) if window else 0
    return round(remaining / rate + chunks * (delay_s or 0.0), 1)


def lag_at(history: list, when: float) -> float | None:
    """The capture lag sampled nearest to `when`, if a sample lies within two sampling periods."""
    near = [(abs(t - when), lag) for t, lag in history if abs(t - when) <= 2 * LAG_SAMPLE_S]
    return min(near)[1] if near else None


def data_age(merged_at: float | None, history: list, now: float) -> tuple[float | None, bool]:
    """How old the newest data of a warehouse table is: a merge takes the source up to the
    capture's checkpoint, which trailed the source by the capture lag of that moment. Returns
    (seconds, exact); without a lag sample near the merge only the lower bound now - merged_at is
    known (exact False). None before the first merge."""
    if merged_at is None:
        return None, False
    lag = lag_at(history, merged_at)
    return round(max(0.0, now - merged_at) + (lag or 0.0), 1), lag is not None


def table_view(table: str, progress: dict | None, merged: dict | None, control: dict, dump_state: str) -> dict:
    p = progress or {"status": "unknown", "rows": 0, "chunks": 0}
    status = p["status"]
    reading = status == RUNNING and dump_state == RUNNING  # a paused or failed table has no rate now
    rate = p.get("recent_rows_per_s") if reading else None
    return {"table": table, "status": status, "rows": p["rows"], "chunks": p["chunks"],
            "fallback_chunks": p.get("fallback_chunks", 0), "estimated_rows": p.get("estimated_rows"),
            "fraction": progress_fraction(p["rows"], p.get("estimated_rows"), status),
            "rows_per_s": rate,
            "eta_s": 0.0 if status == DONE else eta_seconds(p["rows"], p.get("estimated_rows"), rate,
                                                            control.get("chunk_size"), control.get("delay_s"),
                                                            control.get("parallelism")),
            "dropped": (merged or {}).get("dropped"), "merged_rows": (merged or {}).get("rows"),
            "key": key_text(p.get("key"))}   # set when rows are not matched by the primary key


def key_text(key: str | None) -> str | None:
    """How a dumped table's rows are matched, when not by its primary key (`TableProgress.key`),
    as `dblog status` and the DBLog page say it."""
    if key is None:
        return None
    if key == WHOLE_TABLE:
        return "has no key at all: each dump replaces its warehouse table whole, its changes are not captured"
    return f"has no primary key: rows are matched by its {key}"


def dump_view(status: dict, shown: int | None = None) -> dict:
    """One dump for the page: its tables, and totals over them (a total is None while any part of
    it is unknown, rather than a number that looks exact and is not). With `shown`, only that many
    tables are listed, unfinished ones first; `table_count` and `table_statuses` count them all."""
    control, state = status["control"], status["state"]
    tables = [table_view(t, p, status["merged"].get(t), control, state) for t, p in status["tables"].items()]
    unfinished = [t for t in tables if t["status"] not in (DONE, CANCELLED)]
    estimates = [t["estimated_rows"] for t in tables]
    rows = sum(t["rows"] for t in tables)
    estimated = None if any(e is None for e in estimates) else sum(estimates)
    etas = [t["eta_s"] for t in unfinished]
    rates = [t["rows_per_s"] for t in tables if t["rows_per_s"]]
    dropped = [t["dropped"] for t in tables if t["dropped"] is not None]
    return {"id": status["id"], "source": status["source"], "state": state, "created_at": status["created_at"],
            "key_list": status["key_list"], "chunk_size": control.get("chunk_size"),
            "parallelism": control.get("parallelism", 1),
            "delay_s": control.get("delay_s"),
            "tables": tables if shown is None else sorted(tables, key=lambda t: t["status"] in (DONE, CANCELLED))[:shown],
            "table_count": len(tables), "table_statuses": dict(Counter(t["status"] for t in tables)),
            "failed_tables": status["failed"],
            "error": status.get("error"),  # why the dump cannot be shown (an unreadable progress record)
            "rows": rows, "estimated_rows": estimated,
            "fraction": progress_fraction(rows, estimated, DONE if state == DONE else RUNNING),
            "rows_per_s": round(sum(rates), 1) if rates else None,  # tables of a dump read in parallel
            "eta_s": 0.0 if state == DONE else (max(etas) if etas and None not in etas and state == RUNNING
                                                else None),
            "dropped": sum(dropped) if dropped else None}


def recent_dumps(store: StateStore, source: str, limit: int = RECENT_DUMPS) -> list[str]:
    """The newest `limit` dumps by creation time (ids are user-chosen, so their order says nothing)."""
    created = [((store.get(paths.dump_path(source, d)) or {}).get("created_at") or 0, d)
               for d in store.children(paths.dumps_path(source))]
    return [d for _, d in sorted(created, reverse=True)[:limit]]


def page_snapshot(store: StateStore, sources: list[Source], warehouse, now: float | None = None,
                  limit: int = RECENT_DUMPS, usage: Callable[[str], StagedUsage | None] | None = None,
                  views: dict[str, TableView] | None = None) -> dict:
    """Everything the DBLog page shows, as JSON-ready data: reads ZooKeeper, the warehouse
    manifests and, through `usage` (source -> `staged_usage`; the page keeps it a while), the
    staged log's listing; no source database query, so a slow source never slows the page. A
    source with 1,000 tables costs what one page of them does (`views`: per source, default the
    first page), its dumps name DUMP_TABLES_SHOWN tables each and count the rest."""
    now = time.time() if now is None else now
    out = []
    for source in sources:
        health = capture_health(store, source.name, now)
        dumps = [dump_view(dump_status(store, source.name, d), DUMP_TABLES_SHOWN)
                 for d in recent_dumps(store, source.name, limit)]
        view = (views or {}).get(source.name, TableView())
        names = sorted(t for t in warehouse.tables(source.name) if view.find.lower() in t.lower())
        pages = max(1, math.ceil(len(names) / TABLES_PER_PAGE))
        page = min(max(view.page, 0), pages - 1)
        tables = []
        for table in names[page * TABLES_PER_PAGE:(page + 1) * TABLES_PER_PAGE]:
            summary = warehouse.table_summary(source.name, table)
            if summary is None:
                continue
            age, exact = data_age(summary["merged_at"], health.lag_history, now)
            tables.append({**summary, "data_age_s": age, "data_age_exact": exact})
        out.append({"id": source.name, "kind": source.kind, "capture": asdict(health),
                    "merge": merge_status(store, source.name, now), "dumps": dumps,
                    "warehouse": tables, "repairs": waiting(store, source.name),
                    "warehouse_view": {"total": len(names), "page": page, "pages": pages,
                                       "per_page": TABLES_PER_PAGE, "find": view.find},
                    "staged": _staged(usage, source.name)})
    return {"generated_at": now, "sources": out}


def _staged(usage: Callable[[str], StagedUsage | None] | None, source: str) -> dict | None:
    found = None if usage is None else usage(source)
    return None if found is None else asdict(found)
