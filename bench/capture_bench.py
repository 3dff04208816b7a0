"""Capture throughput against a bare read loop of the same client library over the same log."""
from __future__ import annotations

import uuid
from functools import partial

import pandas  # noqa: F401  (pyarrow loads it on first Table; load it before timing, as a running capture has)

from dblog.capture.capture_loop import Capture, sync_point
from dblog.coordination.checkpoint import checkpoint_path

from common import admin, median, namespace, run_sql, source, staged, store, timed

NS = "bench_capture"


def _load(kind: str, rows: int) -> None:
    """Inserts in transactions of 100 rows, then updates of half of them in transactions of 50."""
    conn = admin(kind)
    cur = conn.cursor()
    ts = "NOW(6)" if kind == "mysql" else "now()"
    for start in range(0, rows, 100):
        values = ", ".join(f"({i}, 'name-{i}', {i}.25, {ts})" for i in range(start, start + 100))
        cur.execute(f"INSERT INTO {NS}.t VALUES {values}")
    for start in range(0, rows // 2, 50):
        cur.execute(f"UPDATE {NS}.t SET b = b + 1 WHERE id >= {start} AND id < {start + 50}")
    conn.close()


def _table(kind: str) -> None:
    namespace(kind, NS)
    ts = "DATETIME(6)" if kind == "mysql" else "TIMESTAMP"
    run_sql(kind, f"CREATE TABLE {NS}.t (id BIGINT PRIMARY KEY, a VARCHAR(32), b DECIMAL(12,2), c {ts})")


def bare_mysql(src, start: dict) -> int:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import (
        DeleteRowsEvent,
        UpdateRowsEvent,
        WriteRowsEvent,
    )
    reader = BinLogStreamReader(connection_settings=src.settings, server_id=src.server_id + 1, resume_stream=True,
                                log_file=start["log_file"], log_pos=start["log_pos"], blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                only_schemas=[NS], is_mariadb=False)
    n = 0
    for ev in reader:
        for _row in ev.rows:
            n += 1
    reader.close()
    return n


def bare_postgres(src, end_lsn: int, decode: bool = False) -> int:
    """The library's read loop; with `decode`, our pgoutput decoder over each message too (where
    the capture's ceiling is once every row is parsed)."""
    import psycopg2.extras

    from dblog.sources.pgoutput import Decoder
    decoder = Decoder()
    conn = src.connect(connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=src.slot, decode=False,
                          options={"proto_version": "1", "publication_names": src.publication})
    n = 0
    while True:
        msg = cur.read_message()
        if msg is None:
            continue
        kind = msg.payload[:1]
        if decode:
            decoder.decode(msg.payload)
        if kind in (b"I", b"U", b"D"):
            n += 1
        elif kind == b"C" and msg.data_start >= end_lsn:
            break
    conn.close()
    return n


def run(kind: str, rows: int = 100_000, reps: int = 3) -> dict:
    bare_rates, ours_rates, decode_rates, counts = [], [], [], []
    for _ in range(reps):
        _table(kind)
        slots = [f"bench_bare_{uuid.uuid4().hex[:6]}", f"bench_ours_{uuid.uuid4().hex[:6]}",
                 f"bench_decode_{uuid.uuid4().hex[:6]}"]
        bare_src, our_src = source(kind, "bench_bare", NS, slots[0]), source(kind, "bench_ours", NS, slots[1])
        decode_src = source(kind, "bench_decode", NS, slots[2]) if kind == "postgres" else None
        st = store()
        for s in (bare_src, our_src, decode_src):
            if s is not None:
                s.preflight()
        start = our_src.start_point()
        if start is not None:
            st.put(checkpoint_path(our_src.name), {"resume": start, "position": None})
        _load(kind, rows)
        mark = sync_point(our_src)
        from dblog.model.positions import lsn_to_int
        end = lsn_to_int(our_src.head()["lsn"]) if kind == "postgres" else None
        bare = partial(bare_mysql, bare_src, start) if kind == "mysql" else partial(bare_postgres, bare_src, end)
        bare_s, n_bare = timed(bare)
        if decode_src is not None:   # PostgreSQL's bare loop parses no row; this one does, as ours must
            decode_s, n_decoded = timed(partial(bare_postgres, decode_src, end, decode=True))
            decode_rates.append(n_decoded / decode_s)
        capture = Capture(our_src, st, staged())
        ours_s, stats = timed(partial(capture.run, until_watermark=mark))
        bare_rates.append(n_bare / bare_s)
        ours_rates.append(stats.events / ours_s)
        counts.append((n_bare, stats.events))
        st.stop()
        if kind == "postgres":
            for s in (bare_src, our_src, decode_src):
                s.close()
            run_sql(kind, *[f"SELECT pg_drop_replication_slot('{s}')" for s in slots])
    out = {"rows_changed": counts[0][0], "bare_rows_per_s": round(median(bare_rates)),
           "capture_rows_per_s": round(median(ours_rates)),
           "ratio": round(median([o / b for o, b in zip(ours_rates, bare_rates)]), 3), "reps": reps}
    if decode_rates:
        out["decode_rows_per_s"] = round(median(decode_rates))
        out["ratio_to_decode"] = round(median([o / d for o, d in zip(ours_rates, decode_rates)]), 3)
    return out
