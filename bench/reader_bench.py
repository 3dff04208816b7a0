"""A dump's windows read by Spark executors against the same dump read by threads in the dump's
process; same table, same parallelism, same run, alternating reps.

    python bench/reader_bench.py mysql|postgres [ROWS=1000000] [CHUNK=20000] [PARALLELISM=2] [REPS=3]
    python bench/reader_bench.py windows mysql|postgres [SPLIT=100000] [PARALLELISM=2]

The `windows` form times one window's splits read and staged as Parquet (the same planned
splits, no watermarks) three ways: threads, Spark tasks over the native drivers (the `spark`
reader), and Spark's JDBC reader writing Parquet (a query per split: what a JVM decode would buy,
values not converted to the staged types; its predicates assume bigtable's dense ids from 1). Run it after the first
form, which creates the table.

Creates bench_reader.t (bench/bigtable.py) once and dumps it REPS times each way, no capture
running (a dump stages without one). The Spark session is started before the first timed dump
(a dump task starts it once per process). Prints rows/s per way (median) and the ratio.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bigtable  # noqa: E402
from common import dump_rate, dump_rig, source  # noqa: E402

NS = "bench_reader"
WAYS = ("spark", "threads")


def main(kind: str, rows: int = 1_000_000, chunk: int = 20_000, parallelism: int = 2, reps: int = 3) -> dict:
    import dblog.snapshot.dump as D
    from dblog.spark.session import session
    bigtable.create(kind, NS, rows)
    rates: dict[str, list[float]] = {w: [] for w in WAYS}
    session("dblog-dump")
    try:
        with dump_rig(kind, "bench_reader", NS) as rig:
            for _ in range(reps):
                for way in WAYS:
                    os.environ["DBLOG_DUMP_READER"] = way
                    rates[way].append(dump_rate(rig, D.DumpSpec(tables=[f"{NS}.{bigtable.TABLE}"],
                                                                chunk_size=chunk, parallelism=parallelism)))
    finally:
        os.environ.pop("DBLOG_DUMP_READER", None)
    med = {w: round(statistics.median(r)) for w, r in rates.items()}
    out = {"kind": kind, "rows": rows, "chunk": chunk, "parallelism": parallelism, "reps": reps,
           "rows_per_s": med, "ratio": round(med["spark"] / med["threads"], 2)}
    print(out, flush=True)
    return out


def windows(kind: str, split: int = 100_000, parallelism: int = 2) -> dict:
    import tempfile

    from dblog.snapshot.spark_windows import SparkWindowReader
    from dblog.snapshot.windows import SplitStaging, WindowPlan, WindowReader, plan_window
    from dblog.stagedlog.staged_log import StagedLog

    import baselines
    src = source(kind, "bench_reader", NS)
    schema = src.table_schema(f"{NS}.{bigtable.TABLE}")
    spark = baselines.spark_session()
    threads, tasks = WindowReader(src), SparkWindowReader(src, spark)
    url, props = baselines.jdbc(kind, NS)
    quote = src.dialect.quote
    scratch = tempfile.mkdtemp(prefix="reader-bench-", dir=os.environ.get("DBLOG_BENCH_SCRATCH"))
    stage = SplitStaging(StagedLog(scratch), "bench")

    def jdbc(plan):
        # Each split as a predicate over the planned keys: one JDBC partition (a task) per split,
        # written as Parquet, as a Spark user copies a table.
        preds = [" AND ".join([f"{quote('id')} > {s.after[0]}" if s.after else "1=1",
                               f"{quote('id')} <= {s.upto[0]}" if s.upto else f"{quote('id')} <= "
                               f"{s.after[0] + s.limit if s.after else s.limit}"]) for s in plan.splits]
        spark.read.jdbc(url, f"{NS}.{bigtable.TABLE}", predicates=preds, properties=props) \
            .write.mode("overwrite").parquet(f"{scratch}/jdbc-{plan.chunk}")

    ways = {"threads": lambda plan: threads.read(schema, plan, stage),
            "spark_tasks": lambda plan: tasks.read(schema, plan, stage), "spark_jdbc": jdbc}
    rates: dict[str, list[float]] = {w: [] for w in ways}
    after, number = None, 0
    for n in range(5):  # 1M rows: a warm-up and four windows of 2 x 100k
        splits = plan_window(src, schema, after, None, split, parallelism)
        rows = 0
        for way, read in ways.items():
            plan = WindowPlan.fresh(number, splits)
            number += plan.parts
            started = time.perf_counter()
            got = read(plan)
            took = time.perf_counter() - started
            rows = rows or sum(r.rows for r in got)
            if n:  # the first window warms each way (Python workers, JDBC driver classes)
                rates[way].append(rows / took)
            if got:
                after = (json.loads(plan.end_after({r.index: r for r in got}))[0],)
    threads.close()
    src.close()
    med = {w: round(statistics.median(r)) for w, r in rates.items()}
    out = {"kind": kind, "split": split, "parallelism": parallelism, "window_rows_per_s": med}
    print(out, flush=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["windows"] and args[1:2] and args[1] in ("mysql", "postgres"):
        sys.exit(windows(args[1], *(int(a) for a in args[2:4])) and None)
    if not args or args[0] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    main(args[0], *(int(a) for a in args[1:5]))
