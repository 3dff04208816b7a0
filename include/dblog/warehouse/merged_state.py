"""What a warehouse table's current snapshot says was merged: its buckets, the log position and
the dump chunks it holds. Recorded as `dblog.*` snapshot summary properties of the same commit
that swaps the data files, so no side file can disagree with the table.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import WarehouseError
from .catalog import FORMAT

LOG_UPTO = "dblog.log-upto"   # the staged log position a snapshot merged up to


@dataclass
class Bucket:
    id: int                        # stable: the table's partition value, kept across splits
    lo: list[str] | None           # inclusive lower key bound (Spark's string form per key column)
    rows: int = 0
    tombstone_rows: int = 0
    missing_rows: int = 0          # live rows with a value nothing proved yet (`_dblog_missing`)
    files: list = field(default_factory=list)        # the bucket's DataFiles on main
    tombstones: list = field(default_factory=list)   # ... and on the tombstone branch
    deletes: list = field(default_factory=list)      # its position delete files on main (`deletes`)


@dataclass
class TableState:
    source: str
    table: str
    key: list[str]
    columns: list[tuple[str, str]]                 # [name, Spark type], in table order
    buckets: list[Bucket] = field(default_factory=list)
    log_upto: str | None = None                    # every staged event <= this is merged
    chunks: dict[str, list[list[int]]] = field(default_factory=dict)  # dump id -> merged ranges
    # dump id -> its chunks are numbered below this (`dump.chunk_numbers_below`), once it finished
    chunk_counts: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    merged_at: float | None = None
    rows: int = 0
    tombstones: int = 0
    branch_head: int | None = None                 # the tombstone branch's snapshot when read
    whole: str | None = None                       # a table with no key: the whole-table snapshot it holds

    @property
    def stores_nothing(self) -> bool:
        """No data file and no tombstone: a merge into it is a first load."""
        return not any(b.files or b.tombstones for b in self.buckets)

    @property
    def missing_rows(self) -> int:
        return sum(b.missing_rows for b in self.buckets)

    def chunk_merged(self, dump_id: str, chunk: int) -> bool:
        return any(lo <= chunk <= hi for lo, hi in self.chunks.get(dump_id, []))

    def merged_below(self, dump_id: str, count: int) -> bool:
        """Every chunk number of the dump below `count` is merged."""
        covered = -1
        for lo, hi in sorted(self.chunks.get(dump_id, [])):
            if lo > covered + 1:
                break
            covered = max(covered, hi)
        return covered >= count - 1

    def add_chunks(self, dump_id: str, numbers: set[int]) -> None:
        merged = {n for lo, hi in self.chunks.get(dump_id, []) for n in range(lo, hi + 1)} | numbers
        self.chunks[dump_id] = to_ranges(merged)

    def next_id(self) -> int:
        return max((b.id for b in self.buckets), default=-1) + 1

    def properties(self) -> dict[str, str]:
        """The `dblog.*` summary properties of a snapshot holding this state (all of them, every
        time: summaries are not inherited)."""
        return {"dblog.format": FORMAT, LOG_UPTO: self.log_upto or "",
                "dblog.chunks": json.dumps(self.chunks, separators=(",", ":")),
                "dblog.chunk-counts": json.dumps(self.chunk_counts, separators=(",", ":")),
                "dblog.buckets": json.dumps([[b.id, b.lo] for b in self.buckets], separators=(",", ":")),
                "dblog.missing": json.dumps({str(b.id): b.missing_rows for b in self.buckets if b.missing_rows}),
                "dblog.merged-at": repr(self.merged_at or 0.0), **({"dblog.whole": self.whole} if self.whole else {})}

    @classmethod
    def from_properties(cls, source: str, table: str, key: list[str], columns: list[tuple[str, str]],
                        props: dict[str, str]) -> TableState:
        if props.get("dblog.format") != FORMAT:
            raise WarehouseError(f"{source}/{table}: warehouse snapshot format {props.get('dblog.format')!r} is not "
                             f"{FORMAT!r}; this dblog is older or newer than the one that wrote the table")
        missing = {int(k): v for k, v in json.loads(props.get("dblog.missing") or "{}").items()}
        buckets = [Bucket(i, lo, missing_rows=missing.get(i, 0)) for i, lo in json.loads(props["dblog.buckets"])]
        return cls(source, table, key, columns, buckets, props.get(LOG_UPTO) or None,
                   json.loads(props.get("dblog.chunks") or "{}"), json.loads(props.get("dblog.chunk-counts") or "{}"),
                   merged_at=float(props.get("dblog.merged-at", 0)), whole=props.get("dblog.whole") or None)


def to_ranges(numbers: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out
