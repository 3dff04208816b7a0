"""Warehouse tables built as a merge builds them, without Spark: the executor's bucket writer
writes the files, the one-transaction commit records them (tests of maintenance and its task)."""
from __future__ import annotations

import datetime as dt
import decimal
import importlib
import json
import os
import time

import pyarrow as pa

from dblog.warehouse.commit import WrittenFile, commit
from dblog.warehouse.files import bucket_writer
from dblog.warehouse.merged_state import Bucket, TableState

SRC, TABLE = "src", "shop.order lines"
KEY = ["id"]
COLS = [("id", "bigint"), ("amount", "decimal(12,2)"), ("name", "string"), ("ts", "timestamp")]
SHOWN = ["id", "amount", "name", "ts", "_dblog_op", "_dblog_missing"]
KEEP_ALL, NO_COMPACTION = 10_000_000.0, 100_000


def _batch(ids: list[int], bucket: int, dead: bool = False) -> pa.RecordBatch:
    n = len(ids)
    utc = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_pydict({
        "id": pa.array(ids, pa.int64()), "amount": [decimal.Decimal(i) / 4 for i in ids],
        "name": [f"n{i}" for i in ids],
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids], utc),
        "_dblog_position": [f"p{i}" for i in ids], "_dblog_op": ["d" if dead else "c"] * n,
        "_dblog_origin": ["log"] * n, "_dblog_dump_id": pa.nulls(n, pa.string()),
        "_dblog_merged_at": pa.array([dt.datetime.now(dt.UTC)] * n, utc),
        "_dblog_missing": [json.dumps(["amount"]) if i % 3 == 0 and not dead else None for i in ids],
        "_dblog_bucket": pa.array([bucket] * n, pa.int32()), "_t": [dead] * n})


def merge(warehouse, live: dict[int, list[int]], dead: dict[int, list[int]] | None = None, *, tasks: int = 1,
          upto: str = "p1") -> None:
    """One merge of the buckets in `live` / `dead` (ids per bucket), written by `tasks` executor
    tasks, each writing its own file per bucket (a bucket of `tasks` files)."""
    dead = dead or {}
    state = warehouse.state(SRC, TABLE, files=True)
    pending = warehouse.begin(SRC, TABLE, KEY, COLS, state)
    written = []
    for task in range(tasks):
        batches = [_batch(ids[task::tasks], b) for b, ids in live.items() if ids[task::tasks]]
        batches += [_batch(ids[task::tasks], b, True) for b, ids in dead.items() if ids[task::tasks]]
        out = bucket_writer(pending.location, pending.schema_ipc, f"m{upto}-{task}")(iter(batches))
        written += [WrittenFile(**row) for row in pa.Table.from_batches(list(out)).to_pylist()]
    buckets = [Bucket(0, None, missing_rows=1), Bucket(1, ["100"])]
    new = TableState(SRC, TABLE, KEY, COLS, buckets, log_upto=upto, chunks={"d1": [[1, 3]]}, merged_at=time.time())
    commit(pending, written, set(live) | set(dead), new.properties())


def rows(warehouse, ref: str = "main") -> list[dict]:
    t = warehouse.load(SRC, TABLE)
    return sorted(t.scan(selected_fields=tuple(SHOWN)).use_ref(ref).to_arrow().to_pylist(), key=lambda r: r["id"])


def plant(path: str, age_seconds: float) -> str:
    """A file as a killed merge leaves it, last modified `age_seconds` ago."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"PAR1 left behind by a killed merge")
    stamp = time.time() - age_seconds
    os.utime(path, (stamp, stamp))
    return path


def duckdb_rows(warehouse) -> list[dict]:
    """The table as DuckDB's iceberg extension reads it (extensions loaded by path: no network)."""
    import duckdb

    def extension(name: str) -> str:
        pkg = importlib.import_module(f"duckdb_extension_{name}")
        return os.path.join(os.path.dirname(pkg.__file__), "extensions", f"v{duckdb.__version__}",
                            f"{name}.duckdb_extension")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for name in ("avro", "iceberg"):
        con.execute(f"LOAD '{extension(name)}'")
    location = warehouse.load(SRC, TABLE).metadata_location
    data = con.execute(f"SELECT {', '.join(SHOWN)} FROM iceberg_scan('{location}') ORDER BY id").arrow()
    return (data.read_all() if hasattr(data, "read_all") else data).to_pylist()


def files_under(warehouse) -> set[str]:
    location = warehouse.load(SRC, TABLE).metadata.location.removeprefix("file://")
    return {os.path.join(d, f) for d, _, names in os.walk(location) for f in names}


class FakeStore:
    """Stands in for the ZooKeeper store: records the leases taken and released."""

    def __init__(self, busy: set[str] = frozenset()):  # type: ignore[assignment]
        self.events: list[tuple[str, str]] = []
        self.busy = busy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def children(self, path):   # no dump registered
        return []

    def get(self, path):         # no checkpoint yet
        return None

    def delete(self, path, recursive=False):
        self.events.append(("delete", path))

    def lease(self, path, owner, timeout):
        from dblog.coordination import store as paths
        if path in self.busy:
            raise paths.LeaseTimeout(path)
        self.events.append(("take", path))
        store = self

        class Lease:
            def release(self):
                store.events.append(("release", path))
        return Lease()
