"""Watermark chunk dumps (the paper's Algorithm 1, steps 2-4), throttled and resumable.

Per window: record its plan in ZooKeeper, write a fresh low watermark, SELECT its key ranges in
key order and stage each as a chunk file with the window's watermark ids, write the high
watermark, then record progress. The log side of the algorithm (steps 5-7) runs later, over the
durable staged log (see `reconcile`), so the capture never pauses. Progress is fenced by the
table's lease, so a worker that lost its ZooKeeper session cannot record progress over its
successor's; a window it left unfinished is closed by the next worker (see `windows`).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import partial

from ..coordination import changed_tables, loaded_tables, repair_requests
from ..coordination import store as paths
from ..coordination.checkpoint import ensure_checkpoint
from ..coordination.store import Lease, StateStore
from ..faults import crash_point
from ..model.events import RepairNeed
from ..model.schema import WHOLE_TABLE, TableSchema, decode_key, encode_key, normalize_key
from ..model.staged_format import ChunkMeta, Op, absent_row, rows_table
from ..retry import reconnecting
from ..settings import settings
from ..sources.base import NoPrimaryKey, Source, SourceUnavailable
from ..stagedlog import whole_tables
from ..stagedlog.staged_log import StagedLog, StagingError
from .dump_spec import DumpError, DumpSpec, check_chunk_size, check_delay, check_parallelism, validate
from .window_growth import WindowGrowth
from .windows import SplitRead, SplitStaging, WindowPlan, WindowReader, WindowReads, plan_window, steps_next

log = logging.getLogger("dblog.dump")
RUNNING, PAUSED, CANCELLED = "running", "paused", "cancelled"
DONE, PENDING = "done", "pending"
UNREADABLE = "unreadable"  # only reported: a progress record this version cannot read (see TableProgress.load)
FAILED = "failed"  # only reported (dump_status): a table is running but no worker holds its lease
# Chunks behind the current rate: few enough to follow a throttle change within seconds, enough
# that one slow read (a reconnect, a cold page) does not swing it.
RATE_WINDOW = 5


@dataclass
class TableProgress:
    table: str
    status: str = PENDING
    # Where the next chunk starts; a dump has one of the two cursors, by its kind.
    after_key: str | None = None    # range dump: JSON of the last key staged (None: from the first key)
    list_offset: int = 0            # key-list dump: how many keys of its sorted list are staged
    upto_key: str | None = None     # range dump: JSON of the table's highest key after its first LW
    chunks: int = 0                 # chunks staged and recorded
    next_chunk: int | None = None   # number of the next chunk file (None: `chunks`); see _chunks
    rows: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    rows_per_s: float = 0.0                   # this run's average, pauses and throttle delays included
    # Added later: records written before load with these defaults.
    estimated_rows: int | None = None         # set at create_dump: key count, or the source's estimate
    recent_rows_per_s: float | None = None    # rows / working seconds of the last RATE_WINDOW chunks
    recent_chunks: list = field(default_factory=list)  # [[rows, working seconds], ...] behind it
    window: dict | None = None                # the window in flight (`windows.WindowPlan.record`)
    fallback_chunks: int = 0                  # read by the Python driver after the native reader gave up
    key: str | None = None                    # what rows are matched by, when not the primary key:
                                              # "unique index NAME (a, b)" or "key_columns (a, b)"

    @classmethod
    def load(cls, record: dict, path: str) -> TableProgress:
        """A stored progress record. One this version cannot read (written by another, with a
        field it does not know, such as an older cursor) is refused: resuming from a misread
        cursor would skip or repeat rows without a word."""
        unknown = sorted(set(record) - {f.name for f in fields(cls)})
        try:
            if unknown:
                raise TypeError(f"unknown field(s) {', '.join(unknown)}")
            return cls(**record)
        except TypeError as exc:
            dump = path.rsplit("/tables/", 1)[0]
            source, _, dump_id = dump.rsplit("/", 3)[-3:]  # …/{source}/dumps/{dump id}
            raise DumpError(f"cannot read the dump progress at {path} ({exc}): another dblog version wrote it "
                            f"and this one cannot tell where it stopped. Cancel the dump (`dblog dump cancel "
                            f"{dump_id} --source {source}`) and start a new dump of the table") from None


def read_progress(store: StateStore, source: str, dump_id: str, table: str) -> TableProgress | None:
    """A table's progress in a dump; None when the dump does not cover it (or is gone)."""
    path = paths.table_progress_path(source, dump_id, table)
    return _progress(store, source, dump_id, path, store.get(path))


