"""A first load while merges run every few seconds, as the continuous merge runs them: a 10M-row
table dumped (four ranges) while this process merges it every EVERY seconds, then one merge
after the dump. Run once with DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS=0 (the table fills in as it is
read: the first merge adopts the chunks ready then, every later one merges the next chunks into
the stored buckets) and once with the default (the merges during the dump wait; the one after
adopts the whole load).

    python bench/load_under_merges.py mysql|postgres [EVERY=3] [ROWS=10000000]

Prints and writes bench/results/load-under-merges-<kind>-waits-<on|off>.json.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dump_bench import warm  # noqa: E402

import baselines  # noqa: E402
import bigtable  # noqa: E402
from common import save_result  # noqa: E402
from harness import Harness  # noqa: E402

NS = "bench_load_merges"


def main(kind: str, every: float = 3.0, rows: int = 10_000_000) -> dict:
    from dblog.settings import settings
    spark = baselines.spark_session()
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"bench_load_merges_{kind}")
    h.start_capture()
    warm(spark)
    table = f"{NS}.{bigtable.TABLE}"
    try:
        dumped: list[float] = []
        worker = threading.Thread(target=lambda: dumped.append(h.dump(table, 20_000, parallelism=4)[1]))
        started = time.time()
        worker.start()
        merges = []
        while worker.is_alive():
            seconds = h.merge(spark, table)
            merges.append({"at_s": round(time.time() - started, 1), "s": round(seconds, 2), "note": h.last_merge.note})
            worker.join(every)
        h.catch_up()
        final_s = h.merge(spark, table)
        waits = "on" if settings().merge.first_load_wait_seconds > 0 else "off"
        return {"rows": rows, "every_s": every, "first_load_waits": waits,
                "total_s": round(time.time() - started, 1), "dump_s": round(dumped[0], 1),
                "merges_during": merges, "final_merge_s": round(final_s, 1), "final": h.last_merge.note}
    finally:
        h.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    result = main(args[0], *(float(a) for a in args[1:2]), *(int(a) for a in args[2:3]))
    save_result(f"load-under-merges-{args[0]}-waits-{result['first_load_waits']}", result)
