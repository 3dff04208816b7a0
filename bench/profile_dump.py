"""Profile one dump in-process (cProfile): where a chunk's time goes.

    python bench/profile_dump.py mysql|postgres [ROWS=500000] [CHUNK=20000] [SORT=tottime]

Creates bench_profile.t (bench/bigtable.py) with ROWS rows and dumps it once, no capture
running (the dump does not need one to stage), then prints the 30 costliest functions.
"""
from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bigtable  # noqa: E402
from common import run_sql, source, staged, store  # noqa: E402

NS = "bench_profile"


def main(kind: str, rows: int = 500_000, chunk: int = 20_000, sort: str = "tottime") -> None:
    from dblog.coordination.checkpoint import ensure_checkpoint
    from dblog.snapshot.dump import create_dump, run_dump
    from dblog.snapshot.dump_spec import DumpSpec
    bigtable.create(kind, NS, rows)
    src, st, stage = source(kind, "bench_profile", NS), store(), staged()
    try:
        ensure_checkpoint(st, src)
        dump_id = create_dump(st, src, DumpSpec(tables=[f"{NS}.{bigtable.TABLE}"], chunk_size=chunk))
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        progress = run_dump(st, src, stage, dump_id)[0]
        profile.disable()
        elapsed = time.perf_counter() - started
        print(f"{kind}: {progress.rows:,} rows in {elapsed:.1f} s under the profiler "
              f"({progress.rows / elapsed:,.0f} rows/s), chunk {chunk:,}")
        pstats.Stats(profile).sort_stats(sort).print_stats(30)
    finally:
        src.close()
        st.stop()
        if kind == "postgres":
            run_sql(kind, f"SELECT pg_drop_replication_slot('{src.slot}')")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    main(args[0], *(int(a) for a in args[1:3]), *args[3:4])
