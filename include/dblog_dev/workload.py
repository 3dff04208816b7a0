"""A seeded, realistic write workload for the demo, the tests and the benchmarks.

Two tables per namespace: `accounts` (integer key; DECIMAL, timestamp, text, binary, NULLs) and
`order_lines` (composite key). The mix: inserts, updates, deletes, delete + re-insert of the
same key, primary-key updates and multi-row transactions. Run it as its own process
(`python -m dblog_dev.workload URI NAMESPACE --seconds 10`) so it competes with the capture the way
an application would.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from urllib.parse import urlsplit

DDL = {
    "mysql": [
        "CREATE TABLE IF NOT EXISTS {ns}.accounts (id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
        "balance DECIMAL(12,2), updated_at TIMESTAMP(6) NULL, note TEXT, data VARBINARY(64)) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS {ns}.order_lines (order_id INT NOT NULL, line_no INT NOT NULL, "
        "sku VARCHAR(32), qty INT, price DECIMAL(10,2), PRIMARY KEY (order_id, line_no)) ENGINE=InnoDB",
    ],
    "postgres": [
        "CREATE TABLE IF NOT EXISTS {ns}.accounts (id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
        "balance NUMERIC(12,2), updated_at TIMESTAMPTZ, note TEXT, data BYTEA)",
        "CREATE TABLE IF NOT EXISTS {ns}.order_lines (order_id INT NOT NULL, line_no INT NOT NULL, "
        "sku VARCHAR(32), qty INT, price NUMERIC(10,2), PRIMARY KEY (order_id, line_no))",
    ],
}
NOW = {"mysql": "NOW(6)", "postgres": "now()"}
ACCOUNTS = "accounts (id, name, balance, updated_at, note, data)"  # named: columns may be added later
LINES = "order_lines (order_id, line_no, sku, qty, price)"
IGNORE = {"mysql": ("INSERT IGNORE INTO", ""), "postgres": ("INSERT INTO", " ON CONFLICT DO NOTHING")}


def connect(uri: str):
    p = urlsplit(uri)
    if p.scheme in ("mysql", "mariadb"):
        import pymysql
        return "mysql", pymysql.connect(host=p.hostname, port=p.port or 3306, user=p.username or "root",
                                        password=p.password or "", autocommit=False, charset="utf8mb4")
    import psycopg2
    conn = psycopg2.connect(host=p.hostname, port=p.port or 5432, user=p.username or "postgres",
                            password=p.password or "", dbname=p.path.lstrip("/"))
    return "postgres", conn


class Workload:
    def __init__(self, kind: str, conn, namespace: str, seed: int = 0, rows: int = 2000):
        self.kind, self.conn, self.ns, self.rows = kind, conn, namespace, rows
        self.rng = random.Random(seed)
        self.next_id = rows * 10
        self.ops = 0

    def create(self, accounts: int | None = None, orders: int | None = None) -> None:
        """Create the tables and load `accounts` accounts and `orders` orders of 1-5 lines."""
        cur = self.conn.cursor()
        for ddl in DDL[self.kind]:
            cur.execute(ddl.format(ns=self.ns))
        n = self.rows if accounts is None else accounts
        batch = [self._account(i) for i in range(1, n + 1)]
        for i in range(0, len(batch), 5000):
            cur.executemany(f"INSERT INTO {self.ns}.{ACCOUNTS} VALUES (%s, %s, %s, {NOW[self.kind]}, %s, %s)",
                            batch[i:i + 5000])
        lines = [self._line(o, l) for o in range(1, (orders if orders is not None else n // 2) + 1)
                 for l in range(1, self.rng.randint(1, 5) + 1)]
        for i in range(0, len(lines), 5000):
            cur.executemany(f"INSERT INTO {self.ns}.{LINES} VALUES (%s, %s, %s, %s, %s)", lines[i:i + 5000])
        self.conn.commit()

    def _account(self, i: int) -> tuple:
        r = self.rng
        return (i, f"acct-{i}-{r.randrange(10**6)}", f"{r.uniform(-1e6, 1e6):.2f}",
                None if r.random() < 0.3 else f"note {r.random()}",
                None if r.random() < 0.5 else r.randbytes(r.randint(0, 16)))

    def _line(self, order: int, line: int) -> tuple:
        r = self.rng
        return order, line, f"sku-{r.randrange(1000)}", r.randint(1, 9), f"{r.uniform(0, 500):.2f}"

    def step(self) -> None:
        """One transaction of 1-10 statements drawn from the mix."""
        cur, r, ns = self.conn.cursor(), self.rng, self.ns
        ins, tail = IGNORE[self.kind]
        for _ in range(1 if r.random() < 0.7 else r.randint(2, 10)):
            op, key = r.random(), r.randint(1, int(self.rows * 1.2))
            if op < 0.25:
                cur.execute(f"{ins} {ns}.{ACCOUNTS} VALUES (%s, %s, %s, {NOW[self.kind]}, %s, %s){tail}",
                            self._account(key))
            elif op < 0.55:
                cur.execute(f"UPDATE {ns}.accounts SET balance = %s, name = %s, updated_at = {NOW[self.kind]} "
                            "WHERE id = %s", (f"{r.uniform(-1e6, 1e6):.2f}", f"upd-{self.ops}", key))
            elif op < 0.65:
                cur.execute(f"DELETE FROM {ns}.accounts WHERE id = %s", (key,))
            elif op < 0.72:  # delete and re-insert the same key in one transaction
                cur.execute(f"DELETE FROM {ns}.accounts WHERE id = %s", (key,))
                cur.execute(f"INSERT INTO {ns}.{ACCOUNTS} VALUES (%s, %s, %s, {NOW[self.kind]}, %s, %s)",
                            self._account(key))
            elif op < 0.77:  # primary-key update, onto a fresh key
                self.next_id += 1
                cur.execute(f"UPDATE {ns}.accounts SET id = %s WHERE id = %s", (self.next_id, key))
            elif op < 0.90:
                order = r.randint(1, self.rows // 2)
                cur.execute(f"UPDATE {ns}.order_lines SET qty = qty + 1 WHERE order_id = %s", (order,))
            elif op < 0.95:
                order = r.randint(1, self.rows // 2)
                cur.execute(f"DELETE FROM {ns}.order_lines WHERE order_id = %s AND line_no = %s",
                            (order, r.randint(1, 5)))
            else:
                order = r.randint(1, int(self.rows * 0.6))
                cur.execute(f"{ins} {ns}.{LINES} VALUES (%s, %s, %s, %s, %s){tail}",
                            self._line(order, r.randint(1, 6)))
            self.ops += 1
        self.conn.commit()

    def run(self, seconds: float, max_ops: int | None = None, rate: float | None = None,
            latencies: list | None = None) -> int:
        """Transactions until `seconds` pass or `max_ops` row changes; at most `rate` changes/s if
        set. With `latencies`, appends (unix time, seconds) of every transaction, commit included."""
        cur = self.conn.cursor()
        # Moved keys go above every id so far: another workload may have run on these tables before.
        cur.execute(f"SELECT MAX(id) FROM {self.ns}.accounts")
        self.next_id = max(self.next_id, (cur.fetchone() or [0])[0] or 0)
        self.conn.commit()
        start = time.monotonic()
        end = start + seconds
        while time.monotonic() < end and (max_ops is None or self.ops < max_ops):
            began = time.perf_counter()
            self.step()
            if latencies is not None:
                latencies.append((time.time(), time.perf_counter() - began))
            if rate:
                time.sleep(max(0.0, start + self.ops / rate - time.monotonic()))
        return self.ops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("uri", help="admin connection URI of the source (mysql://… or postgres://…)")
    p.add_argument("namespace", help="database (MariaDB) or schema (PostgreSQL) holding the tables")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--rate", type=float, help="row changes per second (default: as fast as the source takes them)")
    p.add_argument("--create", action="store_true", help="create and load the tables first")
    p.add_argument("--latency-out", help="write each transaction's (unix time, seconds) here as JSON")
    args = p.parse_args(argv)
    kind, conn = connect(args.uri)
    w = Workload(kind, conn, args.namespace, args.seed, args.rows)
    if args.create:
        w.create()
        w.rng = random.Random(args.seed + 1)
    latencies: list[float] | None = [] if args.latency_out else None
    ops = w.run(args.seconds, rate=args.rate, latencies=latencies)
    if args.latency_out:
        with open(args.latency_out, "w") as f:
            json.dump(latencies, f)
    print(ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
