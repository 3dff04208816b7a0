"""Warehouse tables built without Spark, for tests of what reads them (oracles, maintenance):
rows written by the executors' own writer and committed by the merge's own commit."""
from __future__ import annotations

import json

import pyarrow as pa
from dblog.warehouse.commit import WrittenFile, commit
from dblog.warehouse.files import TOMBSTONE, bucket_writer
from dblog.warehouse.state import Bucket, TableState
from dblog.warehouse.types import BUCKET, META, MISSING


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
