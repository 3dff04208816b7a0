"""Where warehouse tables are registered and stored: the Iceberg catalog, identifiers, locations.

One catalog (pyiceberg) named `DBLOG_ICEBERG_CATALOG_NAME`: by default a SQL catalog in a SQLite
file, or the same SQL catalog on PostgreSQL (the tables of Iceberg Java's JDBC catalog, so Spark,
Trino and Flink read the same tables), or a REST catalog. A source table `shop.accounts` of the
source `dblog_mariadb` is the Iceberg table `("dblog_mariadb", "shop.accounts")`: the namespace is
the source id, the name the source's qualified name verbatim (always passed as a tuple: a dotted
string would be split). REST catalogs that accept only `[a-z0-9_-]` get a slug of it.

Files live under `{root}/{source}/{slug}-{hash}/`, never under the raw name (no `..`, `/` or `%`
from a hostile table name reaches a path). The table properties `dblog.source` / `dblog.table`
hold the real names.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from functools import lru_cache
from urllib.parse import urlsplit

from ..connections import local_dir
from ..settings import ConfigError, settings, string_map
from ..storage import ENDPOINT_ENV, REGION_ENV, is_local

BRANCH = "dblog-tombstones"   # the branch holding tombstones; readers of main never see them
FORMAT = "2"                  # the format of the `dblog.*` snapshot properties
PROPERTIES = {
    "format-version": "2",
    # Merges of a table are serialized by its lease: a concurrent commit is another writer, and
    # pyiceberg's retry would re-target both of our branches' updates to the first one.
    "commit.retry.num-retries": "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


def warehouse_uri(root: str) -> str:
    """The root as a URI pyiceberg and DuckDB both accept (a local path becomes file://)."""
    if "://" not in root:
        return "file://" + os.path.abspath(root)
    return root.rstrip("/")


def catalog_uri(root: str) -> str:
    configured = settings().warehouse.catalog.strip()
    if configured:
        return configured
    if is_local(root):
        path = os.path.join(urlsplit(warehouse_uri(root)).path, "catalog.db")
    elif local_dir() is not None:
        path = os.path.join(local_dir("iceberg") or "", "catalog.db")
    else:
        raise ConfigError(f"DBLOG_ICEBERG_CATALOG is not set and the warehouse root {root} is not a local path: "
                          "set it to the catalog every worker shares (postgresql+psycopg2://user@host/db, or a "
                          "REST catalog's https://… URL)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # The busy timeout: merges of different tables commit to the same file at once.
    return f"sqlite:///{path}?timeout=30"


def io_properties(root: str) -> dict[str, str]:
    """pyiceberg FileIO properties for an object-store root (credentials from the environment)."""
    if is_local(root):
        return {}
    props = {}
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    if endpoint:
        props["s3.endpoint"] = endpoint if "://" in endpoint else f"http://{endpoint}"
        props["s3.force-virtual-addressing"] = "false"
    region = next((os.environ[v].strip() for v in (REGION_ENV, "AWS_REGION", "AWS_DEFAULT_REGION")
                   if os.environ.get(v, "").strip()), None)
    if region:
        props["s3.region"] = region
    for prop, var in (("s3.access-key-id", "AWS_ACCESS_KEY_ID"), ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY"),
                      ("s3.session-token", "AWS_SESSION_TOKEN")):
        if os.environ.get(var):
            props[prop] = os.environ[var]
    return props


_LOADING = threading.Lock()


def load(root: str, uri: str | None = None):
    """The catalog for a warehouse root (one per process and configuration); `uri` overrides
    the configured catalog."""
    uri = uri or catalog_uri(root)
    # One thread at a time: two threads loading a new SQL catalog at once (a continuous merge and
    # a reader) would both create its tables, and the second fails.
    config = settings().warehouse
    with _LOADING:
        return _load(config.catalog_name, uri, warehouse_uri(root),
                     json.dumps({**io_properties(root), **(string_map(config.catalog_properties) or {})},
                                sort_keys=True))


@lru_cache(maxsize=8)
def _load(name: str, uri: str, warehouse: str, props_json: str):
    # A REST catalog's `warehouse` names what it serves (a table bucket, a catalog): the configured
    # properties' wins over the root.
    props = {"warehouse": warehouse, **json.loads(props_json)}
    if uri.startswith(("http://", "https://")):
        from pyiceberg.catalog.rest import RestCatalog
        return RestCatalog(name, uri=uri, **props)
    from sqlalchemy.exc import OperationalError

    from .metadata_cache import MetadataCachingSqlCatalog as SqlCatalog
    try:
        return SqlCatalog(name, uri=uri, **props)
    except OperationalError as exc:
        if "already exists" not in str(exc):
            raise
        # Another process created the catalog's tables between pyiceberg's check and its create.
        return SqlCatalog(name, uri=uri, **props)


def is_rest(catalog) -> bool:
    return type(catalog).__name__ == "RestCatalog"


def slug(name: str) -> str:
    """A name made of `[a-z0-9_]` that differs for different names."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")[:60] or "t"
    return cleaned if cleaned == name else f"{cleaned}_{_digest(name)[:8]}"


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def identifier(catalog, source: str, table: str) -> tuple[str, str]:
    return (source, slug(table) if is_rest(catalog) else table)


def changes_namespace(source: str) -> str:
    """The namespace of a source's change tables (`merge.change_table`), beside the source's own."""
    return f"{source}__changes"


def location(root: str, source: str, table: str) -> str:
    cleaned = re.sub(r"[^a-z0-9_]+", "_", table.lower()).strip("_")[:60] or "t"
    return f"{warehouse_uri(root)}/{source}/{cleaned}-{_digest(table)[:10]}"