def read_progress_many(store: StateStore, source: str, dump_id: str, tables: list[str]) -> dict[str, TableProgress | None]:
    """`read_progress` of each table, the reads pipelined (a dump of 1,000 tables: one round trip)."""
    wanted = {t: paths.table_progress_path(source, dump_id, t) for t in tables}
    records = store.get_many(list(wanted.values()))
    return {t: _progress(store, source, dump_id, path, records[path]) for t, path in wanted.items()}


def _progress(store: StateStore, source: str, dump_id: str, path: str, record: dict | None) -> TableProgress | None:
    if record is None:
        return None
    if "last_key" in record:  # written before the two cursors: the dump's kind says which it was
        key_list = (store.get(paths.dump_path(source, dump_id)) or {}).get("keys") is not None
        record = split_cursor(record, key_list)
    return TableProgress.load(record, path)


def chunk_numbers_below(progress: TableProgress) -> int | None:
    """Once a worker has finished its table's part of the dump (done, or stopped by a cancel),
    every chunk file of it is numbered below this, a deposed worker's late file included: its
    successor numbered its own chunks past it. None while a worker may still stage more."""
    if progress.status not in (DONE, CANCELLED):
        return None
    return progress.chunks if progress.next_chunk is None else progress.next_chunk


def finished_chunks(store: StateStore, source: str, dump_id: str, table: str) -> int | None:
    """`chunk_numbers_below` of the table's progress in the dump; None while unfinished, or when
    its record is gone (a landed repair's) or unreadable: callers then look at the files."""
    try:
        progress = read_progress(store, source, dump_id, table)
    except DumpError:
        return None
    return None if progress is None else chunk_numbers_below(progress)


def split_cursor(record: dict, key_list: bool) -> dict:
    """A record with the one `last_key` of earlier versions (a key-list offset in a key-list dump,
    else the JSON of the last key staged) in the form of the two cursors."""
    record = dict(record)
    last = record.pop("last_key")
    if last is not None:
        if key_list:
            record["list_offset"] = int(json.loads(last))
        else:
            record["after_key"] = last
    return record


def record_chunk_rate(progress: TableProgress, rows: int, seconds: float, window: int = RATE_WINDOW) -> None:
    """Fold one chunk into the current rate. `seconds` is the chunk's working time (watermarks,
    SELECT, and the staging the next read did not hide), so a pause or the throttle delay never
    dilutes it: the figure says how fast the dump reads while it reads, and an ETA adds the
    delays it knows of."""
    progress.recent_chunks = (progress.recent_chunks + [[rows, round(seconds, 4)]])[-window:]
    busy = sum(s for _, s in progress.recent_chunks)
    progress.recent_rows_per_s = round(sum(r for r, _ in progress.recent_chunks) / busy, 1) if busy > 0 else None


def create_dump(store: StateStore, source: Source, spec: DumpSpec) -> str:
    """Validate, set up the capture checkpoint, then register the dump (scope, control, per-table
    progress). Returns its id. Bad input creates nothing: no checkpoint, no slot, no dump."""
    plan = validate(source, spec)
    schemas, keys = plan.schemas, plan.keys
    dump_id = spec.dump_id or new_dump_id()
    path = paths.dump_path(source.name, dump_id)
    existing = store.get(path)
    if existing is not None and not _registered_by(store, path, spec.request):
        raise DumpError(f"dump {dump_id} already exists on {source.name}; pick another id or resume it "
                        f"with `dblog dump run {dump_id}`")
    # After validation (a first dump on a source would otherwise create the checkpoint and, on
    # PostgreSQL, a slot holding WAL for ever), before registering: the chunks' watermarks must be
    # captured, and a source that fails its preflight must leave no dump that never runs.
    ensure_checkpoint(store, source)
    # Estimates come before the first write, so a failing catalog query leaves nothing behind.
    estimates = {s.name: len(keys) if keys is not None else source.estimate_rows(s) for s in schemas}
    if existing is None:
        scope = {"id": dump_id, "source": source.name, "tables": [s.name for s in schemas],
                 "keys": None if keys is None else [json.loads(encode_key(k)) for k in keys],
                 "skipped": [asdict(s) for s in plan.skipped], "created_at": time.time(),
                 **({"reason": spec.reason} if spec.reason else {}),
                 **({"request": spec.request} if spec.request else {})}
        if not store.create_new(path, scope) and not _registered_by(store, path, spec.request):
            raise DumpError(f"dump {dump_id} already exists on {source.name}; pick another id or resume it "
                            f"with `dblog dump run {dump_id}`")
    else:   # the same request again: its registration may have stopped part-way; finish what is missing
        estimates = {t: estimates.get(t, 0) for t in existing["tables"]}
    # create_new: a retried registration keeps a control or progress an earlier try (or a running
    # table task) already wrote.
    store.create_new(paths.control_path(source.name, dump_id),
                     {"state": RUNNING, "chunk_size": spec.chunk_size, "delay_s": float(spec.delay_s),
                      "parallelism": spec.parallelism})
    for table, estimate in estimates.items():
        store.create_new(paths.table_progress_path(source.name, dump_id, table),
                         asdict(TableProgress(table, estimated_rows=estimate)))
    return dump_id


