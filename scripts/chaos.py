"""`make chaos`: seeded randomized convergence runs against the local sources.

    make chaos                                   # RUNS=4 runs of SECONDS=120 s, both sources, fresh seeds
    make chaos SOURCES=postgres SEED=8812 SECONDS=60   # replay one run from its seed
    make chaos LEGACY=1 SOURCES=mariadb RUNS=10  # with writes logged without rows (statements,
                                                 # TRUNCATE, LOAD DATA): 5 seeds per merge mode
    make chaos MERGE=continuous                  # MERGE=batch|continuous|both (default: both, alternating)

Each run: writers, dumps of all tables, one table and random key lists with random chunk sizes,
throttle changes, pauses, resumes, cancels, merges at random moments and kill -9 of dumps and the
capture (tests/chaos/scenario.py); then the oracles (tests/chaos/oracles.py). Prints a report,
writes it to .local/chaos/report.json and exits 1 if any run broke a property.
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "chaos"), str(ROOT / "include")]

from scenario import run  # noqa: E402


def main() -> int:
    kinds = (os.environ.get("SOURCES") or "mariadb,postgres").split(",")
    seconds = float(os.environ.get("CHAOS_SECONDS") or 120)
    seed = os.environ.get("SEED") or None
    runs = 1 if seed else int(os.environ.get("RUNS") or 4)
    legacy = os.environ.get("LEGACY") not in (None, "", "0")
    merge = os.environ.get("MERGE") or "both"
    if merge not in ("batch", "continuous", "both"):
        print(f"MERGE must be batch, continuous or both, got {merge!r}", file=sys.stderr)
        return 2
    modes = {"batch": [False], "continuous": [True], "both": [False, True]}[merge]
    from dblog.spark.session import session
    spark = session("dblog-chaos", "local[2]", {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"})
    reports = []
    out = ROOT / ".local" / "chaos"
    out.mkdir(parents=True, exist_ok=True)
    for i in range(runs):
        kind, continuous = kinds[i % len(kinds)], modes[(i // len(kinds)) % len(modes)]
        s = int(seed) if seed else random.SystemRandom().randrange(1, 10**6)
        reports.append(run(kind, s, seconds, spark, Path(tempfile.mkdtemp(prefix="run-", dir=out)),
                           legacy=legacy, continuous=continuous))
    spark.stop()
    print("\n| source | mode | seed | s | transactions | unlogged writes | staged events | dumps | merges | kill -9 | "
          "converged after | outcome |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        print(f"| {r.kind} | {r.mode} | {r.seed} | {r.elapsed_s} | {r.transactions:,} | {r.legacy_writes} | {r.events:,} | "
              f"{r.dumps} | {r.merges} | {r.kills} | {r.converged_s} s | {'ok' if r.ok else 'FAILED'} |")
    for r in reports:
        if not r.ok:
            print(f"\n{r.kind} seed {r.seed} FAILED:\n  " + "\n  ".join(r.problems[:10]) + f"\nreplay: {r.replay()}")
    (out / "report.json").write_text(json.dumps([{**asdict(r), "ok": r.ok} for r in reports], indent=1) + "\n")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
