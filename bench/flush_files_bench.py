"""Files a capture flush writes, and its time, when every transaction touches many tables: shared
segments on (the default) and off (`DBLOG_CAPTURE_SHARED_SEGMENT_TABLES=0`), the staged log on
local disk and on the S3 server (SeaweedFS, `scripts/services.sh start seaweedfs`).

    PYTHONPATH=include:bench python bench/flush_files_bench.py mysql|postgres [TABLES=200] [TXNS=20]

Each run: TXNS transactions, each updating one row of every one of TABLES tables; then the
capture (in this process) reads them to a sync watermark. Writes (and prints) the files staged,
the flushes, and the seconds from the capture's start to the watermark staged, per storage and
mode (median of 3): bench/results/flush-files-{kind}.json.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid

from dblog.capture.capture_loop import Capture, sync_point
from dblog.coordination.checkpoint import checkpoint_path
from dblog.stagedlog.staged_log import StagedLog

from common import ROOT, admin, median, namespace, run_sql, source, store, timed

NS = "bench_flush"


def _tables(kind: str, n: int) -> None:
    namespace(kind, NS)
    run_sql(kind, *[f"CREATE TABLE {NS}.t{i:04d} (id INT PRIMARY KEY, v INT)" for i in range(n)],
            *[f"INSERT INTO {NS}.t{i:04d} VALUES (1, 0)" for i in range(n)])


def _writes(kind: str, n: int, txns: int) -> None:
    conn = admin(kind)
    if kind == "mysql":
        conn.autocommit(False)
    else:
        conn.autocommit = False
    cur = conn.cursor()
    for _ in range(txns):
        for i in range(n):
            cur.execute(f"UPDATE {NS}.t{i:04d} SET v = v + 1 WHERE id = 1")
        conn.commit()
    conn.close()


def _files(staged: StagedLog) -> int:
    from pyarrow import fs as pafs
    infos = staged.fs.get_file_info(pafs.FileSelector(staged.base, recursive=True, allow_not_found=True))
    return sum(1 for i in infos if i.type == pafs.FileType.File)


def one(kind: str, root: str, n: int, txns: int, shared: bool) -> dict:
    os.environ["DBLOG_CAPTURE_SHARED_SEGMENT_TABLES"] = "8" if shared else "0"   # read at each flush
    slot = f"bench_flush_{uuid.uuid4().hex[:6]}"
    src, st, staged = source(kind, "bench_flush", NS, slot), store(), StagedLog(root)
    src.preflight()
    st.put(checkpoint_path(src.name), {"resume": src.start_point(), "position": None})
    _writes(kind, n, txns)
    mark = sync_point(src)
    capture = Capture(src, st, staged)
    seconds, stats = timed(lambda: capture.run(until_watermark=mark))
    out = {"files": _files(staged), "flushes": stats.flushes, "seconds": round(seconds, 2), "events": stats.events}
    st.stop()
    src.close()
    if kind == "postgres":
        run_sql(kind, f"SELECT pg_drop_replication_slot('{slot}')")
    return out


def main() -> None:
    kind = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    txns = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    _tables(kind, n)
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "start", "seaweedfs"], check=True, capture_output=True)
    from dblog_dev.local import s3_env
    os.environ.update(s3_env())
    results: dict = {}
    for storage in ("local", "s3"):
        for shared in (False, True):
            runs = []
            for _ in range(3):
                tag = uuid.uuid4().hex[:8]
                root = str(ROOT / ".local" / f"bench-flush-{tag}") if storage == "local" else f"s3://bench-flush-{tag}/staged"
                runs.append(one(kind, root, n, txns, shared))
            key = f"{storage}, shared segments {'on' if shared else 'off'}"
            results[key] = {"files": runs[0]["files"], "flushes": runs[0]["flushes"], "events": runs[0]["events"],
                            "seconds": median([r["seconds"] for r in runs]), "runs": [r["seconds"] for r in runs]}
            print(key, results[key], flush=True)
    out = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "kind": kind, "tables": n,
           "transactions": txns, "results": results}
    (ROOT / "bench" / "results" / f"flush-files-{kind}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
