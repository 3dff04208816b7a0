"""A composite-key dump on MariaDB: each key bound spelled out column by column (a range on the
key index) against the row-value comparison dblog used before (which MariaDB 10.11 answers by
walking the key index from the table's first key), same table, same run, alternating.

    python bench/composite_key_bench.py [ROWS=1000000,2000000] [REPS=2] [CHUNK=20000] [PARALLELISM=1]

Writes bench/results/composite-key.json: rows/s per size and spelling (medians), new/old.
"""
from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import dump_rate, dump_rig, namespace, run_sql  # noqa: E402

NS, TABLE = "bench_composite", "lines"


def create(rows: int) -> None:
    """`rows` lines, five per order: the shape of an order_lines table."""
    namespace("mysql", NS)
    run_sql("mysql", f"CREATE TABLE {NS}.{TABLE} (order_id BIGINT, line_no INT, sku VARCHAR(40), "
                     "qty INT, price DECIMAL(12,2), PRIMARY KEY (order_id, line_no)) ENGINE=InnoDB",
            f"INSERT INTO {NS}.{TABLE} SELECT seq DIV 5, seq MOD 5, CONCAT('sku-', seq MOD 977), seq MOD 9, "
            f"seq / 7 FROM {NS}.seq_0_to_{rows - 1}",
            f"ANALYZE TABLE {NS}.{TABLE}")


def dump(chunk: int, parallelism: int, row_values: bool) -> float:
    import dblog.snapshot.dump as D
    from dblog.sources.base import Dialect
    from dblog.sources.mysql import MySQLDialect
    spelled = MySQLDialect.key_bound
    if row_values:   # the spelling before: one row-value comparison
        MySQLDialect.key_bound = Dialect.key_bound  # type: ignore[method-assign]
    try:
        with dump_rig("mysql", "bench_composite", NS) as rig:
            spec = D.DumpSpec(tables=[f"{NS}.{TABLE}"], chunk_size=chunk, parallelism=parallelism)
            return dump_rate(rig, spec)
    finally:
        MySQLDialect.key_bound = spelled  # type: ignore[method-assign]


def main(sizes: list[int], reps: int = 2, chunk: int = 20_000, parallelism: int = 1) -> dict:
    out: dict[int, dict] = {}
    for rows in sizes:
        create(rows)
        rates: dict[str, list[float]] = {"spelled": [], "row_values": []}
        for _ in range(reps):
            for side in rates:
                rates[side].append(dump(chunk, parallelism, side == "row_values"))
        med = {side: round(statistics.median(r)) for side, r in rates.items()}
        out[rows] = {"rows_per_s": med, "ratio_new_old": round(med["spelled"] / med["row_values"], 2)}
        print(rows, out[rows], flush=True)
    result = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "chunk": chunk,
              "parallelism": parallelism, "reps": reps, "sizes": out}
    (Path(__file__).parent / "results" / "composite-key.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    main([int(n) for n in (args[0] if args else "1000000,2000000").split(",")], *(int(a) for a in args[1:4]))
