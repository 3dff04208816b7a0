"""Scenario 1b: end-to-end freshness, a row's commit in the source until a reader of the Iceberg
table can see it, under the continuous merge and under the scheduled merge, same load, same run.

One deployment captures both sources (one ZooKeeper chroot, staged log and warehouse). Each
source gets ROWS_PER_S row changes a second: the bench's big table `t` takes 90% (updates,
inserts, deletes in transactions of 10, `bigtable.writer`) and a probe table `f` 10% as
single-row inserts whose commit moments are noted. At the start a full dump of `t` (BIG_ROWS rows)
runs. The merge is either `dblog merge --continuous` (one Spark session for both sources), or a
cold `dblog merge` process every EVERY_S seconds (as the `dblog_merge` DAG's spark-submit task).

A probe row is visible from the commit of the first Iceberg snapshot holding it: the reader takes
each new snapshot's commit time from the table metadata and the highest probe id in it (ids are
committed in order, so a snapshot holds a prefix of them). The continuous merge's CPU (its
Python and JVM) and resident memory are sampled from /proc while it runs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import bigtable
from common import ROOT, admin, namespace, run_sql
from harness import CLI, Harness, pct

NS = "bench_fresh"
CLK = os.sysconf("SC_CLK_TCK")


class Inserter(threading.Thread):
    """Single-row inserts into the probe table at `rate` a second; the commit moment of each id."""

    def __init__(self, kind: str, rate: float):
        super().__init__(daemon=True)
        self.kind, self.rate, self.committed, self.stop = kind, rate, {}, threading.Event()

    def run(self) -> None:
        conn = admin(self.kind)
        cur, i, start = conn.cursor(), 0, time.monotonic()
        while not self.stop.is_set():
            i += 1
            cur.execute(f"INSERT INTO {NS}.f VALUES ({i}, 'row-{i}')")  # autocommit: one commit per row
            self.committed[i] = time.time()
            time.sleep(max(0.0, start + i / self.rate - time.monotonic()))
        conn.close()


class Reader(threading.Thread):
    """Notes, per probe id, the commit time of the first snapshot of `f` that holds it."""

    def __init__(self, h: Harness):
        super().__init__(daemon=True)
        self.h, self.visible, self.stop, self.snapshots = h, {}, threading.Event(), 0

    def run(self) -> None:
        from pyiceberg.expressions import GreaterThan
        seen, top = set(), 0
        while not self.stop.wait(0.2):
            table = self.h.warehouse.load(self.h.name, f"{NS}.f")
            if table is None:
                continue
            for entry in table.metadata.snapshot_log:
                if entry.snapshot_id in seen:
                    continue
                seen.add(entry.snapshot_id)
                self.snapshots += 1
                ids = table.scan(row_filter=GreaterThan("id", top), selected_fields=("id",),
                                 snapshot_id=entry.snapshot_id).to_arrow()["id"].to_pylist()
                for i in range(top + 1, max(ids, default=top) + 1):
                    self.visible[i] = entry.timestamp_ms / 1000
                top = max(top, *ids) if ids else top


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for t in Path(f"/proc/{p}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except OSError:
            pass
    return out


def _cpu_rss(pid: int) -> tuple[float, float]:
    """CPU seconds and resident MiB of a process and its descendants (the merge's Python and JVM)."""
    cpu = rss = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / CLK
            rss += int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, IndexError):
            pass
    return cpu, rss


