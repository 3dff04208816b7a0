"""The chaos writer: a seeded mix over three tables that journals, per committed transaction,
how many rows it changed in each table (the driver's row counts, which match the rows the
source logs). The journal is the oracle for "every committed change is staged exactly once,
in order". Run as its own process:

    python tests/chaos/writer.py ADMIN_URI NAMESPACE --seed S --seconds T --journal FILE
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter

from dblog_dev.workload import Workload, connect

LABELS = {  # string key, NULL-heavy columns
    "mysql": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT NULL, weight DECIMAL(9,3) NULL, "
             "seen TIMESTAMP(6) NULL, tag VARBINARY(16) NULL) ENGINE=InnoDB",
    "postgres": "CREATE TABLE {ns}.labels (code VARCHAR(40) PRIMARY KEY, title TEXT, weight NUMERIC(9,3), "
                "seen TIMESTAMPTZ, tag BYTEA)",
}
LABEL_COUNT = 12_000
BIG_TXN_MAX = 10_000


class _Counting:
    """A cursor that adds each statement's row count to the table it names."""

    def __init__(self, cursor, table_re: re.Pattern, counts: Counter):
        self._cursor, self._re, self._counts = cursor, table_re, counts

    def execute(self, sql, params=None):
        self._cursor.execute(sql, params)
        match = self._re.search(sql)
        # A SELECT's row count is rows read, not changed: the source logs nothing for it.
        if match and self._cursor.rowcount > 0 and not sql.lstrip().upper().startswith("SELECT"):
            self._counts[match.group(1)] += self._cursor.rowcount

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _Journaled:
    """A connection whose commits append the transaction's row counts to the journal."""

    def __init__(self, conn, namespace: str, journal: list):
        self._conn, self.journal, self.counts = conn, journal, Counter()
        self._re = re.compile(rf"\b{re.escape(namespace)}\.(\w+)")

    def cursor(self):
        return _Counting(self._conn.cursor(), self._re, self.counts)

    def commit(self):
        self._conn.commit()
        if self.counts:
            self.journal.append(dict(self.counts))
        self.counts = Counter()

    def __getattr__(self, name):
        return getattr(self._conn, name)


def label_code(i: int) -> str:
    return f"l{i:06d}"


def create_labels(kind: str, conn, namespace: str) -> None:
    cur = conn.cursor()
    cur.execute(LABELS[kind].format(ns=namespace))
    rows = [(label_code(i), None if i % 3 else f"label {i}", None if i % 2 else f"{i / 7:.3f}", None,
             None if i % 5 else bytes([i % 256])) for i in range(LABEL_COUNT)]
    cur.executemany(f"INSERT INTO {namespace}.labels (code, title, weight, seen, tag) VALUES (%s, %s, %s, %s, %s)", rows)
    conn.commit()


class ChaosWriter(Workload):
    """Workload's mix on accounts and order_lines, plus labels: small transactions, some of
    1 to 10,000 rows, and a column added at a chosen moment."""

    def __init__(self, kind, conn, namespace, seed, rows, journal: list, add_column_at: float | None):
        super().__init__(kind, _Journaled(conn, namespace, journal), namespace, seed, rows)
        self.add_column_at, self.extra, self.started = add_column_at, False, time.monotonic()

    def step(self) -> None:
        if self.add_column_at is not None and not self.extra and time.monotonic() - self.started >= self.add_column_at:
            self.conn.cursor().execute(f"ALTER TABLE {self.ns}.labels ADD COLUMN extra INT NULL")
            self.conn.commit()
            self.extra = True
        r = self.rng.random()
        if r < 0.7:
            return super().step()
        cur, ns, now = self.conn.cursor(), self.ns, "NOW(6)" if self.kind == "mysql" else "now()"
        if r < 0.99:
            for _ in range(self.rng.randint(1, 5)):
                code, op = label_code(self.rng.randrange(int(LABEL_COUNT * 1.1))), self.rng.random()
                if op < 0.3:
                    ins, tail = ("INSERT IGNORE INTO", "") if self.kind == "mysql" else ("INSERT INTO", " ON CONFLICT DO NOTHING")
                    cur.execute(f"{ins} {ns}.labels (code, title, weight, seen, tag) VALUES (%s, %s, %s, {now}, %s){tail}",
                                (code, None if op < 0.15 else f"t{self.ops}", None, None))
                elif op < 0.8:
                    extra = ", extra = %s" if self.extra else ""
                    params = (None if op < 0.5 else f"{self.rng.uniform(-1e5, 1e5):.3f}", f"u{self.ops}",
                              *([self.rng.randint(0, 99)] if self.extra else []), code)
                    cur.execute(f"UPDATE {ns}.labels SET weight = %s, title = %s, seen = {now}{extra} WHERE code = %s", params)
                else:
                    cur.execute(f"DELETE FROM {ns}.labels WHERE code = %s", (code,))
                self.ops += 1
        else:  # one big transaction: 1 to 10,000 rows, log-uniform
            n, first = int(10 ** self.rng.uniform(0, 4)), self.rng.randrange(LABEL_COUNT)
            cur.execute(f"UPDATE {ns}.labels SET weight = COALESCE(weight, 0) + 1, seen = {now} "
                        "WHERE code BETWEEN %s AND %s", (label_code(first), label_code(first + min(n, BIG_TXN_MAX) - 1)))
            self.ops += max(cur.rowcount, 0)
        self.conn.commit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("uri")
    p.add_argument("namespace")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--rate", type=float, help="row changes per second (default: as fast as the source takes them)")
    p.add_argument("--add-column-at", type=float)
    p.add_argument("--journal", required=True)
    args = p.parse_args(argv)
    kind, conn = connect(args.uri)
    journal: list[dict] = []
    writer = ChaosWriter(kind, conn, args.namespace, args.seed, args.rows, journal, args.add_column_at)
    writer.run(args.seconds, rate=args.rate)
    with open(args.journal, "w") as f:
        json.dump(journal, f)
    print(writer.ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
