"""A dump with window n+1 read while window n is staged, against the same dump with each window
staged before the next is read; same table, same run, alternating reps.

    python bench/pipeline_bench.py mysql|postgres [ROWS=1000000] [CHUNK=20000] [REPS=3]

Creates bench_pipeline.t (bench/bigtable.py) once and dumps it REPS times each way, in-process,
no capture running (a dump stages without one). Prints rows/s per way (median) and the ratio.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bigtable  # noqa: E402
from common import dump_rate, dump_rig  # noqa: E402

NS = "bench_pipeline"


def one_after_the_other(staging_cls):
    """The staging of `dblog.dump` made to finish each window before the next read starts."""
    class Sequential(staging_cls):
        def start(self, schema, chunk, read_s):
            super().start(schema, chunk, read_s)
            self.settle()
    return Sequential


def main(kind: str, rows: int = 1_000_000, chunk: int = 20_000, reps: int = 3) -> dict:
    import dblog.dump as D
    bigtable.create(kind, NS, rows)
    pipelined = D._Staging
    ways = {"pipelined": pipelined, "sequential": one_after_the_other(pipelined)}
    rates: dict[str, list[float]] = {w: [] for w in ways}
    try:
        with dump_rig(kind, "bench_pipeline", NS) as rig:
            for _ in range(reps):
                for way, cls in ways.items():
                    D._Staging = cls
                    rates[way].append(dump_rate(rig, D.DumpSpec(tables=[f"{NS}.{bigtable.TABLE}"],
                                                                chunk_size=chunk)))
    finally:
        D._Staging = pipelined
    med = {w: round(statistics.median(r)) for w, r in rates.items()}
    out = {"kind": kind, "rows": rows, "chunk": chunk, "reps": reps, "rows_per_s": med,
           "ratio": round(med["pipelined"] / med["sequential"], 2)}
    print(out, flush=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    main(args[0], *(int(a) for a in args[1:4]))