def _await_line(proc: subprocess.Popen, log: Path, text: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while text not in log.read_text():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the continuous merge did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def _merge_env(harnesses: dict[str, Harness]) -> dict:
    env: dict = {}
    for h in harnesses.values():
        env.update(h.env)
    return env


def phase(kinds: list[str], mode: str, seconds: float, every_s: float, rate: float, big_rows: int) -> dict:
    """One run of the load with the merge in `mode` (`continuous` or `scheduled`)."""
    home = tempfile.mkdtemp(prefix=f"dblog-bench-fresh-{mode}-", dir=str(ROOT / ".local"))
    chroot = f"/bench_{uuid.uuid4().hex[:8]}"
    harnesses: dict[str, Harness] = {}
    for kind in kinds:
        namespace(kind, NS)
        bigtable.create(kind, NS, big_rows)
        run_sql(kind, f"CREATE TABLE {NS}.f (id BIGINT PRIMARY KEY, note VARCHAR(20))")
        harnesses[kind] = Harness(kind, NS, f"fresh_{kind}", home=home, chroot=chroot)
        harnesses[kind].start_capture()
    env, names = _merge_env(harnesses), ",".join(h.name for h in harnesses.values())
    inserters = {k: Inserter(k, rate / 10) for k in kinds}
    readers = {k: Reader(h) for k, h in harnesses.items()}
    writers, dumps, merge_log = {}, {}, Path(home) / "merge.log"
    samples: list[tuple[float, float, float]] = []
    merges: list[float] = []
    merger = None
    try:
        if mode == "continuous":   # running before the load, as in a deployment
            merger = subprocess.Popen([sys.executable, *CLI, "merge", "--continuous", "--source", names,
                                       "--every", str(every_s)], env=env, stdout=merge_log.open("w"),
                                      stderr=subprocess.STDOUT)
            _await_line(merger, merge_log, "continuous merge of")
        for k in kinds:
            writers[k] = subprocess.Popen([sys.executable, str(Path(__file__).parent / "bigtable.py"), "write",
                                           k, NS, str(rate * 0.9), f"{home}/writer-{k}.json"])
            inserters[k].start()
            readers[k].start()
            dumps[k] = subprocess.Popen([sys.executable, *CLI, "dump", "--source", harnesses[k].name, "--table",
                                         f"{NS}.t"], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.time()
        if merger is not None:
            while time.time() - start < seconds:
                samples.append((time.time() - start, *_cpu_rss(merger.pid)))
                time.sleep(5)
            merger.terminate()
            merger.wait(300)
        else:
            cycle = 0
            while time.time() - start < seconds:
                cycle += 1
                time.sleep(max(0.0, start + cycle * every_s - time.time()))
                began = time.time()
                subprocess.run([sys.executable, *CLI, "merge", "--source", names], env=env, check=True,
                               capture_output=True)
                merges.append(round(time.time() - began, 1))
                print(f"    scheduled merge {cycle}: {merges[-1]} s", flush=True)
        time.sleep(2)   # the reader's last look
    finally:
        for k in kinds:
            inserters[k].stop.set()
            readers[k].stop.set()
            if k in writers:
                writers[k].terminate()
                writers[k].wait()
            if k in dumps and dumps[k].poll() is None:
                dumps[k].kill()
        if merger is not None and merger.poll() is None:
            merger.kill()
        for h in harnesses.values():
            h.close()
    out: dict = {"mode": mode, "seconds": seconds, "every_s": every_s, "rate": rate, "big_rows": big_rows,
                 "sources": {}}
    for k in kinds:
        committed, visible = inserters[k].committed, readers[k].visible
        ages = [visible[i] - t for i, t in committed.items() if i in visible]
        out["sources"][k] = {"probe_rows": len(committed), "visible": len(ages), "snapshots": readers[k].snapshots,
                             "dump_done": dumps[k].returncode == 0,
                             "freshness_s_p50": round(pct(ages, 0.5), 1), "freshness_s_p99": round(pct(ages, 0.99), 1),
                             "freshness_s_max": round(max(ages, default=float("nan")), 1)}
    if mode == "continuous":
        out.update(_continuous_figures(samples, merge_log))
    else:
        out["merge_s"] = merges
    return out


def _continuous_figures(samples: list[tuple[float, float, float]], merge_log: Path) -> dict:
    said = merge_log.read_text()
    cycle = re.search(r"cycle time p50 ([\d.]+)s, max ([\d.]+)s", said)
    tenth = max(1, len(samples) // 10)
    cpu = (samples[-1][1] - samples[0][1]) / max(samples[-1][0] - samples[0][0], 1e-9) if len(samples) > 1 else None
    return {"cycle_s_p50": float(cycle.group(1)) if cycle else None,
            "cycle_s_max": float(cycle.group(2)) if cycle else None,
            "merge_cpu_cores": None if cpu is None else round(cpu, 2),
            "merge_rss_mb_first_tenth": round(max(s[2] for s in samples[:tenth]), 0) if samples else None,
            "merge_rss_mb_last_tenth": round(max(s[2] for s in samples[-tenth:]), 0) if samples else None,
            "merge_rss_mb_max": round(max(s[2] for s in samples), 0) if samples else None}


def run(kinds: list[str], every_s: float, seconds: float, rate: float, big_rows: int,
        scheduled_s: float, continuous_every_s: float) -> dict:
    out = {"continuous": phase(kinds, "continuous", seconds, continuous_every_s, rate, big_rows)}
    if scheduled_s > 0:
        out["scheduled"] = phase(kinds, "scheduled", scheduled_s, every_s, rate, big_rows)
    return out

