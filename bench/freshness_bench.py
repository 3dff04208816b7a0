"""Scenario 1b: end-to-end freshness, source commit to visible in the warehouse, under the
default merge schedule (the dblog_merge DAG: every DBLOG_MERGE_EVERY_MINUTES, default 5).

Both sources at once, as one deployment: a capture each, a writer each (single-row inserts at
RATE transactions/s, commit time noted when the commit returns), and every interval a merge of
each source in turn as its own process (`dblog merge`, a fresh Spark driver, as the DAG's
spark-submit task). A row is visible from the moment the merge that published it exits.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pyarrow.dataset as ds

from common import admin, namespace, run_sql
from harness import CLI, Harness, pct

NS = "bench_fresh"


class Inserter(threading.Thread):
    def __init__(self, kind: str, rate: float):
        super().__init__(daemon=True)
        self.kind, self.rate, self.committed, self.stop = kind, rate, {}, threading.Event()

    def run(self) -> None:
        conn = admin(self.kind)
        cur, i, start = conn.cursor(), 0, time.monotonic()
        while not self.stop.is_set():
            i += 1
            cur.execute(f"INSERT INTO {NS}.f VALUES ({i}, 'row-{i}')")  # autocommit: one commit per row
            self.committed[i] = time.time()
            time.sleep(max(0.0, start + i / self.rate - time.monotonic()))
        conn.close()


def _visible(h: Harness) -> set[int]:
    path = h.warehouse_table(f"{NS}.f")
    if path is None:
        return set()
    return set(ds.dataset(path, format="parquet").to_table(columns=["id"])["id"].to_pylist())


def run(kinds: list[str], every_s: float, cycles: int, rate: float) -> dict:
    harnesses, inserters = {}, {}
    for kind in kinds:
        namespace(kind, NS)
        run_sql(kind, f"CREATE TABLE {NS}.f (id BIGINT PRIMARY KEY, note VARCHAR(20))")
        harnesses[kind] = Harness(kind, NS, f"fresh_{kind}")
        harnesses[kind].start_capture()
    seen = {k: {} for k in kinds}
    merges = {k: [] for k in kinds}
    try:
        for kind in kinds:
            inserters[kind] = Inserter(kind, rate)
            inserters[kind].start()
        start = time.time()
        for cycle in range(1, cycles + 1):
            time.sleep(max(0.0, start + cycle * every_s - time.time()))
            if cycle == cycles:  # the last rows: staged before the last merge, as if it were the next
                for ins in inserters.values():
                    ins.stop.set()
                    ins.join()
                for h in harnesses.values():
                    h.catch_up()
            for kind, h in harnesses.items():
                began = time.time()
                subprocess.run([sys.executable, *CLI, "merge", "--source", h.name, "--master",
                                os.environ.get("DBLOG_SPARK_MASTER", "local[2]")], env=h.env, check=True,
                               capture_output=True)
                ended = time.time()
                merges[kind].append(round(ended - began, 1))
                for i in _visible(h) - set(seen[kind]):
                    seen[kind][i] = ended
                print(f"    merge {cycle} of {kind}: {ended - began:.1f} s, {len(seen[kind]):,} rows visible", flush=True)
    finally:
        for ins in inserters.values():
            ins.stop.set()
            ins.join()
        for h in harnesses.values():
            h.close()
    out = {"every_s": every_s, "cycles": cycles, "rate": rate, "sources": {}}
    for kind in kinds:
        committed = inserters[kind].committed
        ages = [seen[kind][i] - t for i, t in committed.items() if i in seen[kind]]
        out["sources"][kind] = {"rows": len(committed), "visible": len(ages), "merge_s": merges[kind],
                                "freshness_s_p50": round(pct(ages, 0.5), 1), "freshness_s_p99": round(pct(ages, 0.99), 1),
                                "freshness_s_max": round(max(ages, default=float("nan")), 1)}
    return out
