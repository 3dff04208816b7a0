"""Reading warehouse tables without dblog's merge, in DuckDB (Spark's reader: `dblog.spark.data_sources`).

DuckDB's extensions come from the duckdb-extension-* packages (same version as duckdb), loaded
by path: `INSTALL` would download them, and a deployment may have no network. DuckDB cannot use
the SQL catalog, so it reads the metadata file pyiceberg says is current, resolved per query
(every commit writes a new one).
"""
from __future__ import annotations

import importlib
import os
from urllib.parse import urlsplit

import pyarrow as pa

from ..settings import ConfigError
from . import catalog as C


def _extension(name: str) -> str:
    import duckdb
    package = importlib.import_module(f"duckdb_extension_{name}")
    path = os.path.join(os.path.dirname(package.__file__ or ""), "extensions", f"v{duckdb.__version__}",
                        f"{name}.duckdb_extension")
    if not os.path.exists(path):
        raise ConfigError(f"{path} is missing: install duckdb-extension-{name}=={duckdb.__version__}")
    return path


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_secret(root: str) -> str:
    """`CREATE SECRET` for an object-store root, from the settings the rest of dblog uses (the
    endpoint, region and AWS_* credentials of the environment). Not scoped to the root: a REST
    catalog may place tables elsewhere."""
    props = C.io_properties(root)
    parts = ["TYPE s3"]
    endpoint = props.get("s3.endpoint")
    if endpoint:
        url = urlsplit(endpoint)
        parts += [f"ENDPOINT {_quote(url.netloc)}", "URL_STYLE 'path'", f"USE_SSL {str(url.scheme == 'https').lower()}"]
    for option, prop in (("REGION", "s3.region"), ("KEY_ID", "s3.access-key-id"),
                         ("SECRET", "s3.secret-access-key"), ("SESSION_TOKEN", "s3.session-token")):
        if props.get(prop):
            parts.append(f"{option} {_quote(props[prop])}")
    return f"CREATE OR REPLACE TEMPORARY SECRET dblog_s3 ({', '.join(parts)})"


def duckdb_connect(root: str):
    """An in-memory DuckDB connection that reads the warehouse's Iceberg tables (`iceberg_scan`)."""
    import duckdb
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    remote = not C.is_local(root)
    for name in ("avro", "iceberg", *(("httpfs",) if remote else ())):
        con.execute(f"LOAD {_quote(_extension(name))}")
    if remote:
        con.execute(duckdb_secret(root))
    con.execute("SET TimeZone = 'UTC'")   # timestamptz values come out labelled UTC, as elsewhere in dblog
    return con


def duckdb_read(warehouse, source: str, table: str) -> pa.Table | None:
    """The rows of the table's current snapshot, read by DuckDB (None before the first merge): a
    soft-delete table's deleted rows too, flagged `_dblog_deleted`."""
    t = warehouse.load(source, table)
    return None if t is None else duckdb_scan(warehouse.root, t)


def duckdb_scan(root: str, t) -> pa.Table:
    """Every row of a loaded Iceberg table's current snapshot (a change table's too), read by DuckDB."""
    con = duckdb_connect(root)
    try:
        return con.execute("SELECT * FROM iceberg_scan(?)", [t.metadata_location]).to_arrow_table()
    finally:
        con.close()
