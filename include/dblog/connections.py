"""Configuration in the form Airflow uses: connections in `AIRFLOW_CONN_<ID>` variables, as a URI
or as Airflow's JSON form (`{"conn_type": ..., "host": ..., ...}`, which an ensemble's host list
needs: Airflow parses one host:port per URI).

A source is a connection id. Its URI names the database family and what to capture:

    mysql://user:password@host:port/database
    postgres://user:password@host:port/database?schema=public&slot=dblog_x&publication=dblog

Both take `exclude=table.column,...` (columns never staged) and `key_columns=table.column,...`
(the columns that identify a row of a table without a primary key or unique index).

ZooKeeper is the `dblog_zookeeper` connection (`zookeeper://host:port[,host:port]/chroot`), the
staged log root is `DBLOG_STAGING` (a path or any pyarrow filesystem URI), the warehouse root
`DBLOG_WAREHOUSE` (a POSIX path). A missing one is an error that says what to set: guessing
(a database on 127.0.0.1, a directory under the working directory) would reach the wrong service
or lose the staged log. Only with DBLOG_LOCAL=1 (the Makefile, the tests, `make airflow`) do they
fall back to the local deployment of `make up` (`dblog_dev.local`, imported only then).

Every deployment writes its watermarks into the one watermark table a database server has
(`dblog.watermarks`); `deployment_id` names the deployment, so that its capture stages only its
own (`DBLOG_DEPLOYMENT`, else derived from the ZooKeeper chroot).
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from .settings import ConfigError, settings

if TYPE_CHECKING:  # the engine's heavy modules load only when a source is built (DAG files import this)
    from .sources.base import Source

ZOOKEEPER_CONN = "dblog_zookeeper"
DEFAULT_CHROOT = "/dblog"
DEPLOYMENT_ENV = "DBLOG_DEPLOYMENT"
# A deployment id prefixes a watermark row's id (VARCHAR(64)) before the slot (at most 40 characters).
MAX_DEPLOYMENT_ID = 22
_DEPLOYMENT = re.compile(rf"^[a-z0-9_]{{1,{MAX_DEPLOYMENT_ID}}}$")
_ID = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

LOCAL_ENV = "DBLOG_LOCAL"


def local() -> bool:
    """DBLOG_LOCAL=1: settings left unset fall back to the local `make up` deployment."""
    return os.environ.get(LOCAL_ENV, "").strip() == "1"


def local_dir(*parts: str) -> str | None:
    """A directory under the local deployment's `.local/` when DBLOG_LOCAL=1, else None."""
    if not local():
        return None
    from dblog_dev.local import local_dir as base
    return os.path.join(base(), *parts)


def environment_connection(conn_id: str) -> str | None:
    """The connection `conn_id` from its `AIRFLOW_CONN_` variable, as a URI (None when unset)."""
    value = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}", "").strip()
    return _json_to_uri(conn_id, value) if value.startswith("{") else (value or None)


def _json_to_uri(conn_id: str, value: str) -> str:
    import json
    from urllib.parse import quote, urlencode
    try:
        c = json.loads(value)
    except ValueError as e:
        raise ConfigError(f"AIRFLOW_CONN_{conn_id.upper()} is neither a URI nor valid JSON ({e}); use Airflow's "
                          'JSON form, e.g. {"conn_type": "zookeeper", "host": "zk1:2181,zk2:2181", '
                          '"schema": "dblog"}') from None
    if not isinstance(c, dict) or not c.get("conn_type") or not c.get("host"):
        raise ConfigError(f"AIRFLOW_CONN_{conn_id.upper()}: Airflow's JSON form needs at least conn_type and host")
    auth = quote(str(c.get("login") or ""), safe="") + (
        ":" + quote(str(c["password"]), safe="") if c.get("password") is not None else "")
    netloc = (f"{auth}@" if auth else "") + str(c["host"]) + (f":{c['port']}" if c.get("port") else "")
    extra = c.get("extra")
    try:
        extra = (json.loads(extra) if extra.strip() else None) if isinstance(extra, str) else extra
    except ValueError:
        extra = []
    extra = {} if extra is None else extra   # (none, blank, or JSON null: no extra)
    if not isinstance(extra, dict):
        raise ConfigError(f"AIRFLOW_CONN_{conn_id.upper()}: its extra must be a JSON object")
    # As a URI's query holds them: JSON's spelling for what is not a string (true, not True), no nulls.
    query = urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in extra.items() if v is not None})
    query = f"?{query}" if query else ""
    return f"{c['conn_type']}://{netloc}/{str(c.get('schema') or '').lstrip('/')}{query}"


