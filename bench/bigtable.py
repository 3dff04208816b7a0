"""The table the dump scenarios copy, the write load on it, and the row-diff of a copy.

`t (id, name, amount, created, v)`, or 20 columns shaped like the NYC taxi trips (`TAXI_COLUMNS`,
`DBLOG_BENCH_DUMP_SHAPE=taxi`): `v` counts a row's updates, so a copy differs from the source
exactly where a key is missing, extra, duplicated, or carries another `v`.

Run as a process, it is the concurrent writer (`python bench/bigtable.py write KIND NS RATE OUT`):
row changes at RATE per second in transactions of 10 (updates of random rows, inserts above
the top key, deletes), each transaction timed, commit included, until SIGTERM.
"""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).parent))
from common import admin, namespace, run_sql  # noqa: E402

TABLE = "t"


# Shaped like the NYC taxi trips table OLake's published load benchmark copies (timestamps,
# decimals, doubles, integers, short strings; 20 columns), generated, plus `v` for the row-diff.
# Values vary per row so that no column compresses to nothing.
TAXI_COLUMNS = [
    ("vendor_id", "SMALLINT", "SMALLINT", "1 + {g} % 2"),
    ("pickup_at", "DATETIME(6)", "TIMESTAMP", "{ts}"),
    ("dropoff_at", "DATETIME(6)", "TIMESTAMP", "{ts_later}"),
    ("passenger_count", "SMALLINT", "SMALLINT", "1 + {g} % 6"),
    ("trip_distance", "DOUBLE", "DOUBLE PRECISION", "({g} % 3000) / 97.0"),
    ("ratecode_id", "SMALLINT", "SMALLINT", "1 + {g} % 5"),
    ("store_and_fwd_flag", "CHAR(1)", "CHAR(1)", "CASE WHEN {g} % 50 = 0 THEN 'Y' ELSE 'N' END"),
    ("pu_location_id", "INT", "INT", "1 + {g} % 263"),
    ("do_location_id", "INT", "INT", "1 + ({g} * 7) % 263"),
    ("payment_type", "SMALLINT", "SMALLINT", "1 + {g} % 4"),
    ("fare_amount", "DECIMAL(9,2)", "NUMERIC(9,2)", "({g} % 9000) / 100.0 + 2.5"),
    ("extra", "DECIMAL(9,2)", "NUMERIC(9,2)", "({g} % 4) / 2.0"),
    ("mta_tax", "DECIMAL(9,2)", "NUMERIC(9,2)", "0.50"),
    ("tip_amount", "DECIMAL(9,2)", "NUMERIC(9,2)", "({g} % 1500) / 100.0"),
    ("tolls_amount", "DECIMAL(9,2)", "NUMERIC(9,2)", "CASE WHEN {g} % 20 = 0 THEN 6.55 ELSE 0 END"),
    ("improvement_surcharge", "DECIMAL(9,2)", "NUMERIC(9,2)", "0.30"),
    ("total_amount", "DECIMAL(10,2)", "NUMERIC(10,2)", "({g} % 12000) / 100.0 + 3.8"),
    ("congestion_surcharge", "DECIMAL(9,2)", "NUMERIC(9,2)", "CASE WHEN {g} % 3 = 0 THEN 2.5 ELSE 0 END"),
    ("airport_fee", "DECIMAL(9,2)", "NUMERIC(9,2)", "CASE WHEN {g} % 25 = 0 THEN 1.25 ELSE 0 END"),
]


def create(kind: str, ns: str, rows: int, shape: str = "narrow") -> None:
    """The table `ns.t` of `rows` rows: `narrow` (the columns above) or `taxi` (`TAXI_COLUMNS`)."""
    if shape == "taxi":
        return _create_taxi(kind, ns, rows)
    if shape != "narrow":
        raise ValueError(f"unknown table shape {shape!r}: narrow or taxi")
    namespace(kind, ns)
    if kind == "mysql":
        run_sql(kind, f"CREATE TABLE {ns}.{TABLE} (id BIGINT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2), "
                      "created DATETIME(6), v BIGINT NOT NULL)",
                f"INSERT INTO {ns}.{TABLE} SELECT seq, CONCAT('name-', seq), seq / 7, NOW(6), 0 "
                f"FROM {ns}.seq_1_to_{rows}")
    else:
        run_sql(kind, f"CREATE TABLE {ns}.{TABLE} (id BIGINT PRIMARY KEY, name VARCHAR(40), amount NUMERIC(12,2), "
                      "created TIMESTAMP, v BIGINT NOT NULL)",
                f"INSERT INTO {ns}.{TABLE} SELECT g, 'name-' || g, g / 7.0, now(), 0 FROM generate_series(1, {rows}) g",
                f"VACUUM ANALYZE {ns}.{TABLE}")


