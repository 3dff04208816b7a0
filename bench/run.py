"""`make bench`: the engine's benchmarks, as ratios against baselines measured in the same run.

Writes bench/results/engine.json and engine.md (capture, dump) and merge.json and merge.md.
Sizes: DBLOG_BENCH_CAPTURE_ROWS (default 100000 inserted, plus half as many updates),
DBLOG_BENCH_DUMP_ROWS (default 1000000), DBLOG_BENCH_MERGE_ROWS (N, default 1000000; 10N is
measured too). DBLOG_BENCH_PARTS picks parts (default "engine,merge").
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import capture_bench  # noqa: E402
import dump_bench  # noqa: E402
import merge_bench  # noqa: E402
from common import PORTS  # noqa: E402

OUT = Path(__file__).parent / "results"


def main() -> int:
    parts = os.environ.get("DBLOG_BENCH_PARTS", "engine,merge").split(",")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    OUT.mkdir(exist_ok=True)
    if "engine" in parts:
        engine(machine)
    if "merge" in parts:
        merge(machine)
    return 0


def engine(machine: str) -> None:
    capture_rows = int(os.environ.get("DBLOG_BENCH_CAPTURE_ROWS", "100000"))
    dump_rows = int(os.environ.get("DBLOG_BENCH_DUMP_ROWS", "1000000"))
    results = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine,
               "capture": {}, "dump": {}}
    for kind in ("mysql", "postgres"):
        print(f"capture benchmark: {kind}", flush=True)
        results["capture"][kind] = capture_bench.run(kind, capture_rows, reps=3)
        print(f"dump benchmark: {kind}", flush=True)
        results["dump"][kind] = dump_bench.run(kind, dump_rows)
    (OUT / "engine.json").write_text(json.dumps(results, indent=2) + "\n")
    names = {"mysql": "MariaDB 10.11", "postgres": "PostgreSQL 15"}
    lines = [f"Measured {results['when']} on {results['machine']}.", "",
             "| source | capture rows/s | bare read rows/s | ratio | dump rows/s (1M rows, chunk 1000) | plain SELECT * rows/s | ratio | dump rows/s with capture + writes | capture max stall during dump / without | capture max lag during dump / without |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, name in names.items():
        c, d = results["capture"][kind], results["dump"][kind]
        lines.append(f"| {name} | {c['capture_rows_per_s']:,} | {c['bare_rows_per_s']:,} | {c['ratio']} | "
                     f"{d['dump_rows_per_s']:,} | {d['select_rows_per_s']:,} | {d['dump_vs_select']} | "
                     f"{d['dump_rows_per_s_with_capture_and_writes']:,} | "
                     f"{d['capture_max_stall_s_during_dump']} s / {d['capture_max_stall_s_without_dump']} s | "
                     f"{d['capture_max_lag_s_during_dump']} s / {d['capture_max_lag_s_without_dump']} s |")
    (OUT / "engine.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def merge(machine: str) -> None:
    rows = int(os.environ.get("DBLOG_BENCH_MERGE_ROWS", "1000000"))
    print("merge benchmark", flush=True)
    results = {**merge_bench.run(rows, f"127.0.0.1:{PORTS['ZK']}"), "machine": machine}
    (OUT / "merge.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"Measured {results['when']} on {results['machine']}, Spark local[2].", "",
             "| merge of a full dump | rows | merge s | plain Spark Parquet write s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| into an empty table | {r['rows']:,} | {r['merge_s']} | {r['plain_write_s']} | {r['ratio']} |"
              for r in results["full"]]
    lines += ["", "| change batch | into a table of | merge s | rewrite of the table s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {b['keys']:,} keys, {b['keys_are']} | {b['table_rows']:,} rows | {b['merge_s']} | {b['rewrite_s']} | "
              f"{b['ratio']} |" for b in results["batches"]]
    (OUT / "merge.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
