"""The benchmark's baselines and its row-diff, on real sources: `make bench` compares against
these, so each must copy an idle table exactly, and the diff must see every later change."""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import baselines  # noqa: E402
import bigtable  # noqa: E402
from common import run_sql  # noqa: E402

ROWS = 3000


@pytest.fixture(params=["mysql", "postgres"])
def table(request, services):
    kind, ns = request.param, f"tb_{uuid.uuid4().hex[:8]}"
    bigtable.create(kind, ns, ROWS)
    yield kind, ns
    run_sql(kind, f"DROP DATABASE {ns}" if kind == "mysql" else f"DROP SCHEMA {ns} CASCADE")


def test_each_baseline_copies_an_idle_table_row_for_row(table, spark, tmp_path):
    kind, ns = table
    source = bigtable.source_versions(kind, ns)
    copies = {"plain": (baselines.plain(kind, ns, str(tmp_path / "plain")), str(tmp_path / "plain")),
              "spark_jdbc": (baselines.spark_jdbc(spark, kind, ns, str(tmp_path / "jdbc"), partitions=3),
                             str(tmp_path / "jdbc")),
              "dlt": baselines.dlt_parquet(kind, ns, str(tmp_path / "dlt"))}
    for tool, (rows, path) in copies.items():
        assert rows == ROWS, tool
        assert bigtable.rows_differing(source, bigtable.copy_versions(path))["total"] == 0, tool


def test_the_diff_counts_every_row_changed_after_the_copy(table, tmp_path):
    kind, ns = table
    baselines.plain(kind, ns, str(tmp_path / "plain"))
    run_sql(kind, f"UPDATE {ns}.t SET v = v + 1 WHERE id <= 5", f"DELETE FROM {ns}.t WHERE id IN (10, 11)",
            f"INSERT INTO {ns}.t (id, name, amount, created, v) SELECT id + {ROWS}, name, amount, created, 0 "
            f"FROM {ns}.t WHERE id <= 3")
    differ = bigtable.rows_differing(bigtable.source_versions(kind, ns), bigtable.copy_versions(str(tmp_path / "plain")))
    assert differ == {"missing": 3, "extra": 2, "duplicated": 0, "stale": 5, "total": 10}
