"""MariaDB chunk reads with PyMySQL against mysqlclient, same table, same run (alternating reps).

    python bench/driver_bench.py [NAMESPACE=bench_sweep] [TABLE=t] [CHUNK=20000] [REPS=3]

Reads the whole table in keyset chunks on one connection, as a dump's single split does.
Prints rows/s per driver (median) and the ratio; uses a table `make bench` left (scenario 5)."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import PORTS  # noqa: E402


def read_all(conn, ns: str, table: str, chunk: int) -> int:
    rows, after = 0, None
    cur = conn.cursor()
    while True:
        where = "" if after is None else f" WHERE id > {after}"
        cur.execute(f"SELECT * FROM `{ns}`.`{table}`{where} ORDER BY id LIMIT {chunk}")
        got = cur.fetchall()
        if not got:
            return rows
        rows, after = rows + len(got), got[-1][0]


def main(ns: str = "bench_sweep", table: str = "t", chunk: int = 20_000, reps: int = 3) -> None:
    import MySQLdb
    import pymysql
    kw = dict(host="127.0.0.1", port=int(PORTS["MARIADB"]), user="root", charset="utf8mb4")
    drivers = {"pymysql": lambda: pymysql.connect(**kw), "mysqlclient": lambda: MySQLdb.connect(**kw)}
    rates: dict[str, list[float]] = {d: [] for d in drivers}
    for _ in range(reps):
        for name, connect in drivers.items():
            conn = connect()
            started = time.perf_counter()
            rows = read_all(conn, ns, table, chunk)
            rates[name].append(rows / (time.perf_counter() - started))
            conn.close()
    med = {d: statistics.median(r) for d, r in rates.items()}
    for d, r in med.items():
        print(f"{d}: {r:,.0f} rows/s")
    print(f"mysqlclient / pymysql: {med['mysqlclient'] / med['pymysql']:.2f}x")


if __name__ == "__main__":
    main(*[int(a) if a.isdigit() else a for a in sys.argv[1:]])
