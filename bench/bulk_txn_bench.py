"""Bulk transactions: one `UPDATE t SET v = v + 1` of every row of a table of id / int / 80-char
string, captured by `dblog capture` in its own process, as a deployment runs it.

Per size: the capture's resident memory before the transaction and at its peak (`VmHWM`), the
longest time it did not read the log (its `max_stall_s`), the UPDATE's own time, and seconds
from the commit to staged (the checkpoint passes a sync watermark written right after it). With
DBLOG_BENCH_BULK_VISIBLE=1 the table is first dumped and merged into the warehouse, and after
the transaction is staged a `dblog merge` makes it visible: its time and the commit to visible.

    PYTHONPATH=include .venv/bin/python bench/bulk_txn_bench.py [mysql|postgres] ROWS [ROWS ...]

DBLOG_BENCH_CODE=DIR runs the capture of another checkout (its `include/`) on the same machine
and data, for an A/B against this one. Results: printed, and in bench/results/bulk-txn.json under the
source kind and what ran (a size run again replaces its figure).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import ROOT, env_for, namespace, run_sql, source, uri

NS, NAME = "bench_bulk", "bench_bulk"


def _status(pid: int, field: str) -> int:
    """A /proc/<pid>/status figure in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    raise KeyError(field)


def _fill(kind: str, rows: int) -> None:
    namespace(kind, NS)
    run_sql(kind, f"CREATE TABLE {NS}.t (id INT PRIMARY KEY, v INT, s VARCHAR(80))")
    gen = f"{NS}.seq_1_to_{rows}" if kind == "mysql" else f"generate_series(1, {rows}) g"
    col = "seq" if kind == "mysql" else "g"
    run_sql(kind, f"INSERT INTO {NS}.t SELECT {col}, {col}, REPEAT('x', 80) FROM {gen}")


def run(kind: str, rows: int) -> dict:
    from dblog.capture.capture_loop import await_sync, sync_point
    from dblog.coordination.store import StateStore
    from dblog.stagedlog.staged_log import StagedLog

    from common import PORTS
    _fill(kind, rows)
    chroot, slot = f"/bench_{uuid.uuid4().hex[:8]}", f"bench_bulk_{uuid.uuid4().hex[:6]}"
    staging = tempfile.mkdtemp(prefix="dblog-bulk-", dir=str(ROOT / ".local"))
    env = {**env_for(NAME, uri(kind, NS, slot), chroot, staging), "DBLOG_WAREHOUSE": f"{staging}/warehouse"}
    if code := os.environ.get("DBLOG_BENCH_CODE"):
        env["PYTHONPATH"] = str(Path(code) / "include")
    dblog = [sys.executable, "-m", "dblog.cli"]
    cli = [*dblog, "capture", "--source", NAME]
    visible = os.environ.get("DBLOG_BENCH_BULK_VISIBLE") == "1"
    subprocess.run([*cli, "--init"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    src = source(kind, NAME, NS, slot, chroot)
    store = StateStore(f"127.0.0.1:{PORTS['ZK']}", chroot).start()
    try:
        assert await_sync(store, StagedLog(staging), NAME, sync_point(src), 120), "the capture did not start"
        if visible:   # the table in the warehouse first, as in a deployment
            for step in (["dump", "--table", f"{NS}.t"], ["merge"]):
                subprocess.run([*dblog, step[0], "--source", NAME, *step[1:]], env=env, check=True, capture_output=True)
        before = _status(proc.pid, "VmRSS")
        started = time.time()
        run_sql(kind, f"UPDATE {NS}.t SET v = v + 1")
        committed = time.time()
        position = await_sync(store, StagedLog(staging), NAME, sync_point(src), 3600)
        assert position, "the capture did not stage the transaction within an hour"
        staged = time.time()
        peak = _status(proc.pid, "VmHWM")
        shown = None
        if visible:
            subprocess.run([*dblog, "merge", "--source", NAME], env=env, check=True, capture_output=True)
            shown = time.time()
        proc.send_signal(signal.SIGTERM)
        stats = json.loads(proc.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
        store.stop()
        src.close()
        if kind == "postgres":
            run_sql(kind, f"SELECT pg_drop_replication_slot('{slot}')")
    return {"rows": rows, "rss_before_mib": before, "rss_peak_mib": peak, "update_s": round(committed - started, 1),
            "commit_to_staged_s": round(staged - committed, 1), "max_stall_s": round(stats["max_stall_s"], 1),
            "events": stats["events"],
            **({"merge_s": round(shown - staged, 1), "commit_to_visible_s": round(shown - committed, 1)} if shown else {})}


def label(kind: str) -> str:
    """What ran: another checkout's capture, or this one's with its piece size (and on PostgreSQL,
    whether the server streamed the transaction while it was in progress)."""
    from dblog.settings import settings
    code = os.environ.get("DBLOG_BENCH_CODE")
    if code:
        return f"baseline ({code})"
    tuned = settings().capture
    streaming = ", streamed" if kind == "postgres" and tuned.pg_streaming == "on" else ""
    return f"pieces of {tuned.piece_rows:,}{streaming}"


def main(argv: list[str]) -> None:
    kind, sizes = argv[0], [int(n) for n in argv[1:]]
    results = [run(kind, n) for n in sizes]
    for r in results:
        print(json.dumps(r))
    out = ROOT / "bench" / "results" / "bulk-txn.json"
    kept = json.loads(out.read_text()) if out.exists() else {}
    runs = kept.setdefault(kind, {}).setdefault(label(kind), [])
    runs[:] = [r for r in runs if r["rows"] not in sizes] + results   # a size run again replaces its figure
    out.write_text(json.dumps(kept, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
