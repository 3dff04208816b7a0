"""A merge task's data files: small parts become one row group per file, within a memory bound."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from dblog.warehouse import files
from dblog.warehouse.files import DataFiles
from dblog.warehouse.types import MISSING

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), (MISSING, pa.list_(pa.string()))])


def part(start: int, n: int, missing: bool = False) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": [f"n{i}" for i in range(start, start + n)],
                     MISSING: pa.array([["name"] if missing else None] * n, pa.list_(pa.string()))}, schema=SCHEMA)


def written(tmp_path, fill) -> list[dict]:
    out = DataFiles(str(tmp_path), SCHEMA, "m")
    fill(out)
    batch = out.written()
    return [] if batch is None else batch.to_pylist()


def test_interleaved_small_parts_of_two_buckets_become_one_row_group_per_file(tmp_path):
    def fill(out):
        for i in range(0, 1000, 10):
            out.write(1, False, part(i, 10, missing=i == 0))
            out.write(2, False, part(10_000 + i, 10))
        out.write(2, True, part(20_000, 3))
    rows = written(tmp_path, fill)
    assert sorted((r["bucket"], r["tombstone"], r["rows"], r["missing"]) for r in rows) == \
        [(1, False, 1000, 10), (2, False, 1000, 0), (2, True, 3, 0)]
    for r in rows:
        f = pq.ParquetFile(r["uri"])
        assert f.num_row_groups == 1
        ids = f.read().column("id").to_pylist()
        assert ids == sorted(ids) and len(ids) == r["rows"]   # in the order written


def test_a_file_rolls_over_at_rows_per_file_each_file_one_row_group(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "ROWS_PER_FILE", 100)
    rows = written(tmp_path, lambda out: [out.write(1, False, part(i, 30)) for i in range(0, 300, 30)])
    assert [r["rows"] for r in rows] == [120, 120, 60]
    assert [pq.ParquetFile(r["uri"]).num_row_groups for r in rows] == [1, 1, 1]
    assert sum((pq.read_table(r["uri"]).column("id").to_pylist() for r in rows), []) == list(range(300))


def test_buffers_past_the_byte_bound_are_written_early_largest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "ROW_GROUP_BYTES", part(0, 100).nbytes * 3)
    out = DataFiles(str(tmp_path), SCHEMA, "m")
    for i in range(0, 1000, 100):
        out.write(1, False, part(i, 100))
        out.write(2, False, part(10_000 + i, 10))
        assert out.buffered < files.ROW_GROUP_BYTES   # never holds more than the bound
    rows = out.written().to_pylist()
    groups = {r["bucket"]: pq.ParquetFile(r["uri"]).num_row_groups for r in rows}
    assert groups[1] > 1 and groups[2] < groups[1]
    assert pq.read_table([r["uri"] for r in rows if r["bucket"] == 1][0]).column("id").to_pylist() == list(range(1000))
