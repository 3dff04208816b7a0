"""The staged log on an S3-compatible object store (a real SeaweedFS on loopback, started by
`scripts/services.sh start seaweedfs`): configuration only, the same invariants as on disk."""
from __future__ import annotations

import subprocess

import pyarrow.fs as pafs
import pytest

from conftest import LOOPBACK, ROOT, TABLES, checkpoint, listening, settle
from dblog import storage
from dblog.verify import compare


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


def test_a_dump_during_writes_staged_on_s3_converges_and_leaves_nothing_on_local_disk(src, s3, tmp_path):
    src.staging = f"s3://t-{src.tag}/staged"
    src.workload(seed=5).create()
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=6)
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
    from dblog_dev.local import s3_port
    port = s3_port()
    # S3, volume, filer, master, and each one's gRPC port (weed's defaults would open more).
    for p in (port, port + 1, port + 2, port + 1000, port + 10000, port + 10001, port + 10002, port + 11000):
        addresses = listening(p)
        assert addresses and addresses <= LOOPBACK, (p, addresses)
