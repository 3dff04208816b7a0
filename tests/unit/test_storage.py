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
    monkeypatch.setenv("DBLOG_S3_REGION", "eu-west-3")
    monkeypatch.delenv("DBLOG_LOCAL")  # the tests run as the local deployment
    fs, base = storage.filesystem("s3://bucket/some/prefix/")
    assert isinstance(fs, pafs.S3FileSystem) and base == "bucket/some/prefix"
    options = fs.__reduce__()[1][0]  # how pyarrow would rebuild it: the options it holds
    assert options["endpoint_override"] == "127.0.0.1:8334" and options["scheme"] == "http"
    assert options["force_virtual_addressing"] is False and fs.region == "eu-west-3"
    assert options["allow_bucket_creation"] is False, "outside the local deployment a bucket is never created"
    assert storage.atomic_puts(fs)


def test_bad_roots_and_endpoints_are_refused_naming_the_form_to_use(monkeypatch):
    with pytest.raises(ConfigError, match=r"s3://bucket/prefix"):
        storage.filesystem("s3:///no-bucket")
    for secret_bearing in ("s3://KEY:s3cr3t@bucket/p", "s3://bucket/p?endpoint_override=x&secret_key=s3cr3t"):
        with pytest.raises(ConfigError, match=r"s3://bucket/prefix only.*DBLOG_S3_ENDPOINT") as refused:
            storage.filesystem(secret_bearing)
        assert "s3cr3t" not in str(refused.value)
    with pytest.raises(ConfigError, match=r"use a path, file://, s3://"):
        storage.filesystem("weird://x/y")
    monkeypatch.setenv("DBLOG_S3_ENDPOINT", "http://")
    with pytest.raises(ConfigError, match=r"DBLOG_S3_ENDPOINT='http://'.*http\(s\)://host:port"):
        storage.filesystem("s3://bucket/p")
