"""ZooKeeper state: capture checkpoints, leadership, dump progress and dump controls.

Layout under the chroot (default `/dblog`), per source:

    /{source}/capture/lock                  kazoo Lock: the active capture (others stand by)
    /{source}/capture/checkpoint            JSON: where to resume, last staged position (see dblog.coordination.checkpoint)
    /{source}/capture/heartbeat             JSON: the leader's liveness and when it last was at the log's head
    /{source}/capture/lag_history           JSON: [[unix time, lag s], ...] over the last hour
    /{source}/capture/tables                JSON: since when the change index is kept (see dblog.coordination.changed_tables)
    /{source}/capture/tables/{shard}        JSON: table -> newest staged position, for the tables of that shard
    /{source}/chunks/{table}-{seq}          a dump staged a chunk of the table that no merge has taken yet
    /{source}/dumps/{id}                    JSON: the dump's scope
    /{source}/dumps/{id}/control            JSON: state (running|paused|cancelled), chunk_size, delay_s
    /{source}/dumps/{id}/tables/{table}     JSON: progress (last completed key, chunks, rows, done)
    /{source}/dumps/{id}/tables/{table}/lock  kazoo Lock: the worker dumping that table
    /{source}/dumps/{id}/merged/{table}     JSON: what merging the dump's chunks did (chunks, rows, dropped)
    /{source}/continuous_merge              JSON: a continuous merge's heartbeat (see dblog.coordination.merge_beat)
    /{source}/repairs/req-{seq}             JSON: rows to re-read (a table's keys, or all of it) and why
    /{source}/capture/repairer              JSON: the leader's repairer started (its mtime: when, on ZooKeeper's clock)
    /{source}/watermarks/built              JSON: the index below holds every staged watermark (see dblog.coordination.watermark_index)
    /{source}/watermarks/index/{shard}/{id}  JSON: the position of the staged watermark event `id`
    /{source}/unlogged/{table}              JSON: where the log holds writes without their rows (see dblog.coordination.unlogged)
    /{source}/loaded/{table}                the warehouse stores rows of the table: its dumps are no first load (see dblog.coordination.loaded_tables)
    /{source}/staged/lock                   kazoo Lock: the `dblog maintain` tending the staged log

Writes that a lease holder makes (checkpoints, progress, the watermark index) are fenced: they
commit in one ZooKeeper transaction with a check that the holder's ephemeral lock node still
exists, so a process that lost its session (and so its lock) can never overwrite its successor's
state.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.recipe.lock import Lock

from ..connections import DEFAULT_CHROOT
from ..errors import DBLogError, TransientError
from ..settings import settings

T = TypeVar("T")


class Fenced(DBLogError, RuntimeError):
    """This process no longer holds the lease it is writing under."""


class LeaseTimeout(TransientError, TimeoutError):
    """A lease was not ours within the time asked for (another holder kept it)."""


class ZooKeeperUnavailable(TransientError, ConnectionError):
    """ZooKeeper could not be reached, or not for longer than the store rides out."""


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, default=str).encode()


def _load(raw: bytes) -> Any:
    return json.loads(raw.decode()) if raw else None


@dataclass
class Lease:
    """A held kazoo Lock: the fencing token for writes made under it."""
    lock: Lock
    store: StateStore

    @property
    def node_path(self) -> str:
        if not self.lock.is_acquired or self.lock.node is None:
            raise Fenced(f"lease {self.lock.path} is not held")
        return f"{self.lock.path}/{self.lock.node}"

    def check(self) -> None:
        """Raise Fenced unless the lock node is still ours. While the connection is suspended
        (ZooKeeper restarting) the session, and so the lease, may survive: wait for it."""
        zk = self.store.zk
        try:
            alive = self.store.call(zk.exists, self.node_path)
        except (ConnectionLoss, ConnectionError):
            alive = False
        if not alive:
            raise Fenced(f"lease {self.lock.path} is no longer held (ZooKeeper session {zk.state})")

    def release(self) -> None:
        try:
            self.lock.release()
        except Exception:  # the session may already be gone; the node then went with it
            pass


class StateStore:
    """ZooKeeper reads and writes. Each call rides out a lost connection (a ZooKeeper restart or
    failover) for up to `outage` seconds, since the session, and the leases held in it, outlive
    the connection; after that it raises ZooKeeperUnavailable."""

    def __init__(self, hosts: str, chroot: str = DEFAULT_CHROOT, timeout: float | None = None,
                 outage: float | None = None):
        tuned = settings().zookeeper
        timeout = tuned.session_timeout_seconds if timeout is None else timeout
        self.hosts = hosts
        self.chroot = "/" + chroot.strip("/")
        self.zk = KazooClient(hosts=f"{hosts}{self.chroot}", timeout=timeout)
        self._timeout = timeout
        self.outage = tuned.outage_seconds if outage is None else outage

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        deadline = time.monotonic() + self.outage
        while True:
            try:
                return fn(*args, **kwargs)
            except (ConnectionLoss, SessionExpiredError):
                while self.zk.state != KazooState.CONNECTED:
                    if time.monotonic() > deadline:
                        raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} unreachable for {self.outage:.0f} s; "
                                                    "check that it runs. Re-running resumes from the last "
                                                    "recorded state.") from None
                    time.sleep(0.05)

    def start(self) -> StateStore:
        root = KazooClient(hosts=self.hosts, timeout=self._timeout)
        try:
            root.start(timeout=self._timeout)
            root.ensure_path(self.chroot)
        except Exception as exc:
            raise ZooKeeperUnavailable(f"cannot reach ZooKeeper at {self.hosts}: {exc}. "
                                        "Start it (`make up`) or fix the ZooKeeper connection.") from exc
        finally:
            root.stop(); root.close()
        self.zk.start(timeout=self._timeout)
        return self

    def stop(self) -> None:
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> StateStore:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- plain reads and writes ------------------------------------------------------------
    def get(self, path: str) -> Any:
        try:
            return _load(self.call(self.zk.get, path)[0])
        except NoNodeError:
            return None

    def put(self, path: str, value: Any) -> None:
        data = _dump(value)
        try:
            self.call(self.zk.set, path, data)
        except NoNodeError:
            try:
                self.call(self.zk.create, path, data, makepath=True)
            except NodeExistsError:
                self.call(self.zk.set, path, data)

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self.call(self.zk.get_children, path))
        except NoNodeError:
            return []

    def modified(self, path: str) -> float | None:
        """When the node was last written (unix seconds, ZooKeeper's clock); None if it does not exist."""
        stat = self.call(self.zk.exists, path)
        return None if stat is None else stat.mtime / 1000

    def created(self, path: str) -> float | None:
        """When the node was created (unix seconds, ZooKeeper's clock); None if it does not exist."""
        stat = self.call(self.zk.exists, path)
        return None if stat is None else stat.ctime / 1000

    def create_new(self, path: str, value: Any) -> bool:
        """Create `path`; False if it already exists."""
        try:
            self.call(self.zk.create, path, _dump(value), makepath=True)
            return True
        except NodeExistsError:
            return False

    def append(self, prefix: str, value: Any) -> str:
        """Create a sequential node `prefix`NNNNNNNNNN (a queue entry); returns its path."""
        return self.call(self.zk.create, prefix, _dump(value), sequence=True, makepath=True)

    def watch(self, path: str, callback: Callable[[], None], wait: bool = True) -> None:
        """Call `callback` whenever the node at `path` changes (and once now). Setting a watch
        retries until ZooKeeper answers; with `wait` False, while it is away it raises at once."""
        if not wait and self.zk.state != KazooState.CONNECTED:
            raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} is not connected: no watch set on {path}")
        self.zk.DataWatch(path, lambda *_: callback())

    def delete(self, path: str, recursive: bool = False) -> None:
        try:
            self.call(self.zk.delete, path, recursive=recursive)
        except NoNodeError:
            pass

    def get_many(self, paths: list[str]) -> dict[str, Any]:
        """The value at each path (None where there is no node), the reads pipelined: one round
        trip's latency for all of them rather than one each."""
        def read() -> dict[str, Any]:
            pending = [(p, self.zk.get_async(p)) for p in paths]
            out = {}
            for p, result in pending:
                try:
                    out[p] = _load(result.get()[0])
                except NoNodeError:
                    out[p] = None
            return out
        return self.call(read)

    def delete_many(self, paths: list[str]) -> int:
        """Delete the nodes (childless) at `paths`, pipelined; returns how many were there."""
        def delete() -> int:
            pending = [self.zk.delete_async(p) for p in paths]
            gone = 0
            for result in pending:
                try:
                    result.get()
                    gone += 1
                except NoNodeError:
                    pass
            return gone
        return self.call(delete)

    # -- leases and fenced writes -------------------------------------------------------------
    def lease(self, path: str, identifier: str, timeout: float | None = None) -> Lease:
        """Block until the lock at `path` is ours (LeaseTimeout after `timeout` seconds)."""
        lock = self.zk.Lock(path, identifier)
        try:
            lock.acquire(blocking=True, timeout=timeout)
        except LockTimeout as exc:
            raise LeaseTimeout(f"lease {path} still held by another after {timeout:.0f} s") from exc
        return Lease(lock, self)

    def try_lease(self, path: str, identifier: str) -> Lease | None:
        lock = self.zk.Lock(path, identifier)
        return Lease(lock, self) if lock.acquire(blocking=False) else None

    def fenced_put(self, lease: Lease, path: str, value: Any) -> None:
        """Write `value` to `path` only if `lease` is still held (one ZooKeeper transaction)."""
        self.fenced_put_many(lease, {path: value})

    def fenced_put_many(self, lease: Lease, values: dict[str, Any]) -> None:
        """Write each value to its path, all or none, only if `lease` is still held (one
        ZooKeeper transaction: keep it under 1 MB)."""
        node, items = lease.node_path, [(p, _dump(v)) for p, v in values.items()]

        def commit():  # a transaction commits once: a retry after a lost connection builds a new one
            txn = self.zk.transaction()
            txn.check(node, 0)
            for path, data in items:
                txn.set_data(path, data)
            return txn.commit()

        for attempt in (1, 2):
            # On failure the failing op has its error, the ops after it RuntimeInconsistency, the rest RolledBackError.
            check, *writes = self.call(commit)
            if attempt == 1 and any(isinstance(w, NoNodeError) for w in writes):
                for path, _ in items:   # a first write to one of them (rare): make them all
                    self.call(self.zk.ensure_path, path)
                continue
            if isinstance(check, Exception) and not isinstance(check, (RolledBackError, RuntimeInconsistency)):
                raise Fenced(f"write to {items[0][0]} refused: lease {lease.lock.path} is no longer held")
            failed = [w for w in writes if isinstance(w, Exception)
                      and not isinstance(w, (RolledBackError, RuntimeInconsistency))]
            if failed:
                raise failed[0]
            return

    def fenced_create(self, lease: Lease, values: dict[str, Any], per_transaction: int = 500) -> None:
        """Create a node per path with its value, in transactions that each also check `lease`
        (Fenced if it is gone). A path that already exists keeps its value: the values are facts
        that never change (a re-run after a crash writes the same ones). Parents are made as
        needed. A ZooKeeper request is at most 1 MB, hence several transactions for many paths."""
        node, items = lease.node_path, [(p, _dump(v)) for p, v in values.items()]
        for start in range(0, len(items), per_transaction):
            part = items[start:start + per_transaction]
            while part:
                def commit(ops: list[tuple[str, bytes]]):  # built anew on every attempt: a transaction commits once
                    txn = self.zk.transaction()
                    txn.check(node, 0)
                    for path, data in ops:
                        txn.create(path, data)
                    return txn.commit()

                check, *created = self.call(commit, part)
                if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                    raise Fenced(f"write to {part[0][0]} refused: lease {lease.lock.path} is no longer held")
                failed = [r for r in created if isinstance(r, Exception)
                          and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
                if not failed:
                    break
                if not isinstance(failed[0], (NodeExistsError, NoNodeError)):
                    raise failed[0]
                # Rare (a first write under a parent, a re-run after a crash): settle all at once.
                present = self.get_many([p for p, _ in part])
                for parent in {p.rsplit("/", 1)[0] for p, _ in part if present[p] is None}:
                    self.call(self.zk.ensure_path, parent)
                part = [(p, d) for p, d in part if present[p] is None]

    def update(self, path: str, change: Callable[[Any], Any], lease: Lease | None = None) -> Any:
        """Replace the value at `path` with `change(value)` (value None: no node yet), compared
        and set: a concurrent writer's value is read again and changed, never overwritten. With
        `lease`, the write also commits only while it is held (Fenced if not). Returns the new value."""
        while True:
            try:
                raw, stat = self.call(self.zk.get, path)
                current, version = _load(raw), stat.version
            except NoNodeError:
                current, version = None, None
            new = change(current)

            def commit(data: bytes, version: int | None):  # built anew on every attempt: a transaction commits once
                txn = self.zk.transaction()
                if lease is not None:
                    txn.check(lease.node_path, 0)
                if version is None:
                    txn.create(path, data)
                else:
                    txn.set_data(path, data, version=version)
                return txn.commit()

            if version is None:
                self.call(self.zk.ensure_path, path.rsplit("/", 1)[0])
            *check, write = self.call(commit, _dump(new), version)
            if check and isinstance(check[0], Exception) and not isinstance(check[0], RolledBackError):
                raise Fenced(f"write to {path} refused: lease {lease.lock.path if lease else ''} is no longer held")
            if isinstance(write, (BadVersionError, NodeExistsError, NoNodeError)):
                continue  # another writer came first: change its value
            if isinstance(write, Exception):
                raise write
            return new

    def lock_holders(self, path: str) -> list[str]:
        """Who holds or waits for the lock at `path`; asking leaves nothing behind (kazoo's
        `contenders` makes the path unless told it exists, which brought a forgotten dump's
        record back)."""
        lock = self.zk.Lock(path)
        lock.assured_path = True
        try:
            return list(self.call(lock.contenders))
        except NoNodeError:
            return []


# -- paths ------------------------------------------------------------------------------------
def capture_lock(source: str) -> str:
    return f"/{source}/capture/lock"


def heartbeat_path(source: str) -> str:
    return f"/{source}/capture/heartbeat"


def lag_history_path(source: str) -> str:
    return f"/{source}/capture/lag_history"


def dumps_path(source: str) -> str:
    return f"/{source}/dumps"


def dump_path(source: str, dump_id: str) -> str:
    return f"/{source}/dumps/{dump_id}"


def control_path(source: str, dump_id: str) -> str:
    return f"{dump_path(source, dump_id)}/control"


def table_progress_path(source: str, dump_id: str, table: str) -> str:
    return f"{dump_path(source, dump_id)}/tables/{table}"


def dump_merged_path(source: str, dump_id: str, table: str) -> str:
    """Written by the merge; only it knows how many chunk rows the watermark rule dropped."""
    return f"{dump_path(source, dump_id)}/merged/{table}"


def repairs_path(source: str) -> str:
    return f"/{source}/repairs"


def repairer_path(source: str) -> str:
    """Written by the leader's repairer as it starts: when, on ZooKeeper's clock."""
    return f"/{source}/capture/repairer"


def merge_lock(source: str, table: str) -> str:
    return f"/{source}/merge/{table}/lock"


def watermark_index_path(source: str) -> str:
    return f"/{source}/watermarks/index"


def watermark_path(source: str, watermark: str) -> str:
    """Where the position of watermark `watermark` (its value: a UUID) is indexed. Spread over
    256 shards by a hash: a node's child list travels in one reply of at most 1 MB (about 25,000
    names), and the index holds two entries per chunk ever dumped until retention removes them.
    The id is %-escaped (dots too), so any value is one valid node name."""
    shard = hashlib.sha1(watermark.encode()).hexdigest()[:2]
    return f"{watermark_index_path(source)}/{shard}/{node_name(watermark)}"


def node_name(text: str) -> str:
    """Any text as one valid node name: %-escaped, dots too (ZooKeeper refuses "." and "..")."""
    return quote(text, safe='-_:').replace('.', '%2E')


def unlogged_root(source: str) -> str:
    return f"/{source}/unlogged"


def unlogged_path(source: str, table: str) -> str:
    """Where the positions of `table`'s writes logged without rows are kept (`dblog.coordination.unlogged`)."""
    return f"{unlogged_root(source)}/{node_name(table)}"


def renames_root(source: str) -> str:
    return f"/{source}/renames"


def renames_path(source: str, table: str) -> str:
    """Where `table`'s column renames are kept (`dblog.coordination.column_renames`)."""
    return f"{renames_root(source)}/{node_name(table)}"


def watermark_index_built_path(source: str) -> str:
    return f"/{source}/watermarks/built"


def staged_maintenance_lock(source: str) -> str:
    return f"/{source}/staged/lock"


def open_store() -> StateStore:
    """The store of the configured ensemble (the `dblog_zookeeper` connection), started."""
    from ..connections import zookeeper
    zk = zookeeper()
    return StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout).start()
