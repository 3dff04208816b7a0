"""The first busy merge after a first load: a 10M-row table dumped and merged (its chunk files
adopted as data files, or written into buckets with DBLOG_MERGE_ADOPT_FIRST_LOAD=off), then
1,000 row changes/s for SECONDS (random updates, inserts, deletes: bench/bigtable.py), then one
merge of those events, timed. With `during`: the changes run during the dump instead, and the
one merge is the first load under writes (adopted less the rows its windows drop, then its
events over it; or the general merge with adoption off).

    python bench/events_after_load.py mysql|postgres [SECONDS=30] [ROWS=10000000] [during]

Prints and writes bench/results/events-after-load-<kind>[-during][<DBLOG_BENCH_RESULT_SUFFIX>].json.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dump_bench import _stop, _writer, warm  # noqa: E402

import baselines  # noqa: E402
import bigtable  # noqa: E402
from common import save_result  # noqa: E402
from harness import Harness  # noqa: E402

NS = "bench_after_load"


def _rig(kind: str, rows: int) -> tuple:
    """A warm Spark session and a harness whose capture runs, over a fresh table of `rows` rows."""
    spark = baselines.spark_session()
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"bench_after_load_{kind}")
    h.start_capture()
    warm(spark)
    return spark, h


def main(kind: str, seconds: int = 30, rows: int = 10_000_000, during: bool = False) -> dict:
    if during:
        return _during(kind, rows)
    spark, h = _rig(kind, rows)
    try:
        _, dump_s = h.dump(f"{NS}.{bigtable.TABLE}", 20_000, parallelism=4)
        h.catch_up()
        load_s = h.merge(spark, f"{NS}.{bigtable.TABLE}")
        load_note = h.last_merge.note
        out = f"{h.dir}/writer.json"
        writer = _writer(h, 1000, out)
        time.sleep(seconds)
        _stop(writer, out)
        h.catch_up()
        warm(spark)
        merge_s = h.merge(spark, f"{NS}.{bigtable.TABLE}")
        r = h.last_merge
        return {"rows": rows, "dump_s": round(dump_s, 1), "load_merge_s": round(load_s, 1), "load": load_note,
                "events": r.log_events, "events_merge_s": round(merge_s, 1), "buckets_written": r.buckets_written,
                "how": r.note}
    finally:
        h.close()


def _during(kind: str, rows: int) -> dict:
    spark, h = _rig(kind, rows)
    try:
        out = f"{h.dir}/writer.json"
        writer = _writer(h, 1000, out)
        time.sleep(2)
        _, dump_s = h.dump(f"{NS}.{bigtable.TABLE}", 20_000, parallelism=4)
        _stop(writer, out)
        h.catch_up()
        warm(spark)
        merge_s = h.merge(spark, f"{NS}.{bigtable.TABLE}")
        r = h.last_merge
        return {"rows": rows, "dump_s": round(dump_s, 1), "merge_s": round(merge_s, 1), "events": r.log_events,
                "dropped_in_windows": r.dropped, "commits": r.commits, "how": r.note}
    finally:
        h.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    during = "during" in args[1:]
    result = main(args[0], *(int(a) for a in args[1:3] if a != "during"), during=during)
    suffix = ("-during" if during else "") + os.environ.get("DBLOG_BENCH_RESULT_SUFFIX", "")
    save_result(f"events-after-load-{args[0]}{suffix}", result)