def connection_uri(conn_id: str) -> str:
    uri = environment_connection(conn_id)
    if uri:
        return uri
    fallback = f"{LOCAL_ENV}=1 uses the local `make up` services instead"
    if local():
        from dblog_dev.local import connections  # the development package: only where asked for
        uri = connections().get(conn_id)
        if uri:
            return uri
        fallback = f"{LOCAL_ENV}=1 provides only {', '.join(connections())}"
    example = ("zookeeper://host:2181/dblog" if conn_id == ZOOKEEPER_CONN else
               "mysql://user:password@host:3306/db or postgres://user:password@host:5432/db")
    raise ConfigError(f"no connection {conn_id!r}: set AIRFLOW_CONN_{conn_id.upper()} to a URI such as {example} "
                      f"(Airflow tasks also find a connection {conn_id} defined in the UI or a secrets backend); "
                      f"{fallback}")


def source_ids() -> list[str]:
    return [s.strip() for s in os.environ.get("DBLOG_SOURCES", "dblog_mariadb,dblog_postgres").split(",") if s.strip()]


def staging_root() -> str:
    return _root("DBLOG_STAGING", "staged log", "a path every worker shares, or s3://bucket/path", "staging")


def warehouse_root() -> str:
    return _root("DBLOG_WAREHOUSE", "warehouse", "a POSIX path every Spark worker shares", "warehouse")


def _root(variable: str, what: str, example: str, local_subdir: str) -> str:
    if os.environ.get(variable):
        return os.environ[variable]
    if local():
        from dblog_dev.local import local_dir
        return os.path.join(local_dir(), local_subdir)
    # A default under the working directory would differ from process to process (Airflow runs
    # tasks in temporary directories): a capture would stage where no merge reads.
    raise ConfigError(f"{variable} is not set: set it to the {what} root ({example}); "
                      f"{LOCAL_ENV}=1 uses .local/{local_subdir} of the local `make up` deployment instead")


@dataclass(frozen=True)
class ZooKeeperConfig:
    hosts: str
    chroot: str
    session_timeout: float  # how long a dead leader keeps its lease before a standby takes over

    @property
    def takeover_wait(self) -> float:
        """How long a resumed dump waits for a dead worker's table lease to go with its session."""
        return settings().zookeeper.lease_wait_factor * self.session_timeout


def zookeeper(uri: str | None = None) -> ZooKeeperConfig:
    """`zookeeper://host:port[,host:port]/chroot[?session_timeout=S]`; default: the dblog_zookeeper connection."""
    parts = urlsplit(uri or connection_uri(ZOOKEEPER_CONN))
    hosts = parts.netloc.rsplit("@", 1)[-1]
    if not hosts:
        raise ConfigError(f"connection {ZOOKEEPER_CONN}: no host; use zookeeper://host:2181/dblog")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    timeout = query.get("session_timeout") or settings().zookeeper.session_timeout_seconds
    return ZooKeeperConfig(hosts, parts.path.rstrip("/") or DEFAULT_CHROOT, float(timeout))


