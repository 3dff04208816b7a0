"""A table's first load into the warehouse: written straight into buckets (`spark/first_load.py`)
against the general merge (rank, shuffle by bucket, count, sample), on the same staged dump, in
the same warm Spark session, alternating; each merge into a fresh warehouse.

    python bench/first_load_bench.py mysql|postgres [ROWS=10000000] [REPS=2]

Writes bench/results/first-load-<kind>.json: seconds per side (median) and general/first-load.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dump_bench import NS, TABLE  # noqa: E402

import baselines  # noqa: E402
import bigtable  # noqa: E402
from common import median  # noqa: E402
from harness import Harness  # noqa: E402


def main(kind: str, rows: int, reps: int) -> dict:
    from dblog.merge import job
    from dblog.warehouse.tables import Warehouse
    spark = baselines.spark_session()
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"bench_{kind}")
    h.start_capture()
    fast = job.first_load
    seconds: dict[str, list[float]] = {"first_load": [], "general": []}
    try:
        h.dump(TABLE, 20_000)
        h.catch_up()
        merge_table = job.merge_table
        merge_table(spark, h.store, h.staged, Warehouse(f"{h.dir}/warm"), h.name, TABLE)  # Python workers, JIT
        for rep in range(reps):
            for side in ("first_load", "general") if rep % 2 == 0 else ("general", "first_load"):
                job.first_load = fast if side == "first_load" else (lambda *a, **k: None)
                started = time.time()
                result = merge_table(spark, h.store, h.staged, Warehouse(f"{h.dir}/{side}-{rep}"), h.name, TABLE)
                seconds[side].append(time.time() - started)
                assert result.survivors == rows and bool(result.note) == (side == "first_load"), result
                print(f"  {side}: {seconds[side][-1]:.1f} s", flush=True)
    finally:
        job.first_load = fast
        h.close()
    out = {"rows": rows, "reps": reps, **{f"{side}_s": round(median(s), 2) for side, s in seconds.items()},
           "runs": {side: [round(x, 2) for x in s] for side, s in seconds.items()}}
    out["general_vs_first_load"] = round(out["general_s"] / out["first_load_s"], 2)
    return out


if __name__ == "__main__":
    kind = sys.argv[1]
    result = main(kind, int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000, int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    print(json.dumps(result))
    (Path(__file__).parent / "results" / f"first-load-{kind}.json").write_text(json.dumps(result, indent=2) + "\n")
