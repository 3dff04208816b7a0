"""Warehouse tables built the way a merge builds them (the executors' writer + the merge's commit),
without Spark: for the tests of what reads them (readers, oracles, maintenance)."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa

from dblog.warehouse.commit import WrittenFile, commit
from dblog.warehouse.files import TOMBSTONE, bucket_writer
from dblog.warehouse.merged_state import Bucket, TableState
from dblog.warehouse.tables import Warehouse
from dblog.warehouse.types import BUCKET, META, MISSING

SOURCE, TABLE = "src", 'shop.we"ird/ t'   # a name no path or SQL string may take verbatim
COLUMNS = [("id", "bigint"), ("amount", "decimal(38,10)"), ("price", "decimal(12,2)"), ("at", "timestamp"),
           ("local", "timestamp_ntz"), ("data", "binary"), ("note", "string")]
UTC = dt.UTC


def _rows(ids: list[int], bucket: int, round_: int, dead: bool = False) -> pa.RecordBatch:
    n = len(ids)
    at = [None if i % 3 == 0 else dt.datetime(2024, 2, 29, 23, 59, 59, 999_999 - i - round_, tzinfo=UTC) for i in ids]
    data = {
        "id": pa.array(ids, pa.int64()),
        "amount": pa.array([Decimal(f"{i}2345678901234567890123456.{round_}123456789") for i in ids],
                           pa.decimal128(38, 10)),
        "price": pa.array([None if i == 2 else Decimal(f"{i + round_}.05") for i in ids], pa.decimal128(12, 2)),
        "at": pa.array(at, pa.timestamp("us", tz="UTC")),
        "local": pa.array([dt.datetime(1970, 1, 1, 0, 0, 0, 1) + dt.timedelta(days=i) for i in ids], pa.timestamp("us")),
        "data": pa.array([bytes([0, 255, i % 256]) for i in ids], pa.binary()),
        "note": [f"é{i}'r{round_}" for i in ids],
        "_dblog_position": [f"p{round_}"] * n, "_dblog_op": ["d" if dead else "c"] * n, "_dblog_origin": ["log"] * n,
        "_dblog_dump_id": [None] * n,
        "_dblog_merged_at": pa.array([dt.datetime(2024, 3, 1, tzinfo=UTC)] * n, pa.timestamp("us", tz="UTC")),
        "_dblog_missing": [json.dumps(["price", "no,te"]) if i % 2 else None for i in ids],   # JSON in transit
        "_dblog_bucket": pa.array([bucket] * n, pa.int32()), "_t": [dead] * n}
    if round_ == 2:
        data["extra"] = [f"x{i}" for i in ids]
    return pa.RecordBatch.from_pydict(data)


def build(root: str, rounds: int = 3) -> tuple[Warehouse, list[int]]:
    """The table after `rounds` merges (the third adds a column `extra`); its snapshot ids, oldest first."""
    w = Warehouse(root)
    snapshots = []
    for r in range(rounds):
        columns = COLUMNS + ([("extra", "string")] if r == 2 else [])
        state = w.state(SOURCE, TABLE, files=True)
        pending = w.begin(SOURCE, TABLE, ["id"], columns, state)
        batches = [_rows([1, 2, 3, 4], 0, r), _rows([10 + r, 11], 1, r), _rows([5], 0, r, dead=True)]
        out = bucket_writer(pending.location, pending.schema_ipc, f"m{r}")(iter(batches))
        written = [WrittenFile(**row) for row in pa.Table.from_batches(list(out)).to_pylist()]
        new = TableState(SOURCE, TABLE, ["id"], columns, [Bucket(0, None), Bucket(1, ["10"])], log_upto=f"p{r}")
        commit(pending, written, {0, 1}, new.properties())
        snapshots.append(w.load(SOURCE, TABLE).current_snapshot().snapshot_id)
    return w, snapshots


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def commit_rows(warehouse, source: str, table: str, rows: list[dict], columns: list[tuple[str, str]],
                key: list[str], bucket: int = 0, tombstones: list[dict] = (), log_upto: str = "0") -> TableState:
    """One merge's commit replacing bucket `bucket` with `rows` (and `tombstones` on the branch):
    each row gives the data columns and `_dblog_position`."""
    state = warehouse.state(source, table, files=True)
    pending = warehouse.begin(source, table, key, columns, state)
    names = [c for c, _ in columns]

    def batch(items: list[dict], dead: bool) -> pa.RecordBatch:
        data = {c: [r.get(c) for r in items] for c in [*names, *META] if c != MISSING}
        data[MISSING] = [json.dumps(r[MISSING]) if r.get(MISSING) else None for r in items]
        data["_dblog_op"] = ["d" if dead else (r.get("_dblog_op") or "c") for r in items]
        data[BUCKET] = pa.array([bucket] * len(items), pa.int32())
        data[TOMBSTONE] = [dead] * len(items)
        return pa.RecordBatch.from_pydict(data)

    batches = [batch(list(rows), False)] + ([batch(list(tombstones), True)] if tombstones else [])
    out = pa.Table.from_batches(list(bucket_writer(pending.location, pending.schema_ipc, "test")(iter(batches))))
    written = [WrittenFile(**r) for r in out.to_pylist()]
    buckets = [b for b in (state.buckets if state else []) if b.id != bucket]
    new = TableState(source, table, key, columns, sorted(buckets + [Bucket(bucket, None)], key=lambda b: b.id),
                     log_upto=log_upto)
    for b in new.buckets[1:]:
        b.lo = b.lo or [str(b.id)]
    commit(pending, written, {bucket}, new.properties())
    return new
