"""Scenario 5: dump rows/s and the source's write latency for several chunk sizes.

A table of ROWS rows; the capture runs; a writer makes RATE row changes/s on the same table
throughout. First BASELINE seconds without a dump, then one unthrottled dump per chunk size
(REPS times, medians). The recommended default (`dump.chunk_size` in dblog.settings) is the
smallest size within 10% of the best throughput on every source: beyond it a bigger chunk buys
little speed and holds each read (and the rows a window may drop) longer.
"""
from __future__ import annotations

import time

import bigtable
from common import median
from dump_bench import _stop, _writer
from harness import Harness, pct

NS = "bench_sweep"


def recommend(*rates: dict[int, float], within: float = 0.10) -> int:
    """The smallest chunk size within `within` of the best throughput on every source given."""
    ok = [{size for size, rate in r.items() if rate >= (1 - within) * max(r.values())} for r in rates]
    return min(set.intersection(*ok))


def run(kind: str, rows: int, sizes: list[int], rate: float, baseline_s: float, reps: int) -> dict:
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"sweep_{kind}")
    h.start_capture()
    try:
        out = f"{h.dir}/latency-none.json"
        w, t0 = _writer(h, rate, out), time.time()
        time.sleep(baseline_s)
        base = [s * 1000 for t, s in _stop(w, out) if t > t0 + 2]
        result = {"rows": rows, "rate": rate, "reps": reps, "no_dump_write_ms_p99": round(pct(base, 0.99), 2),
                  "sizes": {}}
        for size in sizes:
            rates, p99s = [], []
            for rep in range(reps):
                out = f"{h.dir}/latency-{size}-{rep}.json"
                w = _writer(h, rate, out)
                time.sleep(1)  # writing before the dump starts
                t0 = time.time()
                done, seconds = h.dump(f"{NS}.{bigtable.TABLE}", size)
                lat = [s * 1000 for t, s in _stop(w, out) if t0 <= t <= t0 + seconds]
                rates.append(done / seconds)
                p99s.append(pct(lat, 0.99))
            result["sizes"][size] = {"rows_per_s": round(median(rates)), "write_ms_p99": round(median(p99s), 2),
                                     "write_p99_vs_no_dump": round(median(p99s) / result["no_dump_write_ms_p99"], 2)}
            print(f"    chunk {size}: {result['sizes'][size]}", flush=True)
        result["recommended"] = recommend({s: r["rows_per_s"] for s, r in result["sizes"].items()})
        return result
    finally:
        h.close()
