"""Scenarios 2 and 3: a full dump of a large table into the warehouse, against the baselines.

2 (idle source): our dump (capture running, as in production) + catch-up + Spark merge, against
  a plain streamed SELECT * to Parquet, Spark's parallel JDBC read to Parquet and dlt's
  sql_database to Parquet. Each copy is then compared with the source row by row.
3 (under writes): the same, with the writer (bench/bigtable.py) running at RATE row changes/s.
  First BASELINE seconds of writes alone (write latency and capture lag without a dump), then
  each tool copies the table while the writer runs; the writer stops when the copy is done and
  the copy is compared with the source: the rows it gets wrong. For ours, the warehouse is
  compared after the capture caught up and a merge ran.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import baselines
import bigtable
from common import median, spawn
from harness import Harness, pct

NS = "bench_big"
TABLE = f"{NS}.{bigtable.TABLE}"


def ours(h: Harness, spark, chunk_size: int) -> dict:
    # Scenario 2's dump reads one range per window unless DBLOG_BENCH_DUMP_PARALLELISM says more.
    rows, dump_s = h.dump(TABLE, chunk_size, parallelism=int(os.environ.get("DBLOG_BENCH_DUMP_PARALLELISM", "1")))
    catch_up_s = h.catch_up()
    merge_s = h.merge(spark, TABLE)
    return {"rows": rows, "dump_s": dump_s, "catch_up_s": catch_up_s, "merge_s": merge_s,
            "seconds": dump_s + catch_up_s + merge_s, "copy": h.warehouse_table(TABLE)}


def baseline(tool: str, kind: str, spark, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    started = time.time()
    if tool == "plain":
        rows, path = baselines.plain(kind, NS, out), out
    elif tool == "spark_jdbc":
        rows, path = baselines.spark_jdbc(spark, kind, NS, out), out
    else:
        rows, path = baselines.dlt_parquet(kind, NS, out)
    return {"rows": rows, "seconds": time.time() - started, "copy": path}


TOOLS = ("ours", "plain", "spark_jdbc", "dlt")


def warm(spark) -> None:
    """Start the session's Python workers, with the modules a merge's tasks import, before each
    copy is timed, as its JVM already is: neither Spark JDBC nor dblog's merge then pays Spark's
    start-up, which a long-lived session (the continuous merge's) pays once. Spark stops a Python
    worker idle for a minute, so once per run is not enough: a rep's merge comes minutes after
    the last one."""
    def imports(batches):
        import dblog.merge.chunk_loader  # noqa: F401  (as a first load's tasks do)
        import dblog.warehouse.files  # noqa: F401  (as the general merge's do)
        yield from batches
    spark.range(4, numPartitions=2).mapInArrow(imports, "id long").collect()


def copy(tool: str, h: Harness, spark, chunk_size: int) -> dict:
    warm(spark)
    if tool == "ours":
        return ours(h, spark, chunk_size)
    return baseline(tool, h.kind, spark, f"{h.dir}/{tool}")


def idle(kind: str, spark, rows: int, chunk_size: int, reps: int, tools: tuple[str, ...] = TOOLS,
         shape: str = "narrow") -> dict:
    """Scenario 2 (on the `narrow` table or the `taxi` one). Returns per tool: median rows/s, ratio
    to the plain SELECT, rows differing."""
    bigtable.create(kind, NS, rows, shape)
    h = Harness(kind, NS, f"bench_{kind}")
    h.start_capture()
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    try:
        for rep in range(reps):
            for tool in tools:
                if tool == "ours" and rep:  # a fresh warehouse and dump each time
                    h.close(); h = Harness(kind, NS, f"bench_{kind}"); h.start_capture()
                print(f"    {tool} (run {rep + 1}/{reps})", flush=True)
                r = copy(tool, h, spark, chunk_size)
                r["differ"] = bigtable.rows_differing(bigtable.source_versions(kind, NS), bigtable.copy_versions(r.pop("copy")))
                runs[tool].append(r)
                print(f"      {r['rows']:,} rows in {r['seconds']:.1f} s; rows differing: {r['differ']['total']}", flush=True)
    finally:
        h.close()
    out = {"rows": rows, "shape": shape, "chunk_size": chunk_size, "reps": reps, "tools": {}}
    rates = {tool: median([r["rows"] / r["seconds"] for r in rs]) for tool, rs in runs.items()}
    for tool, rs in runs.items():
        rate = rates[tool]
        out["tools"][tool] = {"rows_per_s": round(rate), **{f"vs_{b}": round(rate / rates[b], 3) for b in
                                                            ("plain", "spark_jdbc") if b in rates},
                              "seconds": round(median([r["seconds"] for r in rs]), 1),
                              "rows_differing": max(r["differ"]["total"] for r in rs)}
        if tool == "ours":
            out["tools"][tool].update({k: round(median([r[k] for r in rs]), 1) for k in ("dump_s", "catch_up_s", "merge_s")})
            out["tools"][tool]["dump_rows_per_s"] = round(median([r["rows"] / r["dump_s"] for r in rs]))
    return out


def _writer(h: Harness, rate: float, out: str):
    return spawn([str(Path(__file__).parent / "bigtable.py"), "write", h.kind, h.ns, str(rate), out], h.env)


def _stop(writer, out: str) -> list[tuple[float, float]]:
    writer.send_signal(signal.SIGTERM)
    writer.wait(timeout=60)
    return json.loads(Path(out).read_text())


def ours_label(parallelism: int) -> str:
    """Scenario 3's name for a dblog run: `ours` at parallelism 1, `ours_p4` at 4."""
    return "ours" if parallelism == 1 else f"ours_p{parallelism}"


def under_writes(kind: str, spark, rows: int, chunk_size: int, rate: float, baseline_s: float,
                 tools: tuple[str, ...] = TOOLS, parallelisms: tuple[int, ...] = (1,)) -> dict:
    """Scenario 3 (one run per tool, dblog once per parallelism; the table keeps changing from
    run to run)."""
    runs = [(ours_label(p), p) for p in parallelisms] if "ours" in tools else []
    runs += [(t, 1) for t in tools if t != "ours"]
    bigtable.create(kind, NS, rows)
    h = Harness(kind, NS, f"bench_{kind}")
    h.start_capture()
    probe = h.probe()
    result = {"rows": rows, "chunk_size": chunk_size, "rate": rate, "baseline_s": baseline_s, "tools": {}}
    try:
        out = f"{h.dir}/latency-none.json"
        w, t0 = _writer(h, rate, out), time.time()
        while time.time() < t0 + baseline_s:
            probe.poll(); time.sleep(0.1)
        lat = [s * 1000 for t, s in _stop(w, out) if t > t0 + 5]  # 5 s warm-up
        t1 = time.time()
        result["no_dump"] = {"write_ms_p50": round(pct(lat, 0.5), 2), "write_ms_p99": round(pct(lat, 0.99), 2),
                             "lag_s_p50": round(pct(probe.lag(t0 + 5, t1), 0.5), 2),
                             "lag_s_max": round(max(probe.lag(t0 + 5, t1), default=0), 2),
                             "longest_pause_s": round(probe.longest_pause(t0 + 5, t1), 2)}
        for tool, parallelism in runs:
            print(f"    {tool} under {rate:.0f} row changes/s", flush=True)
            out, samples = f"{h.dir}/latency-{tool}.json", []
            ours = tool.startswith("ours")
            w, t0 = _writer(h, rate, out), time.time()
            time.sleep(2)  # the writer is connected and writing before the copy starts
            if ours:
                rows_done, dump_s = h.dump(TABLE, chunk_size, probe=probe, samples=samples, parallelism=parallelism)
                r = {"rows": rows_done, "seconds": dump_s, "parallelism": parallelism}
            else:
                r = baseline(tool, kind, spark, f"{h.dir}/{tool}")
            t1 = time.time()
            lat = [s * 1000 for t, s in _stop(w, out) if t0 + 2 <= t <= t1]
            if ours:
                r["catch_up_s"] = h.catch_up()
                r["merge_s"] = h.merge(spark, TABLE)
                r["dropped_in_windows"] = h.last_merge.dropped
                r["copy"] = h.warehouse_table(TABLE)
                lags = probe.lag(t0 + 2, t1)
                r.update({"lag_s_p50": round(pct(lags, 0.5), 2), "lag_s_p99": round(pct(lags, 0.99), 2),
                          "lag_s_max": round(max(lags, default=0), 2),
                          "longest_pause_s": round(probe.longest_pause(t0 + 2, t1), 2),
                          "timeline": [{"t": round(s["t"] - t0, 1), "rows": s["rows"]} for s in samples],
                          "lag_timeline": [{"t": round(t - t0, 1), "lag_s": round(s, 2)} for t, s in probe.lags
                                           if t0 <= t <= t1]})
            r["differ"] = bigtable.rows_differing(bigtable.source_versions(kind, NS), bigtable.copy_versions(r.pop("copy")))
            r.update({"rows_per_s": round(r["rows"] / r["seconds"]), "seconds": round(r["seconds"], 1),
                      "write_ms_p50": round(pct(lat, 0.5), 2), "write_ms_p99": round(pct(lat, 0.99), 2),
                      "write_p99_vs_no_dump": round(pct(lat, 0.99) / result["no_dump"]["write_ms_p99"], 2)})
            print(f"      {r['rows']:,} rows in {r['seconds']} s, write p99 {r['write_ms_p99']} ms, "
                  f"rows differing after the writes stopped: {r['differ']['total']}", flush=True)
            result["tools"][tool] = r
    finally:
        h.close()
    return result

