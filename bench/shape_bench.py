"""Scenario 6, a database's shape: many tables, writes touching a few dozen of them.

For each table count N (10, 100, 1,000 by default), one source gets N tables of ROWS rows. With
the continuous merge running (as in a deployment), a dump of all N tables is the first load:
timed until every table has its first snapshot. Then a writer makes RATE single-row updates a
second spread over min(N, 50) tables for SECONDS, while a full dump of one more table of BIG_ROWS
rows (created with the others, before the capture) starts a third of the way in and lands beside
them. The figures are the continuous merge's own: for each commit, how long its oldest change waited since its commit in the source
(`visible_after_s`: a bound on every change's commit-to-visible time; p50 / p99 over the
commits), its cycle time, and how many table merges it started against the tables it passed
over without a lock or a read (the change index, `dblog.coordination.changed_tables`).

    DBLOG_BENCH_SHAPE_SOURCE=mysql  DBLOG_BENCH_SHAPE_TABLES=10,100,1000  DBLOG_BENCH_SHAPE_ROWS=1000
    DBLOG_BENCH_SHAPE_RATE=1000  DBLOG_BENCH_SHAPE_SECONDS=120  DBLOG_BENCH_SHAPE_WRITTEN=50
    DBLOG_BENCH_SHAPE_BIG_ROWS=10000000 (0: no big table)
"""
from __future__ import annotations

import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, admin, namespace, run_sql
from harness import CLI, Harness, pct

NS = "bench_shape"
_COMMIT = re.compile(r"^\S+ (\S+): snapshot \d+")
_WAITED = re.compile(r"its oldest change waited ([\d.]+)s to be visible")
_SLICE = re.compile(r"cycle time p50 ([\d.]+)s, max ([\d.]+)s\); (\d+) table merges, (\d+) passed over")


def _fill(kind: str, rows: int) -> str:
    return (f"SELECT seq, seq % 97, CONCAT('note-', seq) FROM {NS}.seq_1_to_{rows}" if kind == "mysql" else
            f"SELECT g, g % 97, 'note-' || g FROM generate_series(1, {rows}) g")


def _tables(kind: str, n: int, rows: int, big_rows: int) -> list[str]:
    namespace(kind, NS)
    names = [f"s{i:04d}" for i in range(n)]
    statements = []
    for t in names:
        statements += [f"CREATE TABLE {NS}.{t} (id BIGINT PRIMARY KEY, v INT, note VARCHAR(40))",
                       f"INSERT INTO {NS}.{t} {_fill(kind, rows)}"]
    if big_rows:
        statements += [f"CREATE TABLE {NS}.big (id BIGINT PRIMARY KEY, v INT, note VARCHAR(40))",
                       f"INSERT INTO {NS}.big {_fill(kind, big_rows)}"]
    run_sql(kind, *statements)
    return names


class Writer(threading.Thread):
    """Single-row autocommitted updates at `rate` a second over `tables`, at random keys."""

    def __init__(self, kind: str, tables: list[str], rows: int, rate: float):
        super().__init__(daemon=True)
        self.kind, self.tables, self.rows, self.rate = kind, tables, rows, rate
        self.stop, self.done = threading.Event(), 0

    def run(self) -> None:
        conn, rng = admin(self.kind), random.Random(6)
        cur, start = conn.cursor(), time.monotonic()
        while not self.stop.is_set():
            self.done += 1
            cur.execute(f"UPDATE {NS}.{rng.choice(self.tables)} SET v = v + 1 WHERE id = {rng.randint(1, self.rows)}")
            time.sleep(max(0.0, start + self.done / self.rate - time.monotonic()))
        conn.close()


def _commits(log: Path) -> list[tuple[str, float | None]]:
    out = []
    for line in log.read_text().splitlines():
        m, waited = _COMMIT.match(line.strip()), _WAITED.search(line)
        if m and "log events" in line:
            out.append((m.group(1), float(waited.group(1)) if waited else None))
    return out


