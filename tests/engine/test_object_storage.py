"""The staged log on an S3-compatible object store (a real SeaweedFS on loopback, started by
`scripts/services.sh start seaweedfs`): configuration only, the same invariants as on disk."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from dblog import storage
from dblog.operations.verify import compare
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse

from conftest import LOOPBACK, ROOT, TABLES, assert_warehouse_equals_source, checkpoint, listening, settle, wait_for


@pytest.fixture(scope="session")
def s3_server(services):
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "start", "seaweedfs"], check=True, capture_output=True)
    from dblog_dev.local import s3_env
    return s3_env()


@pytest.fixture
def s3(s3_server, monkeypatch):
    for name, value in s3_server.items():  # this process and the dblog processes it starts
        monkeypatch.setenv(name, value)
    return s3_server


def test_a_dump_during_writes_staged_on_s3_converges_and_leaves_nothing_on_local_disk(postgres, s3, tmp_path):
    src = postgres   # the storage is the subject: one source (the whole pipeline on S3 runs on the other)
    src.staging = f"s3://t-{src.tag}/staged"
    src.workload(seed=5).create()
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=6, rate=200)   # the storage is the subject, not the write load
    src.dblog("dump", "--source", src.source_id, "--all", "--chunk-size", "97", check=True)
    writer.terminate(); writer.wait()
    settle(src)
    for t in TABLES:
        diff = compare(src.source(), src.staged(), src.table(t), checkpoint(src))
        assert diff.equal and diff.source_rows > 0, (t, diff.keys()[:5])
    fs, base = storage.filesystem(src.staging)
    assert isinstance(fs, pafs.S3FileSystem)
    staged = [f.path for f in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if f.path.endswith(".parquet")]
    assert any("/log/" in p for p in staged) and any("/chunks/" in p for p in staged)
    assert not any(".tmp-" in p for p in staged), "an object store gets whole objects, no temporary names"
    assert not (tmp_path / "staging").exists()


def test_the_s3_server_listens_on_loopback_only_on_the_ports_it_was_given(s3):
    from dblog_dev.local import S3_ICEBERG_OFFSET, s3_port
    port = s3_port()
    # S3, volume, filer, the Iceberg REST catalog, master, and each one's gRPC port (weed's defaults
    # would open more).
    for p in (port, port + 1, port + 2, port + S3_ICEBERG_OFFSET, port + 1000, port + 10000, port + 10001, port + 10002, port + 11000):
        addresses = listening(p)
        assert addresses and addresses <= LOOPBACK, (p, addresses)


def _cli(src, *args):
    return src.dblog(*args, timeout=600)


def _on_s3(src, monkeypatch, tag: str, master: str) -> Warehouse:
    """Staged log in a bucket, the warehouse in a table bucket of SeaweedFS's Iceberg REST catalog
    (SigV4-signed, as AWS S3 Tables' is): no local file at all."""
    from dblog_dev.local import s3_rest_catalog
    src.staging = f"s3://s-{tag}/staged"
    for name, value in {**s3_rest_catalog(f"w-{tag}"), "DBLOG_SPARK_MASTER": master}.items():
        monkeypatch.setenv(name, value)
    return Warehouse(os.environ["DBLOG_WAREHOUSE"])


# The whole pipeline on S3 (staged log, warehouse, both read by pyiceberg and DuckDB) runs on the
# Spark cluster with the PostgreSQL catalog: tests/spark/test_cluster.py.


def test_kill_9_of_a_merge_on_a_rest_catalog_leaves_the_table_readable_and_a_re_run_converges(postgres, s3,
                                                                                                monkeypatch):
    src = postgres
    warehouse = _on_s3(src, monkeypatch, src.tag, "local[1]")
    assert type(warehouse.catalog).__name__ == "RestCatalog"
    w = src.workload(seed=9, rows=2000)
    w.create()
    src.start_capture()
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "500", check=True)
    settle(src)
    first = _cli(src, "merge", "--source", src.source_id, "--table", "accounts")
    assert first.returncode == 0 and "[first load" in first.stdout, first.stdout + first.stderr[-3000:]
    table = src.table("accounts")
    before = warehouse.state(src.source_id, table)
    w.run(seconds=2)
    settle(src)
    # (A REST catalog chooses the table's location.)
    fs, base = storage.filesystem(warehouse.load(src.source_id, table).location() + "/data")
    files = lambda: {f.path for f in fs.get_file_info(pafs.FileSelector(base, recursive=True))  # noqa: E731
                     if f.path.endswith(".parquet")}
    known = files()
    proc = subprocess.Popen([sys.executable, "-m", "dblog.cli", "merge", "--source", src.source_id, "--table",
                             "accounts"], env=src.env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: files() - known, 180, interval=0.05, what="the merge to write its first data file")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert warehouse.state(src.source_id, table) == before, "a killed merge changed the table"
    assert duckdb_read(warehouse, src.source_id, table).num_rows == before.rows   # still readable
    rerun = _cli(src, "merge", "--source", src.source_id, "--table", "accounts")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_warehouse_equals_source(src, warehouse, ["accounts"])
    swept = _cli(src, "maintain", "--source", src.source_id, "--keep-seconds", "0", "--orphan-grace", "0")
    assert swept.returncode == 0, swept.stderr
    referenced = {t.file.file_path.removeprefix("s3://") for t in warehouse.load(src.source_id, table).scan().plan_files()}
    assert files() == referenced, "the sweep left files on S3 that no snapshot references"