def _registered_by(store: StateStore, path: str, request: str | None) -> bool:
    """Whether the dump at `path` was registered by `request`: a retry of it, or a try of it
    registering at the same moment, is the same dump."""
    return request is not None and (store.get(path) or {}).get("request") == request


def new_dump_id(at: dt.datetime | None = None, salt: str | None = None) -> str:
    """A dump's generated id: a time (now, or the Airflow run's), then six hex digits (random, or a
    hash of `salt`, so that a retried request names the same dump)."""
    tail = hashlib.sha256(salt.encode()).hexdigest()[:6] if salt else uuid.uuid4().hex[:6]
    return (at or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S-") + tail


ACTIONS = ("pause", "resume", "cancel", "throttle")


def control_changes(action: str, chunk_size=None, delay_s=None, parallelism=None) -> dict:
    """What an action does to a dump's control node (the CLI, the control DAG and the DBLog page);
    the values are checked here, so a bad throttle is refused before ZooKeeper is reached."""
    if action not in ACTIONS:
        raise DumpError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if action == "throttle":
        if chunk_size is None and delay_s is None and parallelism is None:
            raise DumpError("throttle needs a new chunk size, delay between chunks and/or parallelism")
        if chunk_size is not None:
            check_chunk_size(chunk_size)
        if delay_s is not None:
            check_delay(delay_s)
        if parallelism is not None:
            check_parallelism(parallelism)
        return {"chunk_size": chunk_size, "delay_s": delay_s, "parallelism": parallelism}
    return {"state": {"pause": PAUSED, "resume": RUNNING, "cancel": CANCELLED}[action]}


def set_control(store: StateStore, source: str, dump_id: str, **changes) -> dict:
    changes = {k: v for k, v in changes.items() if v is not None}
    current = store.get(paths.control_path(source, dump_id))
    if current is None:
        raise DumpError(f"no dump {dump_id} on {source}; `dblog status` lists the dumps")
    if current["state"] == CANCELLED and changes.get("state") not in (None, CANCELLED):
        raise DumpError(f"dump {dump_id} was cancelled; start a new dump instead")
    if "chunk_size" in changes:
        check_chunk_size(changes["chunk_size"])
    if "delay_s" in changes:
        check_delay(changes["delay_s"])
    if "parallelism" in changes:
        check_parallelism(changes["parallelism"])
    current.update(changes)
    store.put(paths.control_path(source, dump_id), current)
    return current


class SchemaMoved(SourceUnavailable):
    """A window's read failed on a value of a column whose type changed under it: retried (the
    window closed, its splits read again after a fresh LW with the new columns)."""


class TableDump:
    """Dumps one table of one dump, window by window, under that table's lease."""

    def __init__(self, store: StateStore, source: Source, staged: StagedLog, dump_id: str, table: str,
                 on_chunk: Callable[[TableProgress, int], None] | None = None):
        self.store, self.source, self.staged = store, source, staged
        self.dump_id, self.table = dump_id, table
        self.on_chunk = on_chunk
        self.scope = store.get(paths.dump_path(source.name, dump_id))
        if self.scope is None:
            raise DumpError(f"no dump {dump_id} on {source.name}; `dblog status` lists the dumps")
        if table not in self.scope["tables"]:
            raise DumpError(f"dump {dump_id} does not cover {table}; it covers {', '.join(self.scope['tables'])}")
        self.progress_path = paths.table_progress_path(source.name, dump_id, table)
        self.control_path = paths.control_path(source.name, dump_id)
        # One watermark row per (dump, table): concurrent table dumps never write the same row.
        self.slot = hashlib.sha1(f"{dump_id}/{table}".encode()).hexdigest()
        self._changed = threading.Event()
        self._control_seen: dict | None = None
        self.reader: WindowReads = WindowReader(source)   # a big table's: see _choose_reader
        self.stage = SplitStaging(staged, dump_id, native=settings().dump.decoder == "native",
                                  soft_deletes=settings().warehouse.soft_deletes(table))
        self._started, self._rows = time.monotonic(), 0
        self._step = False   # the next window splits its keys by arithmetic (`windows.steps_next`)
        self._first_load = True   # chunks are staged in the warehouse form too (set per run: `_chunks`)
        self._grown = False   # the last window's splits grew past the chunk size (logged as it changes)
        # its split rows; None: the source cannot say whether anyone writes
        self._growth: WindowGrowth | None = WindowGrowth(source.ROWS_WRITTEN_DELAY_S)

    def run(self, lease_timeout: float | None = 0) -> TableProgress:
        try:
            lease = self.store.try_lease(f"{self.progress_path}/lock", self.source.name) if lease_timeout == 0 \
                else self.store.lease(f"{self.progress_path}/lock", self.source.name, lease_timeout)
        except paths.LeaseTimeout:
            lease = None
        if lease is None:
            raise DumpError(f"{self.table} of dump {self.dump_id} is being dumped by another worker "
                            "(or a crashed one whose ZooKeeper session has not expired yet; retry shortly)")
        self.store.watch(self.control_path, self._changed.set)
        try:
            return self._dump(lease)
        finally:
            self.reader.close()
            lease.release()

    def _control(self) -> dict:
        # Re-read only when the watch saw a change: one ZooKeeper round trip less per window.
        if self._control_seen is not None and not self._changed.is_set():
            return self._control_seen
        while True:
            self._changed.clear()
            control = self._control_seen = self.store.get(self.control_path)
            if control["state"] != PAUSED:
                return control
            log.info("%s: paused; waiting for resume", self.table)
            self._changed.wait(30)

    def _schema_after_lw(self, schema: TableSchema) -> TableSchema:
        """The table's schema read again. A change since the last window that rewrote rows without
        row events (see dblog.model.schema_changes) makes the chunks read before it stale: the
        whole table is repaired after it, as the capture does when it sees the change (on
        PostgreSQL only at the table's next row change: a quiet table's change is found here)."""
        needs = [n for n in self.source.schema_changed(schema.name, None, before=schema) if isinstance(n, RepairNeed)]
        if needs:
            repair_requests.request(self.store, self.source.name, needs)
        return self.source.table_schema(schema.name)

    def _dump(self, lease: Lease) -> TableProgress:
        try:
            # Read now, not from a cache hours old: the first window compares its columns with these.
            schema = self.source.table_schema(self.table, refresh=True)
        except NoPrimaryKey:
            if self.scope["keys"] is not None:
                raise
            return self._whole(lease)
        return self._chunks(lease, schema)

    def _chunks(self, lease: Lease, schema: TableSchema) -> TableProgress:
        record = self.store.get(self.progress_path)
        progress = TableProgress.load(record, self.progress_path)
        if progress.status == DONE:
            return progress
        keys = None
        if self.scope["keys"] is not None:
            keys = [normalize_key(decode_key(k, schema), schema) for k in self.scope["keys"]]
        if progress.status == PENDING and keys is None:
            # Rows above today's last key are inserted after now, so the log carries them; without
            # this bound a dump could chase an insert-heavy table's tail for ever.
            top = self.source.last_key(schema)
            progress.upto_key = None if top is None else encode_key(normalize_key(top, schema))
            if top is None:
                progress.status, progress.finished_at = DONE, time.time()
                self.store.fenced_put(lease, self.progress_path, asdict(progress))
                return progress
        if progress.status == RUNNING and "window" not in record:
            # Taking over from a worker of a version that recorded no window plans: it may still
            # stage the chunk it was reading. Skip that number, so its late file can never replace
            # one of ours. (A worker of this version stages only into a recorded plan's numbers,
            # which a successor never reuses: see `_close`.)
            progress.next_chunk = (progress.chunks if progress.next_chunk is None else progress.next_chunk) + 1
        self._choose_reader(progress)
        # Only a first load is adopted, so only its chunks pay for the warehouse's form (`loaded_tables`).
        self._first_load = settings().merge.adopt_first_load != "off" and \
            not loaded_tables.holds(self.store, self.source.name, self.table)
        progress.status = RUNNING
        progress.key = None if schema.key_from == "primary key" else f"{schema.key_from} ({', '.join(schema.key)})"
        progress.started_at = progress.started_at or time.time()
        self.store.fenced_put(lease, self.progress_path, asdict(progress))  # a successor sees RUNNING
        reconnect_for = settings().dump.reconnect_seconds  # then the dump fails; a re-run resumes
        while True:
            control = self._control()
            if control["state"] == CANCELLED:
                if progress.window is not None:   # what a broken window staged still lands
                    reconnecting(self.source, partial(self._close, lease, schema, progress),
                                 f"closing window {progress.window['chunk']} of {self.table}",
                                 give_up_after=reconnect_for)
                    progress.window = None
                progress.status = CANCELLED
                break
            since = time.monotonic()  # after _control(): time paused is not working time
            # A dump throttled with a delay keeps its chunk size: its user asked for less load, not more.
            window = partial(self._window, lease, schema, keys, progress, control["chunk_size"],
                             control.get("parallelism") or 1, since, grow=control["delay_s"] <= 0)
            # A source restart pauses the dump, it does not fail it; the window it broke is closed
            # with what it staged when the source is back.
            try:
                done, schema = reconnecting(self.source, window, f"window {progress.next_chunk} of {self.table}",
                                            give_up_after=reconnect_for)
            except StagingError as exc:
                # Progress stays at the last window staged whole and the lease goes with this worker,
                # so `dump_status` reports the table failed and a re-run closes the window and goes on.
                raise StagingError(f"{exc} Then resume dump {self.dump_id} with `dblog dump run {self.dump_id}` "
                                   f"(Airflow: clear its task), or cancel it (`dblog dump cancel "
                                   f"{self.dump_id}`).") from exc
            if done:
                progress.status, progress.finished_at = DONE, time.time()
                break
            if control["delay_s"] > 0:
                self._changed.wait(control["delay_s"])
        self.store.fenced_put(lease, self.progress_path, asdict(progress))
        return progress

    def _whole(self, lease: Lease) -> TableProgress:
        """A table with no key at all: one read of every row (one statement: one consistent
        snapshot, no watermark: no row of it can be matched to a log event), staged in parts of the
        chunk size in a directory of this run's own, then marked complete for the merge, which
        replaces the warehouse table with it (`stagedlog.whole_tables`). A re-run after a crash
        reads it again from the start. The read is one statement, so a pause or a throttle takes
        effect after it; a cancel stops it between parts."""
        schema = self.source.keyless_schema(self.table)
        progress = TableProgress.load(self.store.get(self.progress_path), self.progress_path)
        if progress.status == DONE:
            return progress
        progress.status, progress.key, progress.rows, progress.chunks = RUNNING, WHOLE_TABLE, 0, 0
        progress.started_at = progress.started_at or time.time()
        self.store.fenced_put(lease, self.progress_path, asdict(progress))
        attempt, read_at, since = whole_tables.new_attempt(), dt.datetime.now(dt.UTC), time.monotonic()
        reads = self.source.whole_table(schema, self._control()["chunk_size"])
        try:
            for rows in reads:
                whole_tables.write_part(self.staged, self.source.name, self.table, self.dump_id, attempt,
                                        progress.chunks, rows)
                progress.chunks, progress.rows = progress.chunks + 1, progress.rows + rows.num_rows
                record_chunk_rate(progress, rows.num_rows, time.monotonic() - since)
                since = time.monotonic()
                self.store.fenced_put(lease, self.progress_path, asdict(progress))
                if self.on_chunk is not None:
                    self.on_chunk(progress, rows.num_rows)
                if (self.store.get(self.control_path) or {}).get("state") == CANCELLED:
                    progress.status = CANCELLED
                    self.store.fenced_put(lease, self.progress_path, asdict(progress))
                    return progress
        finally:
            reads.close()   # the read's connection, at once
        if not progress.chunks:   # an empty table: a part still says which columns it has
            whole_tables.write_part(self.staged, self.source.name, self.table, self.dump_id, attempt, 0,
                                    rows_table(schema, [], []))
            progress.chunks = 1
        lease.check()   # a worker that lost the table to another marks nothing complete
        whole_tables.finish(self.staged, self.source.name, self.table, self.dump_id, attempt, progress.chunks,
                            progress.rows, read_at)
        progress.status, progress.finished_at = DONE, time.time()
        self.store.fenced_put(lease, self.progress_path, asdict(progress))
        changed_tables.mark_chunk(self.store, self.source.name, self.table)
        log.info("%s has no key: read whole, %d rows; the merge replaces its warehouse table with them", self.table,
                 progress.rows)
        return progress

    def _choose_reader(self, progress: TableProgress) -> None:
        """Spark executors read a big table's windows (see `dblog.snapshot.spark_windows`); a small
        table, whose whole dump takes less than starting Spark, and a key list are read here."""
        tuned = settings().dump
        if self.scope["keys"] is not None:
            return
        big = (progress.estimated_rows or 0) >= tuned.spark_min_rows
        if tuned.reader == "spark" or (tuned.reader == "auto" and big):
            from ..spark.session import session  # pyspark only where it is used
            from .spark_windows import SparkWindowReader
            self.reader.close()
            self.reader = SparkWindowReader(self.source, session("dblog-dump"))
            log.info("%s: windows are read on Spark executors (%s reader)", self.table, tuned.reader)

    def _window(self, lease: Lease, schema: TableSchema, keys: list[tuple] | None, progress: TableProgress,
                limit: int, parallelism: int, since: float, grow: bool = True) -> tuple[bool, TableSchema]:
        """One window (see `windows`): plan it and record the plan, LW, read and stage its splits,
        HW, record progress. Returns whether the dump is done, and the schema read with. `grow`:
        a range window's splits may grow past `limit` on a quiet source (`_split_rows`)."""
        carried = progress.window is not None
        if carried:   # left unfinished, by a crash or a failed read
            plan = self._close(lease, schema, progress)
            if plan is None:
                return False, schema
        else:
            if keys is None and grow:
                limit = self._split_rows(limit, parallelism)
            plan = self._plan(schema, keys, progress, limit, parallelism)
            if plan is None:
                return True, schema
        progress.window, progress.next_chunk = plan.record(), plan.chunk + plan.parts
        self.store.fenced_put(lease, self.progress_path, asdict(progress))  # before LW: whoever runs next closes it
        own = self.source.write_watermark(self.slot, plan.lw) or 0
        if not carried and keys is None and progress.chunks == 0 and progress.after_key is None:
            self._bound_after_first_lw(schema, progress)
        # Columns added before LW are read; a write of one inside the window drops the row anyway.
        schema = self._schema_after_lw(schema)
        reads = self._read(schema, keys, plan)
        crash_point("dump.after_staging")
        own += self.source.write_watermark(self.slot, plan.hw) or 0
        crash_point("dump.after_high_watermark")
        if self._growth is not None:
            largest = max(reads.values(), key=lambda r: r.nbytes, default=None)
            self._growth.window_written(own, largest.rows if largest else 0, largest.nbytes if largest else 0)
        # Only an open split that read nothing shows the end: a stepped window may cross a gap.
        done = not carried and keys is None and any(s.open for s in plan.splits) \
            and not sum(r.rows for r in reads.values())
        if not carried and keys is None:
            step = steps_next(schema, plan, reads, parallelism)
            if step != self._step:
                log.info("%s: windows now split the keys %s", self.table, "by arithmetic (they are dense)" if step
                         else "at boundaries from the key index (they are sparse here)")
            self._step = step
        # A plan's numbers stay its own (a late attempt of a split may still write its file), so
        # an open split that staged nothing leaves a gap; only a dump's last window, which read
        # nothing, gives its open split's number back, as no later plan exists to take it.
        self._record(lease, progress, plan, reads, since, numbers=plan.parts - done)
        return done, schema

    def _split_rows(self, chunk_size: int, parallelism: int) -> int:
        """The next range window's split rows: the chunk size, or more while the source is quiet
        (`window_growth`). A first load's window stays within a bucket's rows, the unit its chunks
        are adopted in."""
        if self._growth is None:
            return chunk_size
        top = min(settings().dump.quiet_chunk_size, settings().dump.max_chunk_size)
        if self._first_load:
            top = min(top, max(chunk_size, settings().merge.bucket_rows // parallelism))
        try:
            written = self.source.rows_written()
        except Exception as exc:  # noqa: BLE001 - a counter the source refuses only keeps the windows' size
            if self.source.transient(exc):
                raise   # the window waits for the source (`reconnecting`)
            log.warning("%s: windows keep %s rows a split: the source's count of rows written cannot be read (%s)",
                        self.table, f"{chunk_size:,}", exc)
            self._growth = None
            return chunk_size
        rows = self._growth.split_rows(chunk_size, top, written)
        if (rows > chunk_size) != self._grown:
            self._grown = rows > chunk_size
            log.info("%s: %s", self.table, f"the source takes no writes: windows grow (splits of {rows:,} rows)"
                     if self._grown else f"windows are back to the chunk size ({chunk_size:,} rows a split): the "
                     "source counted a write that was not this dump's")
        return rows

    def _bound_after_first_lw(self, schema: TableSchema, progress: TableProgress) -> None:
        """The dump's upper key bound, read again after its first LW (recorded with the window).
        The bound read at the start leaves rows above it to the log; a row inserted between then
        and the first LW would then come only from an event before the dump's first LW, which a
        rebuild from this dump leaves out (`merge/rebuild`): after the first LW, every row above
        the bound is inserted after it, so its event is kept."""
        top = self.source.last_key(schema)
        if top is not None:
            progress.upto_key = encode_key(normalize_key(top, schema))

    def _plan(self, schema: TableSchema, keys: list[tuple] | None, progress: TableProgress, limit: int,
              parallelism: int) -> WindowPlan | None:
        """The next window from the progress cursor; None when a key list is all read."""
        number = progress.chunks if progress.next_chunk is None else progress.next_chunk
        if keys is not None:
            if progress.list_offset >= len(keys):
                return None
            return WindowPlan.fresh(number, list_from=progress.list_offset,
                                    list_to=min(len(keys), progress.list_offset + limit))
        after = None if progress.after_key is None else \
            normalize_key(decode_key(json.loads(progress.after_key), schema), schema)
        upto = None if progress.upto_key is None else decode_key(json.loads(progress.upto_key), schema)
        splits = plan_window(self.source, schema, after, upto, limit, parallelism, self._step)
        if not splits:   # stepped up to the bound: done
            return None
        # The bucket a first load would put these rows in, for chunks it can adopt (`warehouse.adoption`).
        tuned = settings().merge
        if not self._first_load:
            return WindowPlan.fresh(number, splits)
        return WindowPlan.fresh(number, splits, bucket=progress.rows // tuned.bucket_rows, bucket_rows=tuned.bucket_rows)

    def _read(self, schema: TableSchema, keys: list[tuple] | None, plan: WindowPlan) -> dict[int, SplitRead]:
        """The plan's splits read and staged; a failed split fails the read once all are done."""
        if plan.splits:
            outcomes = self.reader.read(schema, plan, self.stage)
            failed = [o for o in outcomes if isinstance(o, Exception)]
            if failed:
                # Every read of the window is over: its HW now lets the splits it staged be merged
                # even if the dump is cancelled next (closing the window writes it again, harmlessly).
                try:
                    self.source.write_watermark(self.slot, plan.hw)
                except Exception as exc:  # noqa: BLE001 - the source may be what failed
                    log.info("%s: the high watermark of window %d waits for the source (%s)", self.table,
                             plan.chunk, exc)
                raise self._moved(schema, plan, failed[0]) or failed[0]
            return {r.index: r for r in outcomes if isinstance(r, SplitRead)}
        # A key-list slice; a requested key the source no longer has is staged as absent (deleted).
        batch = (keys or [])[plan.list_from:plan.list_to]
        found = self.source.select_keys(schema, batch)
        present = {normalize_key(schema.key_of_tuple(r), schema) for r in found}
        absent = [k for k in batch if k not in present]
        rows = list(found) + [absent_row(schema, k) for k in absent]
        ops = [Op.READ] * len(found) + [Op.ABSENT] * len(absent)
        self.staged.write_chunk(self.source.name, schema, plan.meta(self.dump_id, 0, None), rows, ops)
        return {0: SplitRead(0, len(rows), None)}

    def _moved(self, schema: TableSchema, plan: WindowPlan, failure: Exception) -> SchemaMoved | None:
        """A value that does not fit its column, read after the table's columns changed under the
        window (a type conversion between its schema read and its SELECT): the window is closed
        and read again with the new columns, as after a source restart (None: not that)."""
        if not isinstance(failure, (ValueError, TypeError)):   # (Arrow's conversion errors are ValueErrors)
            return None
        try:
            now = self.source.table_schema(schema.name, refresh=True)
        except Exception:  # noqa: BLE001 - the original failure is what the dump reports
            return None
        if [(c.name, c.source_type) for c in now.columns] == [(c.name, c.source_type) for c in schema.columns]:
            return None
        return SchemaMoved(f"{self.table}: its columns changed while window {plan.chunk} read it ({failure}); "
                           "the window is read again with them")

    def _close(self, lease: Lease, schema: TableSchema, progress: TableProgress) -> WindowPlan | None:
        """Close the window left unfinished: its staged splits count (its HW is written now, after
        every read of them), the others are read again in a fresh window, returned (None: none)."""
        assert progress.window is not None
        plan = WindowPlan.of(progress.window, schema)
        staged: dict[int, SplitRead] = {}
        for k in range(plan.parts):
            chunk = self.staged.staged_chunk(self.source.name, schema.name, self.dump_id, plan.chunk + k)
            if chunk is not None:   # an empty one is an inner split (bounded above): it ends at its bound
                meta, split = ChunkMeta.of(chunk), plan.splits[k] if plan.splits else None
                end = None if split is None else meta.key_to if meta is not None else encode_key(split.upto or ())
                staged[k] = SplitRead(k, chunk.num_rows, end)
        # Always, even when nothing was found: a read still running (a Spark task of the failed job,
        # a deposed worker) may stage into the plan's numbers after this listing, and its window
        # needs an HW to ever be merged.
        self.source.write_watermark(self.slot, plan.hw)
        carried = plan.carry(staged)
        log.warning("%s: window %d was left unfinished; %d of its %d split(s) were staged and count, %s",
                    self.table, plan.chunk, len(staged), plan.parts,
                    "the rest are read again" if carried else "none is read again")
        self._record(lease, progress, plan, staged, None, numbers=plan.parts, carried=carried)
        return carried

    def _record(self, lease: Lease, progress: TableProgress, plan: WindowPlan, reads: dict[int, SplitRead],
                since: float | None, numbers: int, carried: WindowPlan | None = None) -> None:
        """Record what a window staged (fenced, unless the `carried` window's plan is recorded with
        it); the cursor moves once all of it is staged. `numbers`: the chunk numbers the plan used;
        `since`: when its reads began (None: read by an earlier run, so no rate)."""
        rows = sum(r.rows for r in reads.values())
        files = sum(1 for k, r in reads.items() if r.rows or not (plan.splits and plan.splits[k].open))
        progress.chunks += files
        progress.rows += rows
        progress.fallback_chunks += sum(r.fallback for r in reads.values())
        progress.next_chunk = plan.chunk + numbers
        if carried is None:
            progress.window = None
            if plan.splits:
                progress.after_key = plan.end_after(reads)
            else:
                progress.list_offset = plan.list_to or 0
        if since is not None and files:   # a window that staged no file (the dump's end) has no rate
            record_chunk_rate(progress, rows, time.monotonic() - since)
        self._rows += rows
        progress.rows_per_s = self._rows / max(time.monotonic() - self._started, 1e-9)
        if files:   # after the files are staged: a merge that reads the mark then lists them
            changed_tables.mark_chunk(self.store, self.source.name, self.table)
        if carried is None:
            self.store.fenced_put(lease, self.progress_path, asdict(progress))
        if self.on_chunk and files:
            self.on_chunk(progress, rows)


def run_dump(store: StateStore, source: Source, staged: StagedLog, dump_id: str,
             tables: list[str] | None = None, on_chunk=None, lease_timeout: float | None = 0) -> list[TableProgress]:
    """Run (or resume after a crash) a dump's tables in turn. `lease_timeout` > 0 waits that long
    for a crashed worker's lease to expire; 0 fails at once if another worker holds it."""
    scope = store.get(paths.dump_path(source.name, dump_id))
    if scope is None:
        raise DumpError(f"no dump {dump_id} on {source.name}; `dblog status` lists the dumps")
    return [TableDump(store, source, staged, dump_id, t, on_chunk).run(lease_timeout)
            for t in (tables or scope["tables"])]


def reading(store: StateStore, source: str, dump_id: str, table: str) -> bool:
    """Whether a worker is reading `table` for the dump now (it holds the table's lease)."""
    return bool(store.lock_holders(f"{paths.table_progress_path(source, dump_id, table)}/lock"))


def dumping(store: StateStore, source: str, table: str) -> list[str]:
    """Dumps that may still stage chunks of `table`: neither done nor cancelled, or a worker still
    holds the table's lease. While one exists, the warehouse keeps the table's tombstones."""
    out = []
    for dump_id in store.children(paths.dumps_path(source)):
        if (store.get(paths.control_path(source, dump_id)) or {}).get("state") == CANCELLED \
                and not reading(store, source, dump_id, table):
            continue  # also the way out of a progress record this version cannot read
        progress = read_progress(store, source, dump_id, table)
        if progress is None:
            continue
        if reading(store, source, dump_id, table):
            out.append(dump_id)
        elif progress.status not in (DONE, CANCELLED):
            control = store.get(paths.control_path(source, dump_id)) or {}
            if control.get("state") != CANCELLED:
                out.append(dump_id)
    return out


def dump_status(store: StateStore, source: str, dump_id: str) -> dict:
    """The dump's scope, control and per-table progress; `merged` per table once a merge wrote it
    (None before). `failed` lists tables marked running whose worker is gone: it died or lost its
    ZooKeeper session (an Airflow retry or `dblog dump run ID` resumes them); the dump then
    reports FAILED, unless it is done or cancelled."""
    scope = store.get(paths.dump_path(source, dump_id)) or {}
    control = store.get(paths.control_path(source, dump_id)) or {}
    # Loaded (and so checked) as typed records, reported as their JSON form.
    try:
        progress = read_progress_many(store, source, dump_id, scope.get("tables", []))
    except DumpError as exc:  # shown where users look (status, page), not a crash of either
        return {"id": dump_id, "source": source, "state": UNREADABLE, "error": str(exc), "control": control,
                "tables": {}, "failed": [], "merged": {}, "created_at": scope.get("created_at"),
                "skipped": scope.get("skipped", []), "key_list": scope.get("keys") is not None}
    tables = {t: None if p is None else asdict(p) for t, p in progress.items()}
    statuses = {p["status"] for p in tables.values() if p}
    # Only a RUNNING record is checked: PENDING has no worker yet, DONE / CANCELLED no longer need one.
    failed = [t for t, p in tables.items() if p and p["status"] == RUNNING
              and not reading(store, source, dump_id, t)]
    overall = control.get("state", "unknown")
    if statuses == {DONE}:
        overall = DONE
    elif failed and overall != CANCELLED:
        overall = FAILED
    merged_paths = {t: paths.dump_merged_path(source, dump_id, t) for t in tables}
    found = store.get_many(list(merged_paths.values()))
    merged = {t: found[path] for t, path in merged_paths.items()}
    return {"id": dump_id, "source": source, "state": overall, "control": control, "tables": tables,
            "failed": failed, "merged": merged, "created_at": scope.get("created_at"),
            "skipped": scope.get("skipped", []),
            "key_list": scope.get("keys") is not None}
