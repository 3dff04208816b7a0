"""Airflow connections -> engine clients.

A source is an Airflow connection (conn type `mysql` or `postgres`; extras `schema`, `slot`,
`publication`, `exclude` as in `dblog.config`), so users manage credentials in the UI, a secrets
backend or `AIRFLOW_CONN_*`. ZooKeeper is the `dblog_zookeeper` connection
(host `zk1:2181,zk2:2181` or host + port, schema = chroot, extra `session_timeout`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from dblog.sources.base import Source
    from dblog.state import StateStore

ZOOKEEPER_CONN_ID = "dblog_zookeeper"


class DBLogHook(BaseHook):
    """One source database plus the shared ZooKeeper, staged log and warehouse roots."""

    conn_name_attr = "source_conn_id"
    hook_name = "DBLog source"

    def __init__(self, source_conn_id: str, zookeeper_conn_id: str = ZOOKEEPER_CONN_ID) -> None:
        super().__init__()
        self.source_conn_id = source_conn_id
        self.zookeeper_conn_id = zookeeper_conn_id

    def get_source(self) -> "Source":
        # The deployment (which scopes its watermarks) follows the ZooKeeper connection in use.
        from dblog.config import deployment_id, source_from_uri
        return source_from_uri(self.source_conn_id, self.get_connection(self.source_conn_id).get_uri(),
                               deployment_id(self.zookeeper_uri()))

    def zookeeper_uri(self) -> str:
        return zookeeper_uri(self.zookeeper_conn_id)

    @contextmanager
    def store(self) -> Iterator["StateStore"]:
        from dblog.config import zookeeper
        from dblog.state import StateStore
        zk = zookeeper(self.zookeeper_uri())
        with StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout) as store:
            yield store

    @staticmethod
    def staged():
        from dblog.config import staging_root
        from dblog.staging import StagedLog
        return StagedLog(staging_root())

    @staticmethod
    def warehouse():
        from dblog.config import warehouse_root
        from dblog.warehouse.layout import Warehouse
        return Warehouse(warehouse_root())


def zookeeper_uri(conn_id: str = ZOOKEEPER_CONN_ID) -> str:
    """The ZooKeeper connection as the engine's URI (host may list several `host:port`)."""
    conn = BaseHook.get_connection(conn_id)
    hosts = conn.host if not conn.port else f"{conn.host}:{conn.port}"
    timeout = conn.extra_dejson.get("session_timeout")
    return f"zookeeper://{hosts}/{(conn.schema or 'dblog').strip('/')}" + (
        f"?session_timeout={timeout}" if timeout else "")
