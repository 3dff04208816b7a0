"""Fixtures over the real services that `scripts/services.sh up` starts (MariaDB, PostgreSQL, ZooKeeper).

Every test gets its own namespace (a MariaDB database or a PostgreSQL schema), ZooKeeper chroot,
replication slot and staging directory, so tests never see each other's state.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dblog_dev import local

pytest_plugins = ["airflow_fixtures"]  # Airflow under test (tests/dags, tests/e2e)

ROOT = Path(__file__).resolve().parents[1]
PORTS = local.ports()
ADMIN = {service: local.admin_uri(service) for service in ("mariadb", "postgres")}
# The tests run against the local services: settings a test leaves unset may fall back to them
# (a test that proves the engine refuses to fall back removes it).
os.environ["DBLOG_LOCAL"] = "1"
# Windows keep the chunk size a test names, which a quiet test source would grow
# (`snapshot/window_growth`); the tests of growth set it themselves.
os.environ["DBLOG_DUMP_QUIET_CHUNK_SIZE"] = "1"


SOURCES = ("mariadb", "postgres")
# `make test` is the short form: a test on the `src` fixture runs on one source, alternating by
# test and case, unless marked `both_sources`, and tests marked `long` (a variant whose subject a
# cheaper test of the suite covers) are left out; `make test-full` (DBLOG_SUITE=full) runs them all.
FULL = os.environ.get("DBLOG_SUITE") == "full"


def one_source(item) -> str | None:
    """The source a test of `src` runs on in the short form (None: every source)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if FULL or "src" not in params or item.get_closest_marker("both_sources"):
        return None
    case = item.originalname + repr(sorted((k, str(v)) for k, v in params.items() if k != "src"))
    return SOURCES[zlib.crc32(case.encode()) % len(SOURCES)]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    # A test named on the command line (path::name[case]) runs as asked, whichever form.
    named = any("::" in str(arg) for arg in config.args)
    for item in items if not named else ():
        chosen = one_source(item)
        other_source = chosen is not None and chosen != item.callspec.params["src"]
        (dropped if other_source or (item.get_closest_marker("long") and not FULL) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    for item in items:
        if "/unit/" not in str(item.fspath) and not item.get_closest_marker("offline"):
            item.add_marker(pytest.mark.integration)
        # In a parallel run (pytest -n 2 --dist loadgroup -m "not alone"), every test that needs the
        # one `airflow standalone` goes to the same worker, which starts it once.
        if "standalone" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("standalone"))


@pytest.fixture(scope="session")
def services():
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "up"], check=True, capture_output=True)
    return PORTS


def wait_for(condition, timeout: float = 60.0, interval: float = 0.05, what: str = "condition"):
    """Await a condition (polling it); fail with `what` after `timeout` seconds. DBLOG_TEST_TRACE=1
    prints each wait's length (with `pytest -s`: where a slow test spends its time)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        value = condition()
        if value:
            if os.environ.get("DBLOG_TEST_TRACE"):
                print(f"[trace] {time.monotonic() - started:6.1f} s waiting for {what}", flush=True)
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


TABLES = ("accounts", "order_lines")  # what `dblog_dev.workload` creates


def capture_password() -> str:
    """The capture user's password, which `make up` generated for this checkout."""
    return local.password()


def listening(port: int) -> set[str]:
    """Local addresses listening on TCP `port` (from /proc/net/tcp and tcp6)."""
    out = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(path).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                out.add(address)
    return out


LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::1, ::ffff:127.0.0.1


def settle(src: SourceEnv) -> None:
    """Write a sync watermark and await it behind the checkpoint: every earlier commit is staged
    and a merge started now covers it."""
    from dblog.capture.capture_loop import caught_up, sync_point
    mark = sync_point(src.source())
    with src.store() as store:
        wait_for(lambda: caught_up(store, src.staged(), src.source_id, mark), 120,
                 what="the capture to stage the sync watermark and checkpoint past it")


def streamed(src: SourceEnv) -> int:
    """Transactions a PostgreSQL server streamed to this test's slot while they ran (its own statistics)."""
    rows = src.sql("SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s", params=[src.source().slot])
    return rows[0][0] if rows else 0


def checkpoint(src: SourceEnv) -> str | None:
    """The capture's checkpoint position: everything staged up to it is complete."""
    from dblog.coordination.checkpoint import checkpoint_position
    with src.store() as store:
        return checkpoint_position(store, src.source_id)