def phase(kind: str, n: int, rows: int, rate: float, seconds: float, written: int, big_rows: int) -> dict:
    tables = _tables(kind, n, rows, big_rows)
    home = tempfile.mkdtemp(prefix=f"dblog-bench-shape-{n}-", dir=str(ROOT / ".local"))
    h = Harness(kind, NS, f"shape_{kind}", home=home)
    h.start_capture()
    log = Path(home) / "merge.log"
    merger = subprocess.Popen([sys.executable, *CLI, "merge", "--continuous", "--source", h.name], env=h.env,
                              stdout=log.open("w"), stderr=subprocess.STDOUT)
    writer = Writer(kind, tables[:written], rows, rate)
    try:
        while "continuous merge of" not in log.read_text():
            if merger.poll() is not None:
                raise RuntimeError(f"the continuous merge did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        began = time.time()
        small = [f"{NS}.{t}" for t in tables]
        dump = subprocess.run([sys.executable, *CLI, "dump", "--source", h.name, *[a for t in small for a in
                                                                                   ("--table", t)]],
                              env=h.env, capture_output=True, text=True)
        if dump.returncode != 0:
            raise RuntimeError(f"the dump of all tables failed: {dump.stderr[-2000:]}")
        dumped = time.time() - began
        while len({t for t, _ in _commits(log)}) < n:
            if merger.poll() is not None or time.time() - began > 3600:
                raise RuntimeError(f"the first load did not finish: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        first_load = time.time() - began
        before = len(_commits(log))
        writer.start()
        time.sleep(seconds / 3)
        big_log = Path(home) / "big-dump.log"   # a file: a pipe nobody reads would fill and block the dump
        big = None if not big_rows else subprocess.Popen(
            [sys.executable, *CLI, "dump", "--source", h.name, "--table", f"{NS}.big"], env=h.env,
            stdout=subprocess.DEVNULL, stderr=big_log.open("w"), text=True)
        big_began, big_dump_s = time.time(), None
        while time.time() < big_began + seconds * 2 / 3:
            if big is not None and big_dump_s is None and big.poll() is not None:
                big_dump_s = round(time.time() - big_began, 1)
            time.sleep(0.2)
        writer.stop.set()
        writer.join()
        if big is not None:
            if big.wait(3600) != 0:
                raise RuntimeError(f"the dump of the big table failed: {big_log.read_text()[-2000:]}")
            big_dump_s = big_dump_s or round(time.time() - big_began, 1)
        merger.terminate()
        merger.wait(300)
    finally:
        writer.stop.set()
        if merger.poll() is None:
            merger.kill()
        h.close()
    commits = _commits(log)[before:]
    waits = [w for t, w in commits if w is not None and t != f"{NS}.big"]   # the first load's commits wait for no event
    big_merges = sum(1 for t, _ in commits if t == f"{NS}.big")
    summary = _SLICE.search(log.read_text())
    return {"tables": n, "rows_per_table": rows, "written_tables": min(written, n), "rate": rate,
            "seconds": seconds, "updates": writer.done, "big_rows": big_rows, "big_dump_s": big_dump_s,
            "big_merges_during": big_merges, "dump_all_s": round(dumped, 1),
            "first_load_s": round(first_load, 1), "commits": len(waits),
            "oldest_wait_s_p50": round(pct(waits, 0.5), 1), "oldest_wait_s_p99": round(pct(waits, 0.99), 1),
            "cycle_s_p50": float(summary.group(1)) if summary else None,
            "cycle_s_max": float(summary.group(2)) if summary else None,
            "table_merges": int(summary.group(3)) if summary else None,
            "passed_over": int(summary.group(4)) if summary else None}


def run(kind: str, counts: list[int], rows: int, rate: float, seconds: float, written: int, big_rows: int) -> dict:
    out = {}
    for n in counts:
        print(f"  shape: {n} tables", flush=True)
        out[str(n)] = phase(kind, n, rows, rate, seconds, written, big_rows)
        print(f"    {out[str(n)]}", flush=True)
        run_sql(kind, *([f"DROP DATABASE IF EXISTS {NS}"] if kind == "mysql" else
                        [f"DROP SCHEMA IF EXISTS {NS} CASCADE"]))
    return out
