"""The chaos oracles. Each returns a list of problems (empty: the property holds), so a run can
report every broken property at once.

1. `staged_once_in_order`: the staged log, read back, holds every committed transaction of the
   writer exactly once, in commit order, with the same row changes per table (from its journal).
2. `PositionHistory`: in the warehouse's merge history no key's position ever decreases (no old
   row overwrites a newer change), tombstones included.
3. `warehouse_differs`: once the writes stop and the stream is merged, every warehouse table
   equals its source row for row.
"""
from __future__ import annotations

import json

import pyarrow as pa

from dblog.warehouse.catalog import BRANCH


def transactions(logs: list[pa.Table], tables: list[str]) -> list[dict]:
    """Per staged transaction (in position order), its row changes per table. `logs[i]` is the
    staged log of `tables[i]` as `StagedLog.read_log` returns it (sorted, each position once)."""
    events = sorted((p, tx, t) for log, t in zip(logs, tables)
                    for p, tx in zip(log["_position"].to_pylist(), log["_txid"].to_pylist()))
    out, current = [], None
    for _, txid, table in events:
        if current is None or txid != current[0]:
            current = (txid, {})
            out.append(current)
        current[1][table] = current[1].get(table, 0) + 1
    return [counts for _, counts in out]


def staged_once_in_order(journal: list[dict], staged: list[dict]) -> list[str]:
    if journal == staged:
        return []
    for i, (want, got) in enumerate(zip(journal, staged)):
        if want != got:
            return [f"staged transaction {i} is {got}, the writer committed {want} "
                    f"(context: committed {journal[max(0, i - 2):i + 3]}, staged {staged[max(0, i - 2):i + 3]})"]
    return [f"the writer committed {len(journal)} transactions, the staged log holds {len(staged)}"]


class PositionHistory:
    """The highest position seen per key (live rows and tombstones) across warehouse versions."""

    def __init__(self):
        self.seen: dict[str, dict[tuple, str]] = {}
        self.versions = 0

    def observe(self, warehouse, source: str) -> list[str]:
        problems = []
        for table in warehouse.tables(source):
            t = warehouse.load(source, table)
            if t is None:
                continue
            self.versions += 1
            seen = self.seen.setdefault(table, {})
            key = json.loads(t.properties["dblog.key"])
            for ref in ("main", BRANCH):   # live rows and tombstones
                if t.snapshot_by_name(ref) is None:
                    continue
                data = t.scan(selected_fields=(*key, "_dblog_position")).use_ref(ref).to_arrow().to_pydict()
                for values in zip(*(data[k] for k in key), data["_dblog_position"]):
                    k, position = tuple(values[:-1]), values[-1]
                    before = seen.get(k)
                    if before is not None and position < before:
                        problems.append(f"{table} key {k} went back from position {before} to {position}")
                    if before is None or position > before:
                        seen[k] = position
        return problems


def warehouse_differs(diffs: dict) -> list[str]:
    """`diffs`: table -> `dblog.operations.verify.Diff` of source against warehouse."""
    return [f"{t}: {len(d.missing)} missing, {len(d.extra)} extra, {len(d.different)} different, e.g. {d.keys()[:3]}"
            for t, d in diffs.items() if not d.equal]
