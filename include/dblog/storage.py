"""Where files live: a local path or a filesystem URI (`s3://bucket/prefix`, `gs://…`, `hdfs://…`),
as one pyarrow filesystem. The staged log uses it, and so will the warehouse's writers and readers.

S3-compatible stores other than AWS take their endpoint from `DBLOG_S3_ENDPOINT`
(`http://host:port`; path-style addressing then) and region from `DBLOG_S3_REGION` (else
AWS_REGION / AWS_DEFAULT_REGION); credentials come from the SDK's default chain (AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, a profile, an instance role).
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from .settings import ConfigError

# How every Parquet file dblog writes is encoded (staged log and warehouse). A column chunk's
# dictionary is given up once it passes 64 KiB instead of Arrow's 1 MiB: a key, an amount or a
# timestamp is near unique, and hashing each value into a dictionary that then falls back cost
# half of a first load's write time; low-cardinality columns still fit. Files come out a sixth
# to a third smaller (docs/performance.md).
PARQUET_WRITE = {"dictionary_pagesize_limit": 64 << 10}

ENDPOINT_ENV = "DBLOG_S3_ENDPOINT"
REGION_ENV = "DBLOG_S3_REGION"


def is_local(uri: str) -> bool:
    """A local path or a file:// URI (what the local filesystem serves)."""
    return "://" not in uri or uri.startswith("file://")


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, base path in it) for a root such as `/data/staging`, `file:///data` or `s3://b/p`."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return pafs.LocalFileSystem(), os.path.abspath(parts.path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"{uri}: an S3 root names its bucket, as s3://bucket/prefix")
        if parts.query or "@" in parts.netloc:  # a secret in a root would show in every path and log
            raise ConfigError(f"s3://{parts.hostname}{parts.path}…: give an S3 root as s3://bucket/prefix only; "
                              f"the endpoint and region go in {ENDPOINT_ENV} / {REGION_ENV}, credentials in "
                              "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")
        return s3_filesystem(), f"{parts.netloc}{parts.path}".rstrip("/")
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"{uri}: not a filesystem this installation can write ({exc}); use a path, "
                          "file://, s3://, gs:// or hdfs://") from None


def s3_filesystem() -> pafs.S3FileSystem:
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    # Credentials: the SDK's default chain (AWS_* variables, session tokens, profiles, roles).
    # A bucket is created only for the local deployment: elsewhere a mistyped name must fail.
    options: dict = {"allow_bucket_creation": os.environ.get("DBLOG_LOCAL", "").strip() == "1"}
    region = next((os.environ[v].strip() for v in (REGION_ENV, "AWS_REGION", "AWS_DEFAULT_REGION")
                   if os.environ.get(v, "").strip()), None)
    if region:
        options["region"] = region
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if not parts.netloc:
            raise ConfigError(f"{ENDPOINT_ENV}={endpoint!r}: give the S3 endpoint as http(s)://host:port")
        options.update(endpoint_override=parts.netloc, scheme=parts.scheme, force_virtual_addressing=False)
    return pafs.S3FileSystem(**options)


def atomic_puts(fs: pafs.FileSystem) -> bool:
    """Whether a file written in one stream appears whole or not at all (an object store's PUT),
    so no temporary name and rename (a copy there) are needed."""
    return isinstance(fs, pafs.S3FileSystem)
