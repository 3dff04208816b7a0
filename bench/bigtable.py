"""The table the dump scenarios copy, the write load on it, and the row-diff of a copy.

`t (id, name, amount, created, v)`: `v` counts a row's updates, so a copy differs from the
source exactly where a key is missing, extra, duplicated, or carries another `v`.

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
import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).parent))
from common import admin, namespace, run_sql  # noqa: E402

TABLE = "t"


def create(kind: str, ns: str, rows: int) -> None:
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


def copy_versions(path: str | list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(id, v) of a Parquet copy: a directory read as a dataset (files named _* or .* are not data),
    or the list of its data files."""
    table = ds.dataset(path, format="parquet").to_table(columns=["id", "v"])
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
