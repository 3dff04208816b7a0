"""One source under test, set up as in production: its own ZooKeeper chroot, replication slot,
staged log and warehouse; the capture as its own process; dumps through the `dblog dump` CLI.

`LagProbe` measures what a user feels: capture lag (how long until the staged log covers every
commit made before a moment) and the longest pause in the checkpoint's progress.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from common import PORTS, ROOT, env_for, run_sql, source, spawn, uri

CLI = ["-m", "dblog.cli"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None
    return None


class LagProbe:
    """Call `poll()` often (every 0.1 s). Each `every` seconds it notes the source's log head;
    once the checkpoint passes a noted head, that moment's lag is known. It also notes each
    time the checkpoint moves: the gaps between moves are the capture's pauses."""

    def __init__(self, src, store, name: str, every: float = 1.0):
        from dblog.coordination.checkpoint import checkpoint_path
        self.src, self.store, self.path, self.every = src, store, checkpoint_path(name), every
        self.heads: list[tuple[float, str]] = []
        self.lags: list[tuple[float, float]] = []    # (moment, seconds until staged)
        self.moves: list[float] = []                 # when the checkpoint moved
        self.position, self.next_head = None, 0.0

    def poll(self) -> None:
        now = time.time()
        position = (self.store.get(self.path) or {}).get("position") or ""
        if position != self.position:
            self.position = position
            self.moves.append(now)
        while self.heads and self.heads[0][1] <= position:
            t, _ = self.heads.pop(0)
            self.lags.append((t, now - t))
        if now >= self.next_head:
            self.heads.append((now, self.src.head()["position"]))
            self.next_head = now + self.every

    def lag(self, t0: float, t1: float) -> list[float]:
        return [s for t, s in self.lags if t0 <= t < t1]

    def longest_pause(self, t0: float, t1: float) -> float:
        moves = [t0] + [t for t in self.moves if t0 < t < t1] + [t1]
        return max(b - a for a, b in zip(moves, moves[1:]))


class Harness:
    def __init__(self, kind: str, ns: str, name: str, home: str | None = None, chroot: str | None = None):
        """`home`, `chroot`: share a staged log, warehouse and ZooKeeper chroot with other sources
        (one deployment); default: a source's own."""
        from dblog.coordination.store import StateStore
        from dblog.stagedlog.staged_log import StagedLog
        from dblog.warehouse.tables import Warehouse
        self.kind, self.ns, self.name = kind, ns, name
        self.slot = f"bench_{uuid.uuid4().hex[:8]}"
        self.dir = home or tempfile.mkdtemp(prefix=f"dblog-bench-{name}-", dir=str(ROOT / ".local"))
        chroot = chroot or f"/bench_{uuid.uuid4().hex[:8]}"
        self.env = {**env_for(name, uri(kind, ns, self.slot), chroot, f"{self.dir}/staged"),
                    "DBLOG_WAREHOUSE": f"{self.dir}/warehouse"}
        self.store = StateStore(f"127.0.0.1:{PORTS['ZK']}", chroot).start()
        self.staged, self.warehouse = StagedLog(f"{self.dir}/staged"), Warehouse(f"{self.dir}/warehouse")
        self.src = source(kind, name, ns, self.slot, chroot)
        self.capture = None

    def start_capture(self) -> None:
        subprocess.run([sys.executable, *CLI, "capture", "--init", "--source", self.name], env=self.env, check=True,
                       capture_output=True)
        self.capture = spawn([*CLI, "capture", "--source", self.name], self.env)

    def probe(self) -> LagProbe:
        return LagProbe(self.src, self.store, self.name)

    def dump(self, table: str, chunk_size: int, delay: float = 0.0, probe: LagProbe | None = None,
             samples: list | None = None, parallelism: int = 1) -> tuple[int, float]:
        """Run a dump of `table` to the end; returns (rows, seconds). With `samples`, appends
        {t, rows} every second (rows staged so far, from the dump's progress)."""
        from dblog.coordination import store as paths
        started = time.time()
        log = Path(tempfile.mkstemp(prefix="dump-", suffix=".log", dir=self.dir)[1])
        with log.open("w") as err:  # a file, not a pipe: a full pipe would block the worker's logging
            worker = subprocess.Popen([sys.executable, *CLI, "dump", "--table", table, "--source", self.name,
                                       "--chunk-size", str(chunk_size), "--delay", str(delay),
                                       "--parallelism", str(parallelism)], env=self.env,
                                      stdout=subprocess.PIPE, stderr=err, text=True)
        next_sample = started
        while worker.poll() is None:
            if probe:
                probe.poll()
            if samples is not None and time.time() >= next_sample:
                rows = 0
                for dump_id in self.store.children(paths.dumps_path(self.name)):
                    progress = self.store.get(paths.table_progress_path(self.name, dump_id, table)) or {}
                    if progress.get("status") == "running":
                        rows = progress.get("rows", 0)
                samples.append({"t": time.time(), "rows": rows})
                next_sample += 1.0
            time.sleep(0.1)
        out = worker.communicate()[0]
        elapsed = time.time() - started
        if worker.returncode != 0:
            raise RuntimeError(f"dump of {table} failed ({worker.returncode}): {log.read_text()[-2000:]}")
        rows = sum(t["rows"] for t in json.loads(out)["tables"].values())
        return rows, elapsed

    def catch_up(self, timeout: float = 600) -> float:
        """Wait until every commit made before now is staged; returns the seconds waited."""
        from dblog.capture.capture_loop import caught_up, sync_point
        mark, started = sync_point(self.src), time.time()
        while caught_up(self.store, self.staged, self.name, mark) is None:
            if time.time() - started > timeout:
                raise TimeoutError(f"the capture of {self.name} did not stage a sync watermark in {timeout} s")
            time.sleep(0.1)
        return time.time() - started

    def merge(self, spark, table: str) -> float:
        """Seconds; the merge's report is kept as `last_merge` (rows dropped in windows: `.dropped`)."""
        from dblog.merge.job import merge_table
        started = time.time()
        self.last_merge = merge_table(spark, self.store, self.staged, self.warehouse, self.name, table)
        return time.time() - started

    def warehouse_table(self, table: str) -> pa.Table | None:
        """The table's `id` and `v` as pyiceberg reads its current snapshot (position deletes
        applied: an in-place merge leaves the rows it replaced in their data files), None before a
        merge."""
        return self.warehouse.read(self.name, table, ["id", "v"])

    def close(self) -> dict | None:
        stats = None
        if self.capture is not None:
            self.capture.terminate()
            lines = self.capture.communicate(timeout=120)[0].strip().splitlines()
            stats = json.loads(lines[-1]) if lines else None
        self.src.close()
        self.store.stop()
        if self.kind == "postgres":
            run_sql(self.kind, f"SELECT pg_drop_replication_slot('{self.slot}') FROM pg_replication_slots "
                               f"WHERE slot_name = '{self.slot}'")
        return stats