def assert_warehouse_equals_source(src: SourceEnv, warehouse, tables=TABLES) -> None:
    """Source and warehouse agree (read through pyiceberg), and an independent engine, DuckDB,
    reads the same rows from the table's metadata."""
    from dblog.operations.verify import compare_warehouse
    from dblog.warehouse.readers import duckdb_read
    for t in tables:
        diff = compare_warehouse(src.source(), warehouse, src.table(t))
        assert diff.equal, (f"{t}: {len(diff.missing)} missing, {len(diff.extra)} extra, {len(diff.different)} "
                            f"different, e.g. {diff.keys()[:5]}; drifted ranges {diff.drifted[:3]}")
        assert diff.source_rows > 0
        shown = [*warehouse.state(src.source_id, src.table(t)).key, "_dblog_position"]
        ours = warehouse.read(src.source_id, src.table(t), shown).to_pylist()
        duck = duckdb_read(warehouse, src.source_id, src.table(t)).select(shown).to_pylist()
        assert sorted(map(tuple, (r.values() for r in duck))) == sorted(map(tuple, (r.values() for r in ours))), \
            f"{t}: DuckDB reads other rows than pyiceberg"


def warehouse_table(spark, warehouse, source: str, table: str):
    """The warehouse table's current snapshot as a DataFrame, the way a Spark user without the
    Iceberg runtime reads it (`dblog.spark.data_sources.spark_table`)."""
    from dblog.spark.data_sources import spark_table
    return spark_table(spark, warehouse, source, table)


def parquet_column_names(root: Path) -> set[str]:
    """Every column name (struct fields included) of every Parquet file under `root`."""
    import pyarrow.parquet as pq
    names = set()
    for path in root.rglob("*.parquet"):
        for f in pq.read_schema(path):
            names.add(f.name)
            if hasattr(f.type, "num_fields"):  # the _before and _old_key structs
                names.update(f.type.field(i).name for i in range(f.type.num_fields))
    return names


