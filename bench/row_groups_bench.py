"""Row groups of the warehouse's data files: a merge task's parts (a 20,000-row chunk, or an Arrow
batch's share of a bucket) written as a row group each, against buffered into one row group per
file (`warehouse.files.DataFiles`, up to ROW_GROUP_BYTES a task). Same rows, same process,
alternating; then DuckDB (another engine) scans each copy: a full aggregate and a key range.

    python bench/row_groups_bench.py [BUCKETS=8] [REPS=3]

Buckets of 250,000 rows (the default bucket size) in 20,000-row parts, the columns of scenario 2's
table plus the warehouse's metadata. Writes bench/results/row-groups.json.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from dblog.warehouse import files  # noqa: E402
from dblog.warehouse.types import BUCKET, META, MISSING  # noqa: E402

from common import ROOT, median  # noqa: E402

BUCKET_ROWS, PART = 250_000, 20_000
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(12, 2)),
                    ("created", pa.timestamp("us")), ("v", pa.int64()),
                    *[(m, pa.list_(pa.string()) if m == MISSING else
                       pa.timestamp("us", tz="UTC") if m == "_dblog_merged_at" else pa.string()) for m in META],
                    (BUCKET, pa.int32())])


def part(start: int, bucket: int) -> pa.Table:
    ids = np.arange(start, start + PART, dtype=np.int64)
    now = dt.datetime(2026, 11, 25, 7, 0)
    return pa.table([ids, pa.array([f"name-{i}" for i in ids]),
                     pa.array([Decimal(int(i)).scaleb(-2) for i in ids], pa.decimal128(12, 2)),
                     pa.repeat(pa.scalar(now, pa.timestamp("us")), PART), pa.repeat(pa.scalar(0), PART),
                     pa.repeat(pa.scalar("00000000000a-00000001"), PART), pa.repeat(pa.scalar("i"), PART),
                     pa.repeat(pa.scalar("dump"), PART), pa.repeat(pa.scalar("20261125T070000-abcdef"), PART),
                     pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), PART),
                     pa.nulls(PART, pa.list_(pa.string())), pa.repeat(pa.scalar(bucket, pa.int32()), PART)],
                    schema=SCHEMA)


def write(parts: list[tuple[int, pa.Table]], out: str, per_part: bool) -> tuple[float, list[str]]:
    files.ROW_GROUP_BYTES = 0 if per_part else BOUND   # 0: every part flushed as it comes
    started = time.perf_counter()
    data = files.DataFiles(out, SCHEMA, "bench")
    for bucket, p in parts:
        data.write(bucket, False, p)
    written = data.written()
    assert written is not None
    return time.perf_counter() - started, written.column("uri").to_pylist()


def scans(paths: list[str], top: int) -> dict:
    con = duckdb.connect()
    listed = "[" + ",".join(f"'{p}'" for p in paths) + "]"
    out = {}
    for name, sql in (("full_scan_s", f"SELECT count(*), sum(v), max(name), sum(amount) FROM read_parquet({listed})"),
                      ("key_range_s", f"SELECT count(*) FROM read_parquet({listed}) WHERE id BETWEEN {top // 2} "
                                      f"AND {top // 2 + 999}")):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            con.execute(sql).fetchall()
            times.append(time.perf_counter() - started)
        out[name] = round(median(times), 4)
    return out


BOUND = files.ROW_GROUP_BYTES


def main(buckets: int = 8, reps: int = 3) -> dict:
    parts = [(b, part(b * BUCKET_ROWS + i, b)) for b in range(buckets) for i in range(0, BUCKET_ROWS, PART)]
    runs: dict[str, list[dict]] = {"part_row_groups": [], "file_row_groups": []}
    tmp = tempfile.mkdtemp(prefix="row-groups-", dir=str(ROOT / ".local"))
    try:
        for rep in range(reps):
            for side in runs if rep % 2 == 0 else reversed(list(runs)):
                out = f"{tmp}/{side}-{rep}"
                seconds, paths = write(parts, out, side == "part_row_groups")
                meta = [pq.ParquetFile(p).metadata for p in paths]
                runs[side].append({"write_s": seconds, "bytes": sum(Path(p).stat().st_size for p in paths),
                                   "row_groups": sum(m.num_row_groups for m in meta),
                                   **scans(paths, buckets * BUCKET_ROWS)})
    finally:
        files.ROW_GROUP_BYTES = BOUND
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict = {"rows": buckets * BUCKET_ROWS, "buckets": buckets, "part_rows": PART, "reps": reps}
    for side, rs in runs.items():
        result[side] = {k: round(median([r[k] for r in rs]), 4) for k in rs[0]}
    a, b = result["part_row_groups"], result["file_row_groups"]
    result["ratios"] = {k: round(b[k] / a[k], 2) for k in ("write_s", "bytes", "full_scan_s", "key_range_s")}
    return result


if __name__ == "__main__":
    result = main(*(int(a) for a in sys.argv[1:3]))
    print(json.dumps(result, indent=2))
    (Path(__file__).parent / "results" / "row-groups.json").write_text(json.dumps(result, indent=2) + "\n")
