"""The sample database (`accounts`, `order_lines`) on the local services, for `make demo` and
`make airflow`: loaded through the services' admin users, captured through the `dblog` user.

    python -m dblog_dev.sample    # load them on every configured source that lacks them
"""
from __future__ import annotations

import sys

from dblog import connections

from . import local
from .workload import Workload, connect

TABLES = ("accounts", "order_lines")


def admin_uri(source_id: str) -> str:
    if source_id not in local.SOURCES:
        raise connections.ConfigError(f"{source_id} is not a local sample source; use one of {', '.join(local.SOURCES)}")
    return local.admin_uri(local.SOURCES[source_id])


def load(source_id: str, rows: int = 20_000, reset: bool = False) -> bool:
    """Create and fill the sample tables (True), or leave existing ones alone (False). `reset`
    drops them first, and the replication slot with them (a fresh start for the demo)."""
    src = connections.source(source_id)
    if not reset and {f"{src.namespace}.{t}" for t in TABLES} <= set(src.tables()):
        return False
    kind, conn = connect(admin_uri(source_id))
    try:
        cur = conn.cursor()
        for t in reversed(TABLES):
            cur.execute(f"DROP TABLE IF EXISTS {src.namespace}.{t}")
        if kind == "postgres" and reset:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                        [src.slot])  # type: ignore[attr-defined]  # a PostgreSQL source's
        conn.commit()
        Workload(kind, conn, src.namespace, seed=1, rows=rows).create()
    finally:
        conn.close()
    return True


if __name__ == "__main__":
    for sid in connections.source_ids():
        print(f"{sid}: " + ("sample tables loaded" if load(sid) else "sample tables already there"))
    sys.exit(0)