def deployment_id(zookeeper_uri: str | None = None) -> str:
    """This deployment's name in the watermark table that all deployments on a server share.

    `DBLOG_DEPLOYMENT` if set, else the ZooKeeper chroot (`zookeeper_uri`, else the dblog_zookeeper
    connection from the environment, else the default): processes that share a chroot share
    checkpoints and dumps, so they are one deployment. Everything that writes or captures one
    source's watermarks must agree on it, or a capture ignores that writer's watermarks. Set
    DBLOG_DEPLOYMENT when two deployments on one server use the same chroot on different ZooKeepers.
    """
    explicit = os.environ.get(DEPLOYMENT_ENV, "").strip()
    if explicit:
        if not _DEPLOYMENT.match(explicit):
            raise ConfigError(f"{DEPLOYMENT_ENV}={explicit!r}: use 1 to {MAX_DEPLOYMENT_ID} lower-case letters, "
                              "digits and _ (it tags this deployment's rows in the shared watermark table)")
        return explicit
    uri = zookeeper_uri or environment_connection(ZOOKEEPER_CONN)
    chroot = zookeeper(uri).chroot if uri else DEFAULT_CHROOT
    slug = re.sub(r"[^a-z0-9_]", "_", chroot.strip("/").lower()) or "root"
    if len(slug) > MAX_DEPLOYMENT_ID:  # keep it readable, and distinct by a hash of the whole chroot
        slug = f"{slug[:MAX_DEPLOYMENT_ID - 9]}_{hashlib.sha1(chroot.encode()).hexdigest()[:8]}"
    return slug


def source_from_uri(conn_id: str, uri: str, deployment: str | None = None) -> Source:
    """The source of connection `conn_id`; its watermarks carry `deployment` (default: `deployment_id()`)."""
    if not _ID.match(conn_id):
        raise ConfigError(f"source id {conn_id!r} must be lower-case letters, digits and _ (it names paths)")
    parts = urlsplit(uri)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigError(f"connection {conn_id}: the URI names no database (…/DATABASE)")
    if not parts.hostname:  # never a guess: 127.0.0.1 could be some other database
        raise ConfigError(f"connection {conn_id}: the URI names no host; give mysql://user:password@HOST:port/db "
                          "or postgres://user:password@HOST:port/db")
    common: dict[str, Any] = dict(host=parts.hostname, user=unquote(parts.username or ""),
                                  password=unquote(parts.password or ""), database=database)
    if parts.scheme in ("mysql", "mariadb"):
        from .sources.mysql import MySQLSource
        src: Source = MySQLSource(conn_id, port=parts.port or 3306, **common)
    elif parts.scheme in ("postgres", "postgresql"):
        from .sources.postgres import PostgresSource
        src = PostgresSource(conn_id, port=parts.port or 5432, schema=query.get("schema", "public"),
                             slot=query.get("slot"), publication=query.get("publication", "dblog"), **common)
    else:
        raise ConfigError(f"connection {conn_id}: unsupported scheme {parts.scheme!r}; use mysql:// or postgres://")
    src.exclude = excluded_columns(conn_id, query.get("exclude", ""), src.namespace)
    src.key_columns = {t: tuple(cols) for t, cols in
                       table_columns(conn_id, "key_columns", query.get("key_columns", ""), src.namespace).items()}
    src.deployment = deployment or deployment_id()
    return src


def excluded_columns(conn_id: str, spec: str, namespace: str) -> dict[str, frozenset[str]]:
    """`exclude=accounts.note,accounts.ssn` (or schema.table.column): columns never staged."""
    return {t: frozenset(c) for t, c in table_columns(conn_id, "exclude", spec, namespace).items()}


def table_columns(conn_id: str, name: str, spec: str, namespace: str) -> dict[str, list[str]]:
    """A list of table.column (or schema.table.column) items as each table's columns, in the
    order given: `exclude`, and `key_columns=events.tenant_id,events.seq` (a table's key for a
    table without a primary key, as Debezium's message.key.columns)."""
    out: dict[str, list[str]] = {}
    for item in filter(None, (i.strip() for i in spec.split(","))):
        parts = item.split(".")
        if len(parts) not in (2, 3) or not all(parts):
            raise ConfigError(f"connection {conn_id}: {name} item {item!r} is not table.column or "
                              "schema.table.column")
        table = ".".join(parts[:-1]) if len(parts) == 3 else f"{namespace}.{parts[0]}"
        if parts[-1] not in out.setdefault(table, []):
            out[table].append(parts[-1])
    return out


def source(conn_id: str) -> Source:
    return source_from_uri(conn_id, connection_uri(conn_id))
