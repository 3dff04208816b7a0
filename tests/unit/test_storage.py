"""Roots as filesystems: a path, file://, s3:// with a local endpoint; bad roots named with the fix."""
from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from dblog import storage
from dblog.settings import ConfigError


def test_a_path_and_a_file_uri_are_the_local_filesystem(tmp_path):
    for root in (str(tmp_path), f"file://{tmp_path}"):
        fs, base = storage.filesystem(root)
        assert isinstance(fs, pafs.LocalFileSystem) and base == str(tmp_path)
        assert not storage.atomic_puts(fs)
    assert storage.filesystem("relative/dir")[1] == os.path.abspath("relative/dir")


def test_an_s3_root_uses_the_configured_endpoint_path_style_and_puts_whole_objects(monkeypatch):
    monkeypatch.setenv("DBLOG_S3_ENDPOINT", "http://127.0.0.1:8334")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    fs, base = storage.filesystem("s3://bucket/some/prefix/")
    assert isinstance(fs, pafs.S3FileSystem) and base == "bucket/some/prefix"
    assert fs.region == "us-east-1" and storage.atomic_puts(fs)


def test_bad_roots_and_endpoints_are_refused_naming_the_form_to_use(monkeypatch):
    with pytest.raises(ConfigError, match=r"s3://bucket/prefix"):
        storage.filesystem("s3:///no-bucket")
    with pytest.raises(ConfigError, match=r"use a path, file://, s3://"):
        storage.filesystem("weird://x/y")
    monkeypatch.setenv("DBLOG_S3_ENDPOINT", "http://")
    with pytest.raises(ConfigError, match=r"DBLOG_S3_ENDPOINT='http://'.*http\(s\)://host:port"):
        storage.filesystem("s3://bucket/p")
