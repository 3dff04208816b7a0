"""`make bench`: every scenario of the benchmark on this machine, in one go, each figure a median
of several runs or a ratio against a baseline measured in the same run.

Parts (DBLOG_BENCH_PARTS, comma-separated, default all, in this order):
  capture    1. capture rows/s against a bare read loop of the same library over the same log
  freshness  1. source commit to visible in the warehouse: continuous merge, then scheduled merge, same load
  dump       2. full dump of a large table into the warehouse, idle source, against the baselines
  writes     3. the same under a concurrent write load (latency, lag, pauses, rows the copies get wrong)
  merge      4. merge scaling (N and 10N rows; a 1,000-key batch into 10N rows) against a rewrite
  sweep      5. chunk size x parallelism sweep
  shape      6. a database's shape: 10 / 100 / 1,000 tables, writes over 50 of them, continuous merge
Each part writes bench/results/<part>.json; then bench/results/bench.md (the tables, also
printed) and bench/results/writes.png (scenario 3 over time) are made from whatever is there.
A new run replaces its part's current result: move the one it replaces to bench/results/history/
first when docs/performance.md still cites it.

Sizes and settings (environment; defaults fit 2 cores / 24 GiB):
  DBLOG_BENCH_SOURCES=mysql,postgres   DBLOG_BENCH_ROWS=10000000 (scenarios 2, 3)
  DBLOG_BENCH_REPS=3 (scenarios 1, 5)  DBLOG_BENCH_DUMP_REPS=3 (scenario 2; each run is ~6 min a source)
  DBLOG_BENCH_DUMP_TOOLS=ours,plain,spark_jdbc,dlt (scenario 2: the copies to time)
  DBLOG_BENCH_DUMP_PARALLELISM=1 (scenario 2: ranges per dump window)
  DBLOG_BENCH_DUMP_SHAPE=narrow (scenario 2: the table, narrow or taxi: 20 columns like the NYC taxi trips)
  DBLOG_BENCH_CHUNK_SIZE (default: dblog's)  DBLOG_BENCH_WRITE_RATE=1000 row changes/s
  DBLOG_BENCH_BASELINE_SECONDS=60      DBLOG_BENCH_CAPTURE_ROWS=100000  DBLOG_BENCH_MERGE_ROWS=1000000
  DBLOG_BENCH_SWEEP_ROWS=1000000       DBLOG_BENCH_SWEEP_SIZES=2000,5000,20000,50000
  DBLOG_BENCH_SWEEP_PARALLELISM=1,2,4,8
  DBLOG_BENCH_WRITES_TOOLS=ours,plain,spark_jdbc,dlt  DBLOG_BENCH_WRITES_PARALLELISM=1 (scenario 3: dblog
    once per parallelism, e.g. 1,2,4,8)
  DBLOG_BENCH_RESULT_SUFFIX (e.g. -parallelism: results go to <part><suffix>.json, beside the main ones)
  DBLOG_MERGE_EVERY_MINUTES=5 (the scheduled merge)  DBLOG_MERGE_CONTINUOUS_EVERY_SECONDS (default dblog's)
  DBLOG_BENCH_FRESHNESS_SECONDS=600 (continuous; 1800 for the memory figure)
  DBLOG_BENCH_FRESHNESS_SCHEDULED_SECONDS=900 (0: skip)  DBLOG_BENCH_FRESHNESS_RATE=1000 row changes/s a source
  DBLOG_BENCH_FRESHNESS_BIG_ROWS=1000000 (dumped at the start)
  DBLOG_BENCH_SHAPE_SOURCE=mysql  DBLOG_BENCH_SHAPE_TABLES=10,100,1000  DBLOG_BENCH_SHAPE_ROWS=1000
  DBLOG_BENCH_SHAPE_RATE=500  DBLOG_BENCH_SHAPE_SECONDS=120  DBLOG_BENCH_SHAPE_WRITTEN=50 (tables written)
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import PORTS  # noqa: E402

OUT = Path(__file__).parent / "results"
PARTS = ("capture", "freshness", "dump", "writes", "merge", "sweep", "shape")


def env(name: str, default: str) -> str:
    return os.environ.get(f"DBLOG_BENCH_{name}", default)


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def part(name: str, kinds: list[str], spark_session) -> dict:
    from dblog.settings import settings
    tuned = settings()
    rows, reps = int(env("ROWS", "10000000")), int(env("REPS", "3"))
    chunk = int(env("CHUNK_SIZE", str(tuned.dump.chunk_size)))
    rate, baseline_s = float(env("WRITE_RATE", "1000")), float(env("BASELINE_SECONDS", "60"))
    if name == "capture":
        import capture_bench
        return {k: capture_bench.run(k, int(env("CAPTURE_ROWS", "100000")), reps=reps) for k in kinds}
    if name == "freshness":
        import freshness_bench
        return freshness_bench.run(kinds, 60 * tuned.merge.every_minutes, float(env("FRESHNESS_SECONDS", "600")),
                                   float(env("FRESHNESS_RATE", "1000")), int(env("FRESHNESS_BIG_ROWS", "1000000")),
                                   float(env("FRESHNESS_SCHEDULED_SECONDS", "900")),
                                   tuned.merge.continuous_every_seconds)
    if name == "dump":
        import dump_bench
        tools = tuple(env("DUMP_TOOLS", ",".join(dump_bench.TOOLS)).split(","))
        return {k: dump_bench.idle(k, spark_session(), rows, chunk, int(env("DUMP_REPS", "3")), tools,
                                   env("DUMP_SHAPE", "narrow")) for k in kinds}
    if name == "writes":
        import dump_bench
        tools = tuple(env("WRITES_TOOLS", ",".join(dump_bench.TOOLS)).split(","))
        parallelisms = tuple(int(p) for p in env("WRITES_PARALLELISM", "1").split(","))
        return {k: dump_bench.under_writes(k, spark_session(), rows, chunk, rate, baseline_s, tools, parallelisms)
                for k in kinds}
    if name == "merge":
        import merge_bench
        rows, zk = int(env("MERGE_ROWS", "1000000")), f"127.0.0.1:{PORTS['ZK']}"
        out = {"local": merge_bench.run(spark_session(), rows, zk)}
        if env("MERGE_S3", "1") == "1":
            out["s3"] = merge_bench.run(spark_session(), rows, zk, s3=True)
        return out
    if name == "shape":
        import shape_bench
        return shape_bench.run(env("SHAPE_SOURCE", "mysql"), [int(n) for n in env("SHAPE_TABLES", "10,100,1000").split(",")],
                               int(env("SHAPE_ROWS", "1000")), float(env("SHAPE_RATE", "1000")),
                               float(env("SHAPE_SECONDS", "120")), int(env("SHAPE_WRITTEN", "50")),
                               int(env("SHAPE_BIG_ROWS", "10000000")))
    import sweep_bench
    sizes = [int(s) for s in env("SWEEP_SIZES", "2000,5000,20000,50000").split(",")]
    parallelisms = tuple(int(p) for p in env("SWEEP_PARALLELISM", "1,2,4,8").split(","))
    out = {k: sweep_bench.run(k, int(env("SWEEP_ROWS", "1000000")), sizes, rate, 30.0, reps, parallelisms)
           for k in kinds}
    best = sweep_bench.recommend(*[sweep_bench.rates_of(r) for r in out.values()])
    return {**out, "recommended": sweep_bench.grid_key(*best)}


def main() -> int:
    import report
    parts = [p for p in env("PARTS", ",".join(PARTS)).split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        sys.exit(f"unknown DBLOG_BENCH_PARTS {', '.join(sorted(unknown))}: pick from {', '.join(PARTS)}")
    kinds = env("SOURCES", "mysql,postgres").split(",")
    spark = []

    def spark_session():
        if not spark:
            import baselines
            spark.append(baselines.spark_session())
        return spark[0]

    if "merge" in parts and env("MERGE_S3", "1") == "1":
        # Before any Spark session: its executors inherit the S3 server's address and credentials.
        import subprocess
        subprocess.run(["bash", str(Path(__file__).parent.parent / "scripts/services.sh"), "start", "seaweedfs"],
                       check=True)
        from dblog_dev.local import s3_env
        os.environ.update(s3_env())
    OUT.mkdir(exist_ok=True)
    for name in parts:
        print(f"== {name}", flush=True)
        started = dt.datetime.now(dt.UTC)
        result = part(name, kinds, spark_session)
        doc = {"when": started.isoformat(timespec="seconds"), "machine": machine(),
               "minutes": round((dt.datetime.now(dt.UTC) - started).total_seconds() / 60, 1),
               "result": result}
        (OUT / f"{name}{env('RESULT_SUFFIX', '')}.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(report.write(OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
