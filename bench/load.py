"""`make load`: a sustained write load on each source while dumps run back to back.

Per source, one run: the capture runs throughout under DBLOG_LOAD_RATE row changes/s (default
2000); first DBLOG_LOAD_BASELINE_SECONDS (default 120) without dumps, then
DBLOG_LOAD_SECONDS (default 600) with full dumps of both tables one after the other. Sampled
every second: capture lag (time until every earlier commit is staged) and the resident memory of the
capture and dump processes. The writer times every transaction, commit included, so the write
latency with dumps is compared with the same load without them, in the same run.
The dumps are throttled as a user would (DBLOG_LOAD_CHUNK_SIZE, DBLOG_LOAD_DELAY).
Writes bench/results/load.json and load.md. DBLOG_LOAD_SOURCES picks sources (mysql,postgres).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ADMIN, PORTS, ROOT, env_for, namespace, run_sql, source, spawn, uri  # noqa: E402
from harness import LagProbe, pct, rss_mb  # noqa: E402

OUT = Path(__file__).parent / "results"
NS = "bench_load"
ROWS = int(os.environ.get("DBLOG_LOAD_ROWS", "200000"))  # accounts; order_lines get ~1.5x as many
CHUNK = int(os.environ.get("DBLOG_LOAD_CHUNK_SIZE", "1000"))
DELAY = float(os.environ.get("DBLOG_LOAD_DELAY", "0.5"))  # the dump throttle, seconds between chunks
# Where the staged log goes. Default: next to the databases' data, on the same disk, the worst case.
STAGING_DIR = os.environ.get("DBLOG_LOAD_STAGING_DIR", str(ROOT / ".local"))
NICE = int(os.environ.get("DBLOG_LOAD_DUMP_NICE", "10"))  # >0: the dump worker yields CPU to the source


def run(kind: str, rate: float, baseline_s: float, load_s: float) -> dict:
    from dblog.coordination.store import StateStore
    from dblog_dev.workload import Workload, connect
    namespace(kind, NS)
    k, conn = connect(ADMIN[kind])
    Workload(k, conn, NS, seed=1, rows=ROWS).create()
    conn.close()
    name, chroot, slot = f"load_{kind}", f"/bench_load_{uuid.uuid4().hex[:6]}", f"bench_load_{uuid.uuid4().hex[:6]}"
    staging = tempfile.mkdtemp(prefix="dblog-load-", dir=STAGING_DIR)
    env = env_for(name, uri(kind, NS, slot), chroot, staging)
    cli = ["-m", "dblog.cli"]
    spawn([*cli, "capture", "--init", "--source", name], env).wait()
    capture = spawn([*cli, "capture", "--source", name], env)
    latency_file = f"{staging}/latencies.json"
    writer = spawn(["-m", "dblog_dev.workload", ADMIN[kind], NS, "--seconds", str(baseline_s + load_s), "--seed", "2",
                    "--rows", str(ROWS), "--rate", str(rate), "--latency-out", latency_file], env)
    store = StateStore(f"127.0.0.1:{PORTS['ZK']}", chroot).start()
    src = source(kind, name, NS, slot, chroot)
    probe = LagProbe(src, store, name)
    samples, dumps, dump_rows = [], 0, 0
    start = time.time()
    dump_from, end = start + baseline_s, start + baseline_s + load_s
    dump, next_sample = None, start
    while time.time() < end:
        now = time.time()
        if now >= dump_from and (dump is None or dump.poll() is not None):
            if dump is not None:
                assert dump.returncode == 0, f"dump failed with {dump.returncode}"
                dumps += 1
                dump_rows += sum(t["rows"] for t in json.loads(dump.stdout.read())["tables"].values())
            dump = subprocess.Popen(["nice", "-n", str(NICE), sys.executable, *cli, "dump", "--all", "--source", name,
                                     "--chunk-size", str(CHUNK), "--delay", str(DELAY)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        probe.poll()
        if now >= next_sample:
            samples.append({"t": now - start, "dumping": now >= dump_from, "capture_mb": rss_mb(capture.pid),
                            "dump_mb": rss_mb(dump.pid) if dump is not None and dump.poll() is None else None})
            next_sample += 1.0
        time.sleep(0.1)
    src.close()
    writer.wait()
    if dump is not None:
        dump.terminate(); dump.wait()
    capture.terminate(); capture.wait()
    store.stop()
    latencies = json.loads(Path(latency_file).read_text())
    if kind == "postgres":
        run_sql(kind, f"SELECT pg_drop_replication_slot('{slot}')")

    def phase(dumping: bool) -> dict:
        lat = [s * 1000 for t, s in latencies if (t >= dump_from) == dumping and t - start > 5]  # 5 s warm-up
        lags = probe.lag(dump_from, end) if dumping else probe.lag(start + 5, dump_from)
        achieved = len([1 for t, _ in latencies if (t >= dump_from) == dumping])
        return {"write_ms_p50": round(pct(lat, 0.5), 3), "write_ms_p99": round(pct(lat, 0.99), 3),
                "transactions_per_s": round(achieved / (load_s if dumping else baseline_s), 1),
                "lag_s_p50": round(pct(lags, 0.5), 2), "lag_s_p99": round(pct(lags, 0.99), 2),
                "lag_s_max": round(max(lags), 2) if lags else None}

    base, loaded = phase(False), phase(True)
    capture_mb = [s["capture_mb"] for s in samples if s.get("capture_mb")]
    dump_mb = [s["dump_mb"] for s in samples if s.get("dump_mb")]
    minute = max(1, len(capture_mb) // 10)
    return {"rate": rate, "chunk_size": CHUNK, "delay_s": DELAY, "baseline_s": baseline_s, "load_s": load_s, "dumps": dumps, "dumped_rows": dump_rows,
            "without_dumps": base, "with_dumps": loaded,
            "write_p99_ratio": round(loaded["write_ms_p99"] / base["write_ms_p99"], 3),
            "capture_mb_max": round(max(capture_mb), 1), "capture_mb_first_tenth_max": round(max(capture_mb[:minute]), 1),
            "capture_mb_last_tenth_max": round(max(capture_mb[-minute:]), 1),
            "dump_mb_max": round(max(dump_mb), 1) if dump_mb else None}


def main() -> int:
    rate = float(os.environ.get("DBLOG_LOAD_RATE", "2000"))
    baseline_s = float(os.environ.get("DBLOG_LOAD_BASELINE_SECONDS", "120"))
    load_s = float(os.environ.get("DBLOG_LOAD_SECONDS", "600"))
    kinds = os.environ.get("DBLOG_LOAD_SOURCES", "mysql,postgres").split(",")
    results = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cores", "rows": ROWS, "sources": {}}
    for kind in kinds:
        print(f"load: {kind}, {rate:.0f} changes/s, {baseline_s:.0f} s without dumps then {load_s:.0f} s with",
              flush=True)
        results["sources"][kind] = run(kind, rate, baseline_s, load_s)
        print(json.dumps(results["sources"][kind], indent=1), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "load.json").write_text(json.dumps(results, indent=2) + "\n")
    names = {"mysql": "MariaDB 10.11", "postgres": "PostgreSQL 15"}
    lines = [f"Measured {results['when']} on {results['machine']}: {rate:.0f} row changes/s; "
             f"{baseline_s:.0f} s without dumps, then {load_s:.0f} s of back-to-back full dumps "
             f"({ROWS:,} accounts + order lines; chunk size {CHUNK}, {DELAY} s between chunks).", "",
             "| source | dumps (rows) | write p50 / p99 ms, no dump | with dumps | p99 ratio | capture lag p50 / p99 / max s, with dumps | no dump | capture RSS MB first / last tenth / max | dump RSS MB max |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, r in results["sources"].items():
        b, w = r["without_dumps"], r["with_dumps"]
        lines.append(f"| {names[kind]} | {r['dumps']} ({r['dumped_rows']:,}) | {b['write_ms_p50']} / {b['write_ms_p99']} | "
                     f"{w['write_ms_p50']} / {w['write_ms_p99']} | {r['write_p99_ratio']} | "
                     f"{w['lag_s_p50']} / {w['lag_s_p99']} / {w['lag_s_max']} | {b['lag_s_p50']} / {b['lag_s_p99']} / {b['lag_s_max']} | "
                     f"{r['capture_mb_first_tenth_max']} / {r['capture_mb_last_tenth_max']} / {r['capture_mb_max']} | {r['dump_mb_max']} |")
    (OUT / "load.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
