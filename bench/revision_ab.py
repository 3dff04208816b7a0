"""A change against an earlier revision, in the same run: the whole in-process dump of the bench
table (bench/reader_bench.py creates it), the revision's code against this checkout's, alternating.

    python bench/revision_ab.py REV mysql|postgres [PARALLELISM=1] [REPS=3] [CHUNK=20000]

REV is checked out (git worktree) under .local/ab-REV, sharing this checkout's .local (services,
passwords). Each dump runs in a fresh process with that revision's `include/` first on the path.
Prints rows/s per side (median) and new/old.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE = """
import json, sys
sys.path.insert(0, {bench!r})
import bigtable
try:
    import dblog.snapshot.dump as D
except ImportError:  # a revision from before the engine was grouped by stage
    import dblog.dump as D
from common import dump_rate, dump_rig
with dump_rig({kind!r}, "bench_reader", "bench_reader") as rig:
    spec = D.DumpSpec(tables=["bench_reader." + bigtable.TABLE], chunk_size={chunk}, parallelism={p})
    print(json.dumps(dump_rate(rig, spec)))
"""


def worktree(rev: str) -> Path:
    path = ROOT / ".local" / f"ab-{rev}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
        (path / ".local").symlink_to(ROOT / ".local")
    return path


def rate(root: Path, kind: str, parallelism: int, chunk: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(root / "include"), "DBLOG_DUMP_READER": "threads"}
    code = ONE.format(bench=str(root / "bench"), kind=kind, chunk=chunk, p=parallelism)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    return float(out.stdout.strip().splitlines()[-1])


def main(rev: str, kind: str, parallelism: int = 1, reps: int = 3, chunk: int = 20_000) -> dict:
    sides = {"old": worktree(rev), "new": ROOT}
    rates: dict[str, list[float]] = {s: [] for s in sides}
    for _ in range(reps):
        for side, root in sides.items():
            rates[side].append(rate(root, kind, parallelism, chunk))
    med = {s: round(statistics.median(r)) for s, r in rates.items()}
    out = {"rev": rev, "kind": kind, "parallelism": parallelism, "chunk": chunk, "reps": reps,
           "rows_per_s": med, "ratio_new_old": round(med["new"] / med["old"], 2)}
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[2] not in ("mysql", "postgres"):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:6]))