def test_retention_and_compaction_of_a_staged_log_on_s3_keep_what_readers_see(s3):
    """Objects have no rename and no directories: compaction uploads the union as one object, its
    inputs stay listed-but-hidden until the grace, retention deletes objects (ZooKeeper and the
    warehouse stood in for)."""
    import datetime as dt
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dblog.coordination.checkpoint import checkpoint_path
    from dblog.model.events import ChangeEvent
    from dblog.model.positions import Position
    from dblog.model.schema import Column, TableSchema
    from dblog.model.staged_format import Op
    from dblog.operations.staged_maintenance import maintain_staged
    from dblog.stagedlog.staged_log import StagedLog

    from staged_fakes import MemoryStore, MergedWarehouse

    columns = (Column("id", "int", pa.int64()), Column("v", "text", pa.string()))
    narrow, wide = (TableSchema("app.t", cols, ("id",)) for cols in (columns, columns + (Column("x", "int", pa.int32()),)))
    staged, source = StagedLog(f"s3://r-{uuid.uuid4().hex[:8]}/staged"), "src"
    when = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    for n in range(1, 9):
        schema = narrow if n < 5 else wide
        staged.write_segment(source, schema, [ChangeEvent(
            source, "app.t", Op.INSERT, Position(1, n).encode(), (n,), {"id": n, "v": f"v{n}", **({"x": n} if n > 4 else {})},
            commit_ts=when)])
    store = MemoryStore({checkpoint_path(source): {"position": Position(1, 99).encode()}})
    options = {"window_seconds": 0, "compact_min_segments": 2, "compact_bytes": 1 << 20}
    listed = staged.segments(source, "app.t")

    report = maintain_staged(store, staged, MergedWarehouse(Position(1, 3).encode()), source,
                             replaced_grace_seconds=3600, **options)

    assert (report.segments_removed, report.segments_compacted, report.compacted_into) == (2, 6, 1)
    assert staged.read_log(source, "app.t")["id"].to_pylist() == list(range(3, 9))
    assert staged.read_log(source, "app.t")["x"].to_pylist() == [None, None, 5, 6, 7, 8]
    [compacted] = staged.segments(source, "app.t")
    assert compacted not in listed
    assert sum(pq.read_table(p, filesystem=staged.fs).num_rows for p in listed[2:]) == 6, "a reader that listed first"
    report = maintain_staged(store, staged, MergedWarehouse(Position(1, 3).encode()), source,
                             replaced_grace_seconds=0, **options)
    assert report.replaced_removed == 6 and report.files == 1
    assert staged.read_log(source, "app.t")["id"].to_pylist() == list(range(3, 9))