@dataclass
class SourceEnv:
    """One source under test: admin SQL, the engine's Source, state store, staged log, processes."""
    kind: str
    tag: str
    staging: Path
    procs: list = field(default_factory=list)
    conns: list = field(default_factory=list)  # a failed test's open transaction must not block teardown
    query: str = ""  # extra connection options, e.g. "exclude=accounts.note"
    chroot: str = ""  # ZooKeeper chroot; sources of one test that share a deployment share it
    zk_hosts: str = ""  # another ZooKeeper than the local one (the cluster's ensemble: tests/spark/test_cluster.py)

    @property
    def source_id(self) -> str:
        return f"t_{self.kind[:2]}_{self.tag}"

    @property
    def namespace(self) -> str:
        return f"t_{self.tag}"

    @property
    def zk_chroot(self) -> str:
        return self.chroot or f"/test_{self.tag}"

    @property
    def zk_uri(self) -> str:
        hosts = self.zk_hosts or f"127.0.0.1:{PORTS['ZK']}"
        return f"zookeeper://{hosts}{self.zk_chroot}"

    @property
    def uri(self) -> str:
        if self.kind == "mariadb":
            return f"mysql://dblog:{capture_password()}@127.0.0.1:{PORTS['MARIADB']}/{self.namespace}" + (
                f"?{self.query}" if self.query else "")
        return (f"postgres://dblog:{capture_password()}@127.0.0.1:{PORTS['POSTGRES']}/shop?schema={self.namespace}"
                f"&slot=dblog_{self.tag}" + (f"&{self.query}" if self.query else ""))

    @property
    def env(self) -> dict:
        return {**os.environ, f"AIRFLOW_CONN_{self.source_id.upper()}": self.uri,
                "AIRFLOW_CONN_DBLOG_ZOOKEEPER": self.zk_uri,
                "DBLOG_STAGING": str(self.staging), "DBLOG_SOURCES": self.source_id,
                "DBLOG_ZK_SESSION_TIMEOUT": "3",
                "PYTHONPATH": str(ROOT / "include")}

    def admin(self):
        from dblog_dev.workload import connect
        uri = ADMIN[self.kind]
        kind, conn = connect(uri)
        return conn

    def sql(self, *statements: str, params=None) -> list:
        conn = self.admin()
        try:
            cur, out = conn.cursor(), []
            for s in statements:
                cur.execute(s, params)
                out = cur.fetchall() if cur.description else out
            conn.commit()
            return list(out)
        finally:
            conn.close()

    def source(self):
        # Of this test's deployment (its ZooKeeper chroot), like the `dblog` processes it runs.
        from dblog.connections import deployment_id, source_from_uri
        return source_from_uri(self.source_id, self.uri, deployment_id(self.zk_uri))

    def store(self):
        from dblog.coordination.store import StateStore
        return StateStore(self.zk_hosts or f"127.0.0.1:{PORTS['ZK']}", self.zk_chroot, timeout=3).start()

    def staged(self):
        from dblog.stagedlog.staged_log import StagedLog
        return StagedLog(str(self.staging))

    def workload(self, seed: int = 0, rows: int = 2000):
        from dblog_dev.workload import Workload, connect
        kind, conn = connect(ADMIN[self.kind])
        self.conns.append(conn)
        return Workload(kind, conn, self.namespace, seed, rows)

    def table(self, name: str) -> str:
        return f"{self.namespace}.{name}"

    def dblog(self, *args: str, check: bool = False, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dblog.cli", *args], env={**self.env, **(env or {})},
                              capture_output=True, text=True, check=check, timeout=timeout)

    def spawn(self, *args: str, module: str = "dblog.cli", output: Path | None = None,
              env: dict | None = None, preexec_fn=None) -> subprocess.Popen:
        """A process with piped output, or with its output in the file `output` (for chatty ones,
        whose pipes would fill up and block them); `preexec_fn` runs in the child before it starts."""
        out = subprocess.PIPE if output is None else open(output, "a")
        proc = subprocess.Popen([sys.executable, "-m", module, *args], env={**self.env, **(env or {})}, stdout=out,
                                stderr=out if output is not None else subprocess.PIPE, text=True,
                                preexec_fn=preexec_fn)
        self.procs.append(proc)
        return proc

    def start_capture(self, *args: str) -> subprocess.Popen:
        """Set the checkpoint (so every later commit is captured), then run a capture process."""
        self.dblog("capture", "--init", "--source", self.source_id, check=True)
        return self.spawn("capture", "--source", self.source_id, *args)

    def spawn_workload(self, seconds: float, seed: int = 1, rows: int = 2000,
                       rate: float | None = None) -> subprocess.Popen:
        return self.spawn(ADMIN[self.kind], self.namespace, "--seconds", str(seconds), "--seed", str(seed),
                          "--rows", str(rows), *(["--rate", str(rate)] if rate else []), module="dblog_dev.workload")

    def setup(self) -> None:
        if self.kind == "mariadb":
            self.sql(f"CREATE DATABASE {self.namespace}",
                     f"GRANT SELECT ON {self.namespace}.* TO 'dblog'@'127.0.0.1'")
        else:
            self.sql(f"CREATE SCHEMA {self.namespace}", f"GRANT USAGE ON SCHEMA {self.namespace} TO dblog",
                     f"ALTER DEFAULT PRIVILEGES IN SCHEMA {self.namespace} GRANT SELECT ON TABLES TO dblog")

    def teardown(self) -> None:
        for c in self.conns:
            c.close()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.kind == "mariadb":
            self.sql(f"DROP DATABASE IF EXISTS {self.namespace}")
        else:
            wait_for(lambda: not self.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active",
                                          params=[f"dblog_{self.tag}"]), 30, what="slot to be released")
            self.sql(f"DROP SCHEMA IF EXISTS {self.namespace} CASCADE",
                     f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'dblog_{self.tag}'")


def make_env(kind: str, tmp_path: Path) -> SourceEnv:
    env = SourceEnv(kind, uuid.uuid4().hex[:8], tmp_path / "staging")
    env.setup()
    return env


@pytest.fixture(params=["mariadb", "postgres"])
def src(request, services, tmp_path):
    env = make_env(request.param, tmp_path)
    yield env
    env.teardown()


@pytest.fixture
def mariadb(services, tmp_path):
    env = make_env("mariadb", tmp_path)
    yield env
    env.teardown()


@pytest.fixture
def postgres(services, tmp_path):
    env = make_env("postgres", tmp_path)
    yield env
    env.teardown()


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the whole run (a session costs ~6-10 s to start). With the JDBC drivers
    `make install` adds for the benchmark's Spark baseline (tests/bench)."""
    from dblog.spark.session import session
    jars = "/usr/share/java/mariadb-java-client.jar,/usr/share/java/postgresql.jar"
    spark = session("dblog-tests", "local[2]", {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
                                                "spark.driver.memory": "2g", "spark.jars": jars})
    yield spark
    spark.stop()


@pytest.fixture
def warehouse(tmp_path):
    from dblog.warehouse.tables import Warehouse
    return Warehouse(str(tmp_path / "warehouse"))
