"""Scenario 5: dump rows/s and the source's write latency over chunk size x parallelism.

A table of ROWS rows; the capture runs; a writer makes RATE row changes/s on the same table
throughout. First BASELINE seconds without a dump, then one unthrottled dump per chunk size and
parallelism (splits a window reads at once; REPS times, medians). The recommended defaults
(`dump.chunk_size`, `dump.parallelism` in dblog.settings) are the smallest window (chunk size x
parallelism, then the fewer connections) within 10% of the best throughput on every source:
beyond it a bigger window buys little speed and holds more connections and more rows a window
may drop.
"""
from __future__ import annotations

import time

from dump_bench import _stop, _writer

import bigtable
from common import grid_key, median, parse_key
from harness import Harness, pct

NS = "bench_sweep"


def window_cost(setting: int | tuple[int, int]) -> tuple[int, int]:
    """A chunk size, or (chunk size, parallelism): rows a window holds, then connections."""
    size, parallelism = setting if isinstance(setting, tuple) else (setting, 1)
    return size * parallelism, parallelism


def recommend(*rates: dict, within: float = 0.10):
    """The smallest window within `within` of the best throughput on every source given."""
    ok = [{s for s, rate in r.items() if rate >= (1 - within) * max(r.values())} for r in rates]
    return min(set.intersection(*ok), key=window_cost)


def run(kind: str, rows: int, sizes: list[int], rate: float, baseline_s: float, reps: int,
        parallelisms: tuple[int, ...] = (1,)) -> dict:
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"sweep_{kind}")
    h.start_capture()
    try:
        out = f"{h.dir}/latency-none.json"
        w, t0 = _writer(h, rate, out), time.time()
        time.sleep(baseline_s)
        base = [s * 1000 for t, s in _stop(w, out) if t > t0 + 2]
        result = {"rows": rows, "rate": rate, "reps": reps, "no_dump_write_ms_p99": round(pct(base, 0.99), 2),
                  "grid": {}}
        for size in sizes:
            for parallelism in parallelisms:
                rates, p99s = [], []
                for rep in range(reps):
                    out = f"{h.dir}/latency-{size}-{parallelism}-{rep}.json"
                    w = _writer(h, rate, out)
                    time.sleep(1)  # writing before the dump starts
                    t0 = time.time()
                    done, seconds = h.dump(f"{NS}.{bigtable.TABLE}", size, parallelism=parallelism)
                    lat = [s * 1000 for t, s in _stop(w, out) if t0 <= t <= t0 + seconds]
                    rates.append(done / seconds)
                    p99s.append(pct(lat, 0.99))
                p99 = median(p99s)
                cell = result["grid"][grid_key(size, parallelism)] = {
                    "rows_per_s": round(median(rates)), "write_ms_p99": round(p99, 2),
                    "write_p99_vs_no_dump": round(p99 / result["no_dump_write_ms_p99"], 2)}
                print(f"    chunk {size} x {parallelism}: {cell}", flush=True)
        result["recommended"] = grid_key(*recommend(rates_of(result)))
        return result
    finally:
        h.close()


def rates_of(result: dict) -> dict[tuple[int, int], float]:
    return {parse_key(k): v["rows_per_s"] for k, v in result["grid"].items()}

