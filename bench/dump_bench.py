"""A dump of a large table: rows/s against a plain streamed SELECT *, and the capture's longest
stall while the dump runs against the same capture without a dump (same write load, same run)."""
from __future__ import annotations

import json
import signal
import time

from common import (
    ADMIN,
    admin,
    env_for,
    median,
    namespace,
    run_sql,
    source,
    spawn,
    staged,
    store,
    timed,
    uri,
)
from dblog.capture import ensure_checkpoint
from dblog.dump import DumpSpec, create_dump, run_dump

NS = "bench_dump"


def _load(kind: str, rows: int) -> None:
    namespace(kind, NS)
    if kind == "mysql":
        run_sql(kind, f"CREATE TABLE {NS}.big (id BIGINT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2), "
                      "created DATETIME(6))",
                f"INSERT INTO {NS}.big SELECT seq, CONCAT('name-', seq), seq / 7, NOW(6) FROM {NS}.seq_1_to_{rows}")
    else:
        run_sql(kind, f"CREATE TABLE {NS}.big (id BIGINT PRIMARY KEY, name VARCHAR(40), amount NUMERIC(12,2), "
                      "created TIMESTAMP)",
                f"INSERT INTO {NS}.big SELECT g, 'name-' || g, g / 7.0, now() FROM generate_series(1, {rows}) g",
                f"ANALYZE {NS}.big")


def plain_select(kind: str) -> int:
    conn = admin(kind)
    n = 0
    if kind == "mysql":
        import pymysql.cursors
        cur = conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(f"SELECT * FROM {NS}.big")
        for _ in cur:
            n += 1
    else:
        conn.autocommit = False
        cur = conn.cursor(name="plain")
        cur.itersize = 10_000
        cur.execute(f"SELECT * FROM {NS}.big")
        for _ in cur:
            n += 1
    conn.close()
    return n


def _capture_during(kind: str, src, st, stage, seconds: float | None, work) -> dict:
    """Run capture + a writer (subprocesses) around `work` (or for `seconds`); return capture stats."""
    env = env_for(src.name, uri(kind, NS, getattr(src, "slot", None)), st.chroot, stage.base)
    capture = spawn(["-m", "dblog.cli", "capture", "--source", src.name], env)
    writer = spawn(["-m", "dblog.workload", ADMIN[kind], NS, "--seconds", "3600", "--rows", "2000"], env)
    out = None
    try:
        out = work() if work else time.sleep(seconds)
    finally:
        writer.terminate(); writer.wait()
        capture.send_signal(signal.SIGTERM)
        stats = json.loads(capture.communicate(timeout=120)[0].strip().splitlines()[-1])
    return {"stats": stats, "result": out}


def run(kind: str, rows: int = 1_000_000, chunk_size: int = 1000, reps: int = 1) -> dict:
    _load(kind, rows)
    from dblog.workload import Workload, connect
    k, conn = connect(ADMIN[kind])
    Workload(k, conn, NS, seed=1, rows=2000).create()  # accounts/order_lines: the concurrent write load
    conn.close()
    select_rates, idle_rates, dump_rates, stalls, base_stalls, lags, base_lags = [], [], [], [], [], [], []
    for _ in range(reps):
        select_s, n = timed(lambda: plain_select(kind))
        select_rates.append(n / select_s)
        src, st, stage = source(kind, "bench_dump", NS), store(), staged()
        ensure_checkpoint(st, src)

        def dump():
            dump_id = create_dump(st, src, DumpSpec(tables=[f"{NS}.big"], chunk_size=chunk_size))
            t = time.perf_counter()
            progress = run_dump(st, src, stage, dump_id)[0]
            return progress.rows, time.perf_counter() - t
        dumped, dump_s = dump()  # same conditions as the SELECT: nothing else running
        idle_rates.append(dumped / dump_s)
        with_dump = _capture_during(kind, src, st, stage, None, dump)
        dumped, dump_s = with_dump["result"]
        dump_rates.append(dumped / dump_s)
        stalls.append(with_dump["stats"]["max_stall_s"])
        lags.append(with_dump["stats"]["max_lag_s"])
        baseline = _capture_during(kind, src, st, stage, dump_s, None)
        base_stalls.append(baseline["stats"]["max_stall_s"])
        base_lags.append(baseline["stats"]["max_lag_s"])
        src.close(); st.stop()
        if kind == "postgres":
            run_sql(kind, f"SELECT pg_drop_replication_slot('{src.slot}')")
    return {"rows": rows, "chunk_size": chunk_size, "select_rows_per_s": round(median(select_rates)),
            "dump_rows_per_s": round(median(idle_rates)),
            "dump_vs_select": round(median([d / s for d, s in zip(idle_rates, select_rates)]), 3),
            "dump_rows_per_s_with_capture_and_writes": round(median(dump_rates)),
            "capture_max_stall_s_during_dump": round(max(stalls), 3),
            "capture_max_stall_s_without_dump": round(max(base_stalls), 3),
            "capture_max_lag_s_during_dump": round(max(lags), 3),
            "capture_max_lag_s_without_dump": round(max(base_lags), 3), "reps": reps}