def _create_taxi(kind: str, ns: str, rows: int) -> None:
    namespace(kind, ns)
    mysql = kind == "mysql"
    g = "seq" if mysql else "g"
    ts = (f"TIMESTAMP('2024-01-01') + INTERVAL ({g} * 3) SECOND" if mysql
          else f"TIMESTAMP '2024-01-01' + ({g} * 3) * INTERVAL '1 second'")
    later = (f"TIMESTAMP('2024-01-01') + INTERVAL ({g} * 3 + 300 + {g} % 1800) SECOND" if mysql
             else f"TIMESTAMP '2024-01-01' + ({g} * 3 + 300 + {g} % 1800) * INTERVAL '1 second'")
    columns = ", ".join(f"{name} {my if mysql else pg}" for name, my, pg, _ in TAXI_COLUMNS)
    values = ", ".join(expr.format(g=g, ts=ts, ts_later=later) for *_, expr in TAXI_COLUMNS)
    create_table = f"CREATE TABLE {ns}.{TABLE} (id BIGINT PRIMARY KEY, {columns}, v BIGINT NOT NULL)"
    if mysql:
        run_sql(kind, create_table, f"INSERT INTO {ns}.{TABLE} SELECT seq, {values}, 0 FROM {ns}.seq_1_to_{rows}")
    else:
        run_sql(kind, create_table, f"INSERT INTO {ns}.{TABLE} SELECT g, {values}, 0 FROM generate_series(1, {rows}) g",
                f"VACUUM ANALYZE {ns}.{TABLE}")


def key_range(kind: str, ns: str) -> tuple[int, int]:
    conn = admin(kind)
    cur = conn.cursor()
    cur.execute(f"SELECT min(id), max(id) FROM {ns}.{TABLE}")
    lo, hi = cur.fetchone()
    conn.close()
    return int(lo), int(hi)


def source_versions(kind: str, ns: str) -> tuple[np.ndarray, np.ndarray]:
    conn = admin(kind)
    if kind == "postgres":
        conn.autocommit = False
        cur = conn.cursor(name="versions")
        cur.itersize = 100_000
    else:
        import pymysql.cursors
        cur = conn.cursor(pymysql.cursors.SSCursor)
    cur.execute(f"SELECT id, v FROM {ns}.{TABLE}")
    ids, vs = [], []
    while batch := cur.fetchmany(100_000):
        a = np.array(batch, dtype=np.int64)
        ids.append(a[:, 0]); vs.append(a[:, 1])
    conn.close()
    return np.concatenate(ids), np.concatenate(vs)


def copy_versions(copy: str | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(id, v) of a copy: a Parquet directory read as a dataset (files named _* or .* are not
    data), or the rows a reader already read (a warehouse table: `Harness.warehouse_table`)."""
    table = copy if isinstance(copy, pa.Table) else ds.dataset(copy, format="parquet").to_table(columns=["id", "v"])
    return table["id"].to_numpy(), table["v"].to_numpy()


def rows_differing(source: tuple[np.ndarray, np.ndarray], copy: tuple[np.ndarray, np.ndarray]) -> dict:
    """Keys the copy lacks, keys it has the source does not, keys it holds twice, and keys whose
    version differs: together, the rows a reader of the copy gets wrong."""
    s_ids, s_v = source
    c_ids, c_v = copy
    c_unique, first = np.unique(c_ids, return_index=True)
    common, si, ci = np.intersect1d(s_ids, c_unique, assume_unique=True, return_indices=True)
    out = {"missing": int(len(s_ids) - len(common)), "extra": int(len(c_unique) - len(common)),
           "duplicated": int(len(c_ids) - len(c_unique)),
           "stale": int(np.count_nonzero(s_v[si] != c_v[first[ci]]))}
    out["total"] = sum(out.values())
    return out


def writer(kind: str, ns: str, rate: float, out: str, seed: int = 1) -> None:
    import random
    import time
    rng = random.Random(seed)
    conn = admin(kind)
    if kind == "mysql":
        conn.autocommit(False)
    else:
        conn.autocommit = False
    lo, hi = key_range(kind, ns)
    now = "NOW(6)" if kind == "mysql" else "now()"
    latencies: list[tuple[float, float]] = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    cur, start, changes = conn.cursor(), time.monotonic(), 0
    try:
        while not stop:
            began = time.perf_counter()
            for _ in range(10):
                roll = rng.random()
                if roll < 0.8:
                    cur.execute(f"UPDATE {ns}.{TABLE} SET v = v + 1, amount = amount + 1 WHERE id = {rng.randint(lo, hi)}")
                elif roll < 0.9:
                    hi += 1
                    cur.execute(f"INSERT INTO {ns}.{TABLE} VALUES ({hi}, 'new-{hi}', 1.50, {now}, 0)")
                else:
                    cur.execute(f"DELETE FROM {ns}.{TABLE} WHERE id = {rng.randint(lo, hi)}")
            conn.commit()
            changes += 10
            latencies.append((time.time(), time.perf_counter() - began))
            time.sleep(max(0.0, start + changes / rate - time.monotonic()))
    finally:
        Path(out).write_text(json.dumps(latencies))
        conn.close()


if __name__ == "__main__":
    if sys.argv[1] != "write":
        sys.exit(f"usage: {sys.argv[0]} write KIND NAMESPACE RATE OUT")
    writer(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
