"""Column renames the capture read, kept for the merge to rename the warehouse's fields.

A renamed column keeps its values in the source, without row events. The staged log holds the
column under its old name before the rename and under the new one after it, and nothing in a
staged file says the two are one column (MariaDB has no column ids). So the capture records
each rename it reads (the DDL statement on MariaDB, the column's attnum on PostgreSQL) here,
fenced, before its checkpoint passes it (`Capture._flush`, as the repair requests), and the merge
that reaches it renames the Iceberg field, keeping its id and every row's value
(`dblog.merge.column_renames`).

Per table one node: a list of [position, old, new], in log order, at most `MAX_RENAMES` (a few
bytes each). They are kept past staged-log retention: a table with no row change since its
rename may be merged much later, and a merge reads only those after the table's last merge.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model.events import ColumnRename
from . import store as paths
from .store import Lease, StateStore

MAX_RENAMES = 200


def record(store: StateStore, lease: Lease, source: str, renames: Iterable[ColumnRename]) -> int:
    """Keep `renames`, fenced by the capture's `lease`; returns how many were new (a re-run after
    a crash reads the same renames again, which changes nothing)."""
    by_table: dict[str, list[ColumnRename]] = {}
    for r in renames:
        by_table.setdefault(r.table, []).append(r)
    added = 0
    for table, found in by_table.items():
        def change(value: Any, found: list[ColumnRename] = found) -> list[list[str]]:
            nonlocal added
            kept = [list(e) for e in value or ()]
            new = [[r.position, r.old, r.new] for r in found if [r.position, r.old, r.new] not in kept]
            added += len(new)
            return sorted(kept + new)[-MAX_RENAMES:]
        store.update(paths.renames_path(source, table), change, lease=lease)
    return added


def of_table(store: StateStore, source: str, table: str) -> list[ColumnRename]:
    """The table's column renames, in log order (one read)."""
    return [ColumnRename(table, old, new, position) for position, old, new in
            store.get(paths.renames_path(source, table)) or ()]
