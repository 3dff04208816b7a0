"""The chaos legacy client: writes the log carries without rows, every second or two, beside the
chaos writer, as a legacy application session might all day.

MariaDB: a session with binlog_format STATEMENT updating and deleting ranges of `accounts`, and
refilling its own table `legacy` with TRUNCATE and LOAD DATA (logged as the statement and the
file, never as rows). PostgreSQL has no statement logging: TRUNCATE of `legacy` and a refill.
Its writes stage no row events (PostgreSQL's refill aside, on a table the writer's journal
leaves out), so the journal oracle is unchanged. Run as its own process:

    python tests/chaos/legacy.py ADMIN_URI NAMESPACE --seed S --seconds T
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from dblog_dev.workload import connect

LEGACY = {
    "mysql": "CREATE TABLE {ns}.legacy (id INT PRIMARY KEY, v VARCHAR(40), n INT) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.legacy (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
}
LEGACY_ROWS = 300


def create_legacy(kind: str, conn, namespace: str) -> None:
    cur = conn.cursor()
    cur.execute(LEGACY[kind].format(ns=namespace))
    cur.executemany(f"INSERT INTO {namespace}.legacy (id, v, n) VALUES (%s, %s, %s)",
                    [(i, f"v{i}", i) for i in range(1, LEGACY_ROWS + 1)])
    conn.commit()


class Legacy:
    def __init__(self, kind: str, conn, namespace: str, seed: int, accounts: int):
        self.kind, self.conn, self.ns, self.accounts = kind, conn, namespace, accounts
        self.rng, self.writes, self.fills = random.Random(seed), 0, 0
        if kind == "mysql":
            self.conn.cursor().execute("SET SESSION binlog_format = 'STATEMENT'")

    def step(self) -> None:
        cur, ns, r = self.conn.cursor(), self.ns, self.rng.random()
        if self.kind == "mysql" and r < 0.45:
            a = self.rng.randint(1, self.accounts)
            cur.execute(f"UPDATE {ns}.accounts SET balance = COALESCE(balance, 0) + 1, note = CONCAT('stmt-', id) "
                        "WHERE id BETWEEN %s AND %s", (a, a + self.rng.randint(0, 30)))
        elif self.kind == "mysql" and r < 0.7:
            a = self.rng.randint(1, self.accounts)
            cur.execute(f"DELETE FROM {ns}.accounts WHERE id BETWEEN %s AND %s", (a, a + self.rng.randint(0, 4)))
        elif r < 0.85:
            self.refill(cur)
        else:
            a = self.rng.randint(1, LEGACY_ROWS)
            concat = "CONCAT(v, '+')" if self.kind == "mysql" else "v || '+'"
            cur.execute(f"UPDATE {ns}.legacy SET v = LEFT({concat}, 40), n = n + 1 WHERE id BETWEEN %s AND %s",
                        (a, a + 20))
        self.conn.commit()
        self.writes += 1

    def refill(self, cur) -> None:
        """TRUNCATE the table, then load a fresh set of rows (LOAD DATA on MariaDB)."""
        self.fills += 1
        rows = [(i, f"fill{self.fills}-{i}", self.fills) for i in range(1, self.rng.randint(50, LEGACY_ROWS) + 1)]
        cur.execute(f"TRUNCATE TABLE {self.ns}.legacy")
        if self.kind == "postgres":
            cur.executemany(f"INSERT INTO {self.ns}.legacy (id, v, n) VALUES (%s, %s, %s)", rows)
            return
        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
            f.writelines(f"{i}\t{v}\t{n}\n" for i, v, n in rows)
        try:
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {self.ns}.legacy (id, v, n)", (f.name,))
        finally:
            os.unlink(f.name)

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.step()
            time.sleep(min(self.rng.uniform(0.7, 2.0), max(0.0, end - time.monotonic())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("uri")
    p.add_argument("namespace")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--accounts", type=int, default=3000)
    args = p.parse_args(argv)
    kind, conn = connect(args.uri)
    if kind == "mysql":   # LOAD DATA LOCAL: the client sends the file
        conn.close()
        import pymysql
        conn = pymysql.connect(**{**_settings(args.uri), "local_infile": True, "autocommit": False})
    legacy = Legacy(kind, conn, args.namespace, args.seed, args.accounts)
    legacy.run(args.seconds)
    print(legacy.writes)
    return 0


def _settings(uri: str) -> dict:
    from urllib.parse import urlsplit
    p = urlsplit(uri)
    return {"host": p.hostname, "port": p.port or 3306, "user": p.username or "root", "password": p.password or "",
            "charset": "utf8mb4"}


if __name__ == "__main__":
    sys.exit(main())
