"""Airflow connections -> engine clients.

A source is an Airflow connection (conn type `mysql` or `postgres`; extras `schema`, `slot`,
`publication`, `exclude` as in `dblog.connections`), so users manage credentials in the UI, a secrets
backend or `AIRFLOW_CONN_*`. ZooKeeper is the `dblog_zookeeper` connection (host
`zk1:2181,zk2:2181` or host + port, schema = chroot, extra `session_timeout`). Every task resolves
them here, through Airflow, wherever they are defined; a process Airflow does not run (the Spark
job) gets them from the task (`operators/merge.py`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook

from dblog.connections import DEFAULT_CHROOT, ZOOKEEPER_CONN

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from dblog.coordination.store import StateStore
    from dblog.sources.base import Source

ZOOKEEPER_CONN_ID = ZOOKEEPER_CONN


class DBLogHook(BaseHook):
    """One source database plus the shared ZooKeeper, staged log and warehouse roots."""

    conn_name_attr = "source_conn_id"
    hook_name = "DBLog source"

    def __init__(self, source_conn_id: str, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID) -> None:
        super().__init__()
        self.source_conn_id = source_conn_id
        self.zookeeper_conn_id = zookeeper_conn_id

    def source_uri(self) -> str:
        """The source connection as the engine's URI (`dblog.connections.source_from_uri`)."""
        return self.get_connection(self.source_conn_id).get_uri()

    def get_source(self) -> Source:
        # The deployment (which scopes its watermarks) follows the ZooKeeper connection in use.
        from dblog.connections import deployment_id, source_from_uri
        return source_from_uri(self.source_conn_id, self.source_uri(), deployment_id(self.zookeeper_uri()))

    def zookeeper_uri(self) -> str:
        return zookeeper_uri(self.zookeeper_conn_id)

    @contextmanager
    def store(self) -> Iterator[StateStore]:
        from dblog.connections import zookeeper
        from dblog.coordination.store import StateStore
        zk = zookeeper(self.zookeeper_uri())
        with StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout) as store:
            yield store

    # The roots are settings of the workers (DBLOG_STAGING, DBLOG_WAREHOUSE), not connections.
    @staticmethod
    def staging_root() -> str:
        from dblog.connections import staging_root
        return staging_root()

    @staticmethod
    def warehouse_root() -> str:
        from dblog.connections import warehouse_root
        return warehouse_root()

    @staticmethod
    def staged():
        from dblog.stagedlog.staged_log import StagedLog
        return StagedLog(DBLogHook.staging_root())

    @staticmethod
    def warehouse():
        from dblog.warehouse.tables import Warehouse
        return Warehouse(DBLogHook.warehouse_root())


def zookeeper_uri(conn_id: str = ZOOKEEPER_CONN_ID) -> str:
    """The ZooKeeper connection `conn_id` as the engine's URI."""
    return zookeeper_uri_of(BaseHook.get_connection(conn_id))


def zookeeper_uri_of(conn: Connection) -> str:
    """`zookeeper://hosts/chroot[?session_timeout=S]` from a connection whose host may list
    several `host:port`, with the chroot in its schema (default `dblog`)."""
    if not conn.host:
        from dblog.settings import ConfigError
        raise ConfigError(f"connection {conn.conn_id} has no host: set it to the ZooKeeper host(s), "
                          "e.g. zk1:2181,zk2:2181, with the chroot (default dblog) as its schema")
    hosts = conn.host if not conn.port else f"{conn.host}:{conn.port}"
    timeout = conn.extra_dejson.get("session_timeout")
    return f"zookeeper://{hosts}/{(conn.schema or DEFAULT_CHROOT).strip('/')}" + (
        f"?session_timeout={timeout}" if timeout else "")
