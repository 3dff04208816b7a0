"""One seeded chaos run on a real source: writers, dumps, controls, merges and kill -9s at
random moments, then the oracles (see `oracles`).

`legacy`: a second client writes what the log holds without rows every second or two
(`legacy.py`: statement-logged updates and range deletes, TRUNCATE, LOAD DATA), so the run also
holds the repairs of such writes to the oracles. `continuous`: a continuous merge runs throughout
(`dblog merge --continuous`) instead of batch merges at random moments.

The seed fixes the writer's transactions and the controller's sequence of actions and their
parameters; how they interleave with the processes they act on is up to the machine, so a
replay runs the same plan, not the same schedule. `make chaos` and tests/chaos call `run`.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from legacy import create_legacy
from oracles import PositionHistory, staged_once_in_order, transactions, warehouse_differs
from writer import LABEL_COUNT, create_labels, label_code

from dblog.coordination import store as paths

from conftest import ADMIN, SourceEnv, make_env, settle

HERE = Path(__file__).resolve().parent
TABLES = ("accounts", "order_lines", "labels")
ACTIONS = {"dump_all": 2, "dump_table": 3, "dump_keys": 3, "throttle": 2, "pause": 2, "cancel": 1,
           "merge": 3, "kill_capture": 1, "kill_dump": 1}
MAX_RUNNING = 3  # dumps at once: more only queue for the 2 cores
CONVERGE_S = 300  # after the writes stop: the repairs they asked for land, with no manual step, within this
WRITE_RATE = 1500  # row changes/s: enough to collide with every chunk window, little enough to merge quickly


@dataclass
class Dump:
    id: str
    proc: subprocess.Popen | None
    args: tuple = ()
    protected: bool = False      # the full dumps: never cancelled, so every row is covered
    state: str = "running"
    resume_at: float | None = None


@dataclass
class Report:
    kind: str
    seed: int
    seconds: float
    actions: list = field(default_factory=list)
    transactions: int = 0
    events: int = 0
    dumps: int = 0
    merges: int = 0
    kills: int = 0
    versions: int = 0
    problems: list = field(default_factory=list)
    elapsed_s: float = 0.0
    legacy: bool = False
    continuous: bool = False
    legacy_writes: int = 0
    converged_s: float | None = None   # after the writes stopped, until the warehouse equalled the source

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def mode(self) -> str:
        return ("continuous" if self.continuous else "batch") + (" + legacy" if self.legacy else "")

    def replay(self) -> str:
        flags = (" LEGACY=1" if self.legacy else "") + (" MERGE=continuous" if self.continuous else "")
        return f"make chaos SOURCES={self.kind} SEED={self.seed} SECONDS={self.seconds:g}{flags}"


class Chaos:
    def __init__(self, env: SourceEnv, rng: random.Random, report: Report, spark, warehouse, log):
        self.env, self.rng, self.report, self.spark, self.warehouse, self.log = env, rng, report, spark, warehouse, log
        self.dumps: dict[str, Dump] = {}
        self.history = PositionHistory()
        self.capture: subprocess.Popen | None = None
        self.merging: threading.Thread | None = None
        self.stop_merging = threading.Event()
        self.logs = env.staging.parent / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    # -- processes ---------------------------------------------------------------------------------
    def start_capture(self) -> None:
        # With the warehouse, as a deployment's capture has it: its repairs remove rows deleted unlogged.
        self.capture = self.env.spawn("capture", "--source", self.env.source_id, "--flush-seconds", "0.3",
                                      output=self.logs / "capture.log", env={"DBLOG_WAREHOUSE": self.warehouse.root})

    def start_dump(self, args: list[str], protected: bool = False) -> None:
        dump_id = f"chaos-{self.report.seed}-{len(self.dumps)}"
        # Tiny chunks only for key lists: thousands of chunk files would make every merge slow.
        chunk = self.rng.choice([3, 17, 100] if "--keys" in args else [50, 100, 500, 2000])
        delay = self.rng.choice([0, 0, 0.01, 0.05])
        args = (*args, "--chunk-size", str(chunk), "--delay", str(delay))
        proc = self.env.spawn("dump", "start", dump_id, "--source", self.env.source_id, *args,
                              output=self.logs / f"{dump_id}.log")
        self.dumps[dump_id] = Dump(dump_id, proc, args, protected)
        self.report.dumps += 1
        self.note("start", dump_id, *args)

    def running(self, unprotected: bool = False) -> list[Dump]:
        live = [d for d in self.dumps.values() if d.state == "running" and d.proc is not None and d.proc.poll() is None]
        return [d for d in live if not (unprotected and d.protected)]

    def control(self, action: str, dump: Dump, *args: str) -> bool:
        done = self.env.dblog("dump", action, dump.id, "--source", self.env.source_id, *args)
        if done.returncode != 0:
            if f"no dump {dump.id}" in done.stderr:  # its process has not registered it yet
                self.note(action, dump.id, "refused: not registered yet")
                return False
            raise AssertionError(f"dblog dump {action} {dump.id} failed: {done.stderr}")
        self.note(action, dump.id, *args)
        return True

    def note(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        self.report.actions.append(line)
        self.log(f"  {time.monotonic() - self.t0:6.1f}s {line}")

    # -- actions -----------------------------------------------------------------------------------
    def act(self, action: str) -> None:
        rng = self.rng
        if action.startswith("dump_") and len(self.running()) >= MAX_RUNNING:
            action = "merge"
        if action == "dump_all":
            self.start_dump(["--all"])
        elif action == "dump_table":
            self.start_dump(["--table", rng.choice(TABLES)])
        elif action == "dump_keys":
            table = rng.choice(TABLES)
            n = rng.randint(1, 60)
            keys = {"accounts": lambda: rng.randint(1, 4000), "order_lines": lambda: [rng.randint(1, 1600), rng.randint(1, 6)],
                    "labels": lambda: label_code(rng.randrange(int(LABEL_COUNT * 1.1)))}[table]
            self.start_dump(["--table", table, "--keys", json.dumps([keys() for _ in range(n)])])
        elif action == "throttle" and self.running():
            self.control("throttle", rng.choice(self.running()), "--chunk-size", str(rng.choice([50, 400, 1000])),
                         "--delay", str(rng.choice([0, 0.02, 0.1])))
        elif action == "pause" and self.running():
            dump = rng.choice(self.running())
            if self.control("pause", dump):
                dump.state, dump.resume_at = "paused", time.monotonic() + rng.uniform(0.3, 3)
        elif action == "cancel" and self.running(unprotected=True):
            dump = rng.choice(self.running(unprotected=True))
            if self.control("cancel", dump):
                dump.state = "cancelled"
        elif action == "kill_dump" and self.running():
            dump = rng.choice(self.running())
            os.kill(dump.proc.pid, signal.SIGKILL); dump.proc.wait()
            self.report.kills += 1
            self.note("kill -9", dump.id)
            with self.env.store() as store:
                registered = store.get(paths.dump_path(self.env.source_id, dump.id)) is not None
            # A registered dump resumes after its last chunk (once the dead worker's lease expires);
            # one killed before it registered is started again.
            again = ("run", dump.id) if registered else ("start", dump.id, *dump.args)
            dump.proc = self.env.spawn("dump", *again[:2], "--source", self.env.source_id, *again[2:],
                                       output=self.logs / f"{dump.id}.log")
            self.note("resume" if registered else "restart", dump.id)
        elif action == "kill_capture":
            os.kill(self.capture.pid, signal.SIGKILL); self.capture.wait()
            self.report.kills += 1
            self.note("kill -9 capture")
            self.start_capture()
        elif action == "merge" and self.report.continuous:
            self.report.problems += self.history.observe(self.warehouse, self.env.source_id)
        elif action == "merge" and (self.merging is None or not self.merging.is_alive()):
            # In the background, so dumps and kills go on while Spark merges.
            self.merging = threading.Thread(target=self.merge, name="chaos-merge")
            self.merging.start()

    def merge(self) -> None:
        try:
            self._merge()
        except Exception as exc:  # noqa: BLE001 - on the merge thread: reported, not lost
            self.report.problems.append(f"merge failed: {exc!r}")

    def _merge(self) -> None:
        from dblog.merge.job import merge_source
        with self.env.store() as store:
            results = merge_source(self.spark, store, self.env.staged(), self.warehouse, self.env.source_id,
                                   bucket_rows=self.rng.choice([500, 5000, 100_000]))
        self.report.merges += 1
        self.note("merge", *[f"{r.table.split('.')[-1]}:{r.snapshot_id}" for r in results])
        self.report.problems += self.history.observe(self.warehouse, self.env.source_id)

    def continuous(self) -> None:
        """`dblog merge --continuous`, on a thread, until `stop_merging`."""
        from dblog.merge.continuous import ContinuousMerge
        lines = self.logs / "merge.log"
        try:
            with self.env.store() as store, open(lines, "a") as out:
                ContinuousMerge(self.spark, store, self.env.staged(), self.warehouse, {self.env.source_id: None},
                                every=2.0, say=lambda line: print(line, file=out, flush=True),
                                stop=self.stop_merging).run()
        except Exception as exc:  # noqa: BLE001 - on the merge thread: reported, not lost
            self.report.problems.append(f"continuous merge failed: {exc!r}")

    def resume_due(self) -> None:
        for dump in self.dumps.values():
            if dump.state == "paused" and dump.resume_at is not None and time.monotonic() >= dump.resume_at:
                self.control("resume", dump)
                dump.state, dump.resume_at = "running", None

    # -- the run -------------------------------------------------------------------------------------
    def run(self, seconds: float) -> None:
        env, rng = self.env, self.rng
        self.t0 = time.monotonic()  # set again when the writes start
        env.workload(seed=self.report.seed, rows=3000).create()
        conn = env.admin()
        create_labels("mysql" if env.kind == "mariadb" else "postgres", conn, env.namespace)
        if self.report.legacy:
            create_legacy("mysql" if env.kind == "mariadb" else "postgres", conn, env.namespace)
        conn.close()
        env.dblog("capture", "--init", "--source", env.source_id, check=True)
        self.start_capture()
        journal = env.staging.parent / "journal.json"
        add_column_at = rng.uniform(0.3, 0.6) * seconds
        self.t0 = time.monotonic()
        writer = subprocess.Popen([sys.executable, str(HERE / "writer.py"), ADMIN[env.kind], env.namespace,
                                   "--seed", str(self.report.seed), "--seconds", str(seconds), "--rate", str(WRITE_RATE),
                                   "--add-column-at", str(add_column_at), "--journal", str(journal)],
                                  env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        env.procs.append(writer)
        legacy = None
        if self.report.legacy:
            legacy = subprocess.Popen([sys.executable, str(HERE / "legacy.py"), ADMIN[env.kind], env.namespace,
                                       "--seed", str(self.report.seed), "--seconds", str(seconds)],
                                      env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            env.procs.append(legacy)
        if self.report.continuous:
            self.merging = threading.Thread(target=self.continuous, name="chaos-continuous-merge")
            self.merging.start()
        self.start_dump(["--all"], protected=True)
        # Every run also dumps labels while its column is added, and kills a dump and the capture.
        planned = sorted([(self.t0 + add_column_at - 1.0, "dump_labels"),
                          (self.t0 + rng.uniform(0.1, 0.9) * seconds, "kill_dump"),
                          (self.t0 + rng.uniform(0.1, 0.9) * seconds, "kill_capture")])
        try:
            self.act_until(writer, planned)
            if legacy is not None:
                out, err = legacy.communicate(timeout=60)
                assert legacy.returncode == 0, err
                self.report.legacy_writes = int(out.split()[-1])
            self.finish(journal)
        finally:
            self.stop_merging.set()
            if self.merging is not None:
                self.merging.join()

    def act_until(self, writer: subprocess.Popen, planned: list) -> None:
        rng = self.rng
        while writer.poll() is None:
            self.resume_due()
            if planned and time.monotonic() >= planned[0][0]:
                _, action = planned.pop(0)
                self.start_dump(["--table", "labels"], protected=True) if action == "dump_labels" else self.act(action)
                continue
            time.sleep(rng.uniform(0.2, 1.5))
            if writer.poll() is None:
                self.act(rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0])
        assert writer.returncode == 0, writer.stderr.read()

    def finish(self, journal: Path) -> None:
        for dump in self.dumps.values():
            if dump.state == "paused":
                dump.resume_at = 0
        self.resume_due()
        for dump in self.dumps.values():
            code = dump.proc.wait(timeout=600)
            if code != 0:
                tail = (self.logs / f"{dump.id}.log").read_text()[-500:]
                self.report.problems.append(f"dump {dump.id} exited {code}: {tail}")
        self.converge()
        staged = self.env.staged()
        logs = [staged.read_log(self.env.source_id, self.env.table(t)) for t in TABLES]
        self.report.events = sum(log.num_rows for log in logs)
        committed = json.loads(journal.read_text())
        self.report.transactions = len(committed)
        self.report.problems += staged_once_in_order(
            [{self.env.table(t): n for t, n in tx.items()} for tx in committed],
            transactions(logs, [self.env.table(t) for t in TABLES]))
        self.report.versions = self.history.versions


    def converge(self) -> None:
        """The writes have stopped: the merges go on as a deployment's would (a batch merge now and
        then, or the continuous one) until no repair waits and the warehouse equals the source.
        Nobody runs `dblog verify` or a repair by hand."""
        from dblog.operations.verify import compare_warehouse
        from dblog.snapshot.repair import waiting
        tables = (*TABLES, "legacy") if self.report.legacy else TABLES
        source, started = self.env.source(), time.monotonic()
        while True:
            settle(self.env)
            if self.report.continuous:
                time.sleep(4)   # two of its cycles
                self.report.problems += self.history.observe(self.warehouse, self.env.source_id)
            else:
                self.merge()
            with self.env.store() as store:
                waits = waiting(store, self.env.source_id)
            diffs = {t: compare_warehouse(source, self.warehouse, self.env.table(t)) for t in tables} if not waits else {}
            if not waits and all(d.equal for d in diffs.values()):
                self.report.converged_s = round(time.monotonic() - started, 1)
                return
            self.note("converging:", "; ".join(f"{t.split('.')[-1]} {w['reasons'][:1]} {[d['id'] for d in w['dumps']]}"
                                               for t, w in waits.items()) or "no repair waits")
            if time.monotonic() - started > CONVERGE_S:
                if waits:
                    self.report.problems.append(f"{CONVERGE_S} s after the writes stopped, repairs still wait: {waits}")
                    diffs = {t: compare_warehouse(source, self.warehouse, self.env.table(t)) for t in tables}
                self.report.problems += warehouse_differs(diffs)
                return
            time.sleep(1)


def run(kind: str, seed: int, seconds: float, spark, workdir: Path, log=print, legacy: bool = False,
        continuous: bool = False) -> Report:
    """One chaos run on `kind` (mariadb|postgres); the report lists every broken property."""
    from dblog.warehouse.tables import Warehouse
    report = Report(kind, seed, seconds, legacy=legacy, continuous=continuous)
    started = time.monotonic()
    env = make_env(kind, workdir)
    try:
        log(f"chaos {kind} seed {seed}, {seconds:g} s, {report.mode}")
        Chaos(env, random.Random(seed), report, spark, Warehouse(str(workdir / "warehouse")), log).run(seconds)
    finally:
        env.teardown()
    report.elapsed_s = round(time.monotonic() - started, 1)
    return report
