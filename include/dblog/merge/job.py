"""Merge one source table's staged change log and dump chunks into its warehouse table.

Under the table's ZooKeeper merge lock (merges of one table are serialized, other tables merge
in parallel), up to the capture's checkpoint position P (every event <= P is staged):

1. chunks not merged yet that are ready (`dblog.model.rules.chunk_ready`: both watermarks staged, the
   high one <= P, invariant 7) are reconciled against the staged log
   (`spark.rules.window_survivors`: Algorithm 1 steps 5-7); their watermarks' positions come from
   the watermark index (`dblog.coordination.watermark_index`), and only dumps with chunks left to merge are listed;
   a chunk whose window holds a write the log carries without rows (`dblog.coordination.unlogged`) is dropped
   whole (`dblog.model.rules.blind_window`): that write's repair re-reads its keys;
2. log events after the last merge (<= P) and the survivors become records (`records.merge_input`;
   rows dropped in a window only fill values: `records.fill_records`);
3. the key-range buckets those records fall in are read back and merged with them
   (`merge.merge_records`: per key the highest position wins);
4. the touched buckets are written anew (split when they grew too big, `rewrite`) and swapped in
   one Iceberg commit (`warehouse.commit`) that also records what was merged (`warehouse.state`).

A table's first load (nothing stored, no event staged, one dump's chained ranges) has nothing
to reconcile or rank: `first_load` writes its chunks straight into buckets, then step 4 commits.
One that came with events of the table (a load under writes) is adopted less the rows its
windows drop, committed, then its events are merged over it (`_then_its_events`): two commits.

Tombstones are dropped once no dump of the table can still stage a chunk older than them.
After the commit, each dump whose chunks were merged gets its running totals for the table
(chunks merged, their rows, rows dropped in windows) at `state.dump_merged_path`, written under
the table's merge lock (fenced), so a dump run can report its own chunks whichever merge took them.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..coordination import loaded_tables, repair_requests, unlogged, watermark_index
from ..coordination import store as paths
from ..coordination.checkpoint import checkpoint_position
from ..coordination.column_renames import of_table as renames_of
from ..coordination.store import StateStore
from ..errors import DBLogError, TransientError
from ..model.events import RepairNeed
from ..model.rules import ChunkRange, blind_window, disjoint_chunks
from ..model.staged_format import POSITION, ChunkFile, ChunkMeta, SegmentFile, data_columns, key_columns
from ..settings import settings
from ..snapshot import repair
from ..snapshot.dump import dumping, finished_chunks
from ..sources.base import WATERMARK_TABLE
from ..spark.data_sources import footer_schemas, read_files, read_with_source, spark_schema, unified
from ..stagedlog import whole_tables
from ..stagedlog.staged_log import ChunkInfo, StagedLog
from ..warehouse import types as T
from ..warehouse.adoption import COLUMNS as WAREHOUSE_FORM_COLUMNS
from ..warehouse.commit import CommitError, commit
from ..warehouse.merged_state import Bucket, TableState
from ..warehouse.tables import Warehouse, table_state
from . import bucket_merge as M
from . import change_table, column_renames, load_in_progress, rebuild
from .adopt import adopt
from .column_renames import Renaming
from .first_load import LoadChunk, first_load
from .local_delta import delta_locally
from .merge_inputs import ChunkWindow, MergeInput, chunk_windows, merge_input, window_keys, with_windows
from .merge_result import MergeResult
from .rewrite import Rewritten, rewrite
from .small_merge import LocalEvents, local_events, rewrite_locally
from .whole_table import WholeTableError, merge_whole

log = logging.getLogger("dblog.merge")


class MergeError(DBLogError, RuntimeError):
    """A merge cannot proceed; the message names the problem and the fix."""


class MergeBusy(MergeError, TransientError):
    """Another merge of the table held its lock for longer than this merge would wait."""


@dataclass
class MergeInputs:
    records: DataFrame | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    ready: dict[str, set[int]] = field(default_factory=dict)   # dump id -> chunk numbers merged now
    fill_unchanged: bool = False
    chunk_counts: dict[str, int] = field(default_factory=dict)  # learnt now: see TableState.chunk_counts
    unique: bool = False    # one record per key and nothing stored: a first load (`first_load`)
    loads: list[LoadChunk] = field(default_factory=list)   # a first load's chunks, in chunk (key) order
    general: Callable[[], MergeInput] | None = None   # ... and its records, should it take the general merge
    # A first load under writes (events of the table staged too): per chunk file, the keys its window
    # drops, for `adopt` (or why not); its events merge in a second pass.
    in_windows: Callable[[], dict[str, set[tuple]] | str] | None = None
    local: LocalEvents | None = None   # a merge small enough to run without Spark (`small_merge`)
    renaming: Renaming = field(default_factory=Renaming)   # columns renamed in its range (`column_renames`)
    unready: set[str] = field(default_factory=set)   # dumps with staged chunks still waiting for the capture

    def merge_records(self) -> tuple[DataFrame | None, bool]:
        """The records the merge rule applies, and whether it fills values events left out (a
        first load's records are composed only when asked)."""
        if self.general is not None:
            composed = self.general()
            return composed.records, composed.fill_unchanged
        return self.records, self.fill_unchanged


def _uris(staged: StagedLog, files: list[str]) -> list[str]:
    return files if staged.local else [f"{staged.root.split('://', 1)[0]}://{p}" for p in files]


def _read(spark: SparkSession, staged: StagedLog, files: list[str], schemas: list[pa.Schema] | None = None) -> DataFrame:
    """Staged files' rows; a chunk's warehouse columns (`warehouse.adoption`) are not the merge's input."""
    uris = _uris(staged, files)
    schemas = schemas if schemas is not None else footer_schemas(uris)   # (chunks: their listing read them)
    if not any(n in WAREHOUSE_FORM_COLUMNS for s in schemas for n in s.names):
        return read_files(spark, uris)
    # Read as the staged columns alone, so Spark neither merges nor reads the others; by Spark's
    # own reader where every file has their types, else by `dblog_parquet` (a type conversion).
    wanted = pa.schema([f for f in unified(schemas) if f.name not in WAREHOUSE_FORM_COLUMNS])
    same = all(s.field(f.name).type == f.type for s in schemas for f in wanted if f.name in s.names)
    return (read_files if same else read_with_source)(spark, uris, spark_schema(wanted))


def _data_columns(df: DataFrame | StructType) -> list[tuple[str, str]]:
    schema = df if isinstance(df, StructType) else df.schema
    names = set(data_columns(schema.names))
    return [(f.name, f.dataType.simpleString()) for f in schema.fields if f.name in names]


# An input's schema (position, its data columns, its key): a staged file holds the table's columns
# as they were when it was read, which is certainly after `position`: a segment's last event, a
# chunk's low watermark (a window reads its columns after LW).
Seen = tuple[str, list[tuple[str, str]], list[str]]


def _columns(state: TableState | None, seen: list[Seen], table: str,
             renaming: Renaming | None = None) -> list[tuple[str, str]]:
    """Warehouse columns from the inputs' schemas, newest last: each column takes the type of the
    newest input that has it; a type the column can be promoted to widens it in place, any other
    rebuilds the table (`_shape`, `rebuild`: no stored row is read under a type it was not
    written with). Columns the newest input lacks are dropped
    unless DBLOG_KEEP_DROPPED_COLUMNS is on (older snapshots keep them). Only inputs newer than
    what the table already holds decide: an old chunk merged late must not take a column back.
    `renaming`: columns renamed (`column_renames`): stored ones take their new names in place,
    and an input's old names are not columns of their own."""
    renaming = renaming or Renaming()
    stored = [(renaming.stored.get(c, c), t) for c, t in state.columns] if state else []
    gone = {old for chain in renaming.chains.values() for old, _ in chain} - set(renaming.chains)
    columns: dict[str, str] = dict(stored)
    # (A state without columns, a rebuild's, is composed from every input.)
    newer = [s for s in seen if state is None or not state.columns or state.log_upto is None or s[0] > state.log_upto]
    for _, found, _ in newer:
        columns.update((c, t) for c, t in found if c not in gone)
    if newer and settings().warehouse.keep_dropped_columns == "off":
        current = renaming.current({c for c, _ in newer[-1][1]})
        columns = {c: t for c, t in columns.items() if c in current}
    return list(columns.items())


def _rebuild(state: TableState | None, table: str) -> str:
    source = state.source if state else "SOURCE"
    return f"Fix: `dblog warehouse drop --source {source} --table {table}`, then `dblog dump --source {source} " \
           f"--table {table}`"


def _seen(staged: StagedLog, segments: list[str], events: DataFrame | None, ready: ReadyChunks | None) -> list[Seen]:
    """The merge's inputs' schemas, oldest first (`Seen`): the segments' as one (the newest
    footer's columns, types and key), and each
    distinct chunk schema at the latest low watermark it was read after. No file is read but
    the newest segment's footer."""
    seen: list[Seen] = []
    if segments and events is not None:
        last = staged.segment_file(segments[-1]).schema_arrow
        # Each column as the newest segment types it: a read merged across a type change may
        # widen it to a type no file has (decimal(10,2) beside decimal(10,3): decimal(11,3)).
        seen.append((SegmentFile.parse(segments[-1]).last, _data_columns(spark_schema(last)), key_columns(last)))
    newest: dict[pa.Schema, tuple[str, pa.Schema]] = {}
    for info, window in zip(ready.infos, ready.windows) if ready is not None else ():
        plain = info.schema.remove_metadata()   # each footer names its own chunk
        if plain not in newest or (window.low or "") > newest[plain][0]:
            newest[plain] = (window.low or "", info.schema)
    seen += [(low, _data_columns(spark_schema(schema)), key_columns(schema)) for low, schema in newest.values()]
    return sorted(seen, key=lambda s: s[0])


def _pending_chunks(store: StateStore, staged: StagedLog, source: str, table: str, state: TableState | None,
                    out: MergeInputs) -> dict[ChunkFile, str]:
    """Chunk files not merged yet. Only the dump directories are listed, then the files of the
    dumps that may have some left: a finished dump (its chunk count known, `dump.finished_chunks`,
    then kept in the table's state, as its ZooKeeper record may go) whose every chunk is merged
    is passed over."""
    pending = {}
    for dump_id in staged.chunk_dumps(source, table):
        count = state.chunk_counts.get(dump_id) if state is not None else None
        if count is None:
            count = finished_chunks(store, source, dump_id, table)
            if count is not None:
                out.chunk_counts[dump_id] = count
        # A number without a file (a window's split read again in a later window, a takeover
        # from an older version): such a dump never counts as merged, and is listed every time.
        if state is not None and count is not None and state.merged_below(dump_id, count):
            continue
        for path in staged.chunk_files(source, table, dump_id):
            name = ChunkFile.parse(path)
            if state is None or not state.chunk_merged(name.dump_id, name.number):
                pending[name] = path
    return pending


@dataclass
class ReadyChunks:
    """The pending chunks that are ready by the merge's position, in chunk order."""
    windows: list[ChunkWindow]
    infos: list[ChunkInfo]      # their files, in the same order
    low: str                    # the lowest LW position among them


def _ready_chunks(store: StateStore, staged: StagedLog, source: str, pending: dict[ChunkFile, str], upto: str,
                  out: MergeInputs, result: MergeResult) -> ReadyChunks | None:
    """The pending chunks ready by `upto` (None: none with rows, or none ready); chunks without
    rows count as merged."""
    infos = staged.chunk_infos(list(pending.values()))
    by_name = {ChunkFile.parse(i.path): i for i in infos}
    for name, info in by_name.items():  # a chunk without rows has nothing to wait for
        if info.meta is None:
            out.ready.setdefault(name.dump_id, set()).add(name.number)
    windows = chunk_windows(infos, lambda ids: watermark_index.positions(store, staged, source, ids))
    ready = sorted((w for w in windows if w.ready(upto) and ChunkFile(w.dump_id, w.chunk) in by_name),
                   key=lambda w: (w.dump_id, w.chunk))
    for w in ready:
        out.ready.setdefault(w.dump_id, set()).add(w.chunk)
        result.chunk_rows += w.rows
        _dump_totals(result, w.dump_id)["rows"] += w.rows
    blind_at = unlogged.intervals(store, source, result.table) if ready else []
    blind = [w for w in ready if w.low is not None and w.high is not None and blind_window(w.low, w.high, blind_at)]
    if blind:
        result.blind_chunks, result.blind_rows = len(blind), sum(w.rows for w in blind)
        ready = [w for w in ready if w not in blind]
    result.chunks = sum(len(v) for v in out.ready.values())
    for dump_id, numbers in out.ready.items():
        _dump_totals(result, dump_id)["chunks"] = len(numbers)
    out.unique = bool(ready) and disjoint_chunks([w.range() for w in ready] + _empty_ranges(infos, ready))
    # (merge_inputs adds the rest of what makes a first load)
    lows = [w.low for w in ready if w.low is not None]  # every ready window has both positions
    if not lows:
        return None
    return ReadyChunks(ready, [by_name[ChunkFile(w.dump_id, w.chunk)] for w in ready], min(lows))


def _empty_ranges(infos: list[ChunkInfo], ready: list[ChunkWindow]) -> list[ChunkRange]:
    """The key ranges of chunks staged without rows among the ready ones (a stepped split over a
    gap in the keys: `windows.plan_window`), from their footers: they hold no row, and they
    chain the ranges around them, so a first load over a gap keeps its fast path."""
    last: dict[str, int] = {}
    for w in ready:
        last[w.dump_id] = max(last.get(w.dump_id, w.chunk), w.chunk)
    metas = [ChunkMeta.of_footer(i.schema) for i in infos if i.meta is None]
    return [ChunkRange(m.dump_id, m.chunk, m.key_from, m.key_to) for m in metas
            if m is not None and m.chunk < last.get(m.dump_id, -1)]


def _dump_totals(result: MergeResult, dump_id: str) -> dict[str, int]:
    return result.dumps.setdefault(dump_id, {"chunks": 0, "rows": 0, "dropped": 0})


def _spark_inputs(spark: SparkSession, staged: StagedLog, key: list[str], columns: list[tuple[str, str]],
                  local: LocalEvents, after: str | None, upto: str) -> MergeInput:
    """A merge that `small_merge` turned down after all (its stored files): the same segments'
    events as Spark records, as the log-only path composes them."""
    events = _read(spark, staged, local.segments).where(F.col(POSITION) <= upto)
    if after is not None:
        events = events.where(F.col(POSITION) > after)
    return merge_input(M.align(events.dropDuplicates([POSITION]), columns), None, key,
                       [c for c, _ in columns], after=after)


def merge_inputs(spark: SparkSession, store: StateStore, staged: StagedLog, source: str, table: str,
                 state: TableState | None, upto: str, result: MergeResult, bucket_rows: int = 0) -> MergeInputs:
    """The records to merge: log events after the last merge and reconciled chunk rows, <= upto
    (read with pyarrow only, for `small_merge`, when `bucket_rows` is given and the merge qualifies)."""
    out = MergeInputs()
    done_upto = state.log_upto if state else None
    pending = _pending_chunks(store, staged, source, table, state, out)
    ready = None
    low = done_upto  # None: nothing merged yet, every staged event is new
    renames = [r for r in renames_of(store, source, table) if r.position <= upto]
    if not pending and not any(done_upto is None or r.position > done_upto for r in renames):
        tuned = settings().merge
        local = local_events(staged, source, table, state, done_upto, upto, tuned.local_rows, bucket_rows,
                             tuned.local_bucket_bytes)
        if local is not None:
            out.local, out.key = local, local.key
            out.columns = state.columns if state is not None else \
                _columns(None, [("", _data_columns(spark_schema(local.events.schema)), local.key)], table)
            result.newest_commit_ts, result.oldest_commit_ts = local.newest_commit_ts, local.oldest_commit_ts
            out.general = lambda: _spark_inputs(spark, staged, out.key, out.columns, local, done_upto, upto)
            return out
    if pending:
        ready = _ready_chunks(store, staged, source, pending, upto, out, result)
        if ready is not None and low is not None:
            low = min(low, ready.low)  # the windows may reach back before the last merge
        out.unready = {c.dump_id for c in pending if c.number not in out.ready.get(c.dump_id, ())}
        result.chunks_waiting = sum(1 for c in pending if c.number not in out.ready.get(c.dump_id, ()))
    # Without chunk windows to cover, only segments with events after the last merge matter.
    segments = staged.segments(source, table, low, upto) if ready is not None else \
        staged.segments(source, table, high=upto, after=done_upto)
    events = None
    if segments:
        events = _read(spark, staged, segments).where(F.col(POSITION) <= upto)
        if low is not None:
            events = events.where(F.col(POSITION) >= low)
        events = events.dropDuplicates([POSITION])  # re-staged after a crash
    if events is None and ready is None:
        if state is not None:   # a rename with no row since: the field is renamed all the same
            out.renaming = column_renames.plan([r for r in renames if done_upto is None or r.position > done_upto],
                                               [c for c, _ in state.columns], [], done_upto)
            out.key, out.columns = out.renaming.key(state.key), _columns(state, [], table, out.renaming)
        return out
    # A first load reads the chunks' schema from their footers (read when they were listed); its
    # rows only if it falls back.
    seen = _seen(staged, segments, events, ready)
    out.key = seen[-1][2]
    out.renaming = renaming = column_renames.plan(
        [r for r in renames if low is None or r.position > low], [c for c, _ in state.columns] if state else [],
        [(p, {c for c, _ in found}) for p, found, _ in seen], done_upto)
    first = out.unique and ready is not None and (state is None or state.stores_nothing) and not renaming
    out.unique = first and events is None
    out.columns = _columns(state, seen, table, renaming)

    def compose() -> MergeInput:
        chunks = None if ready is None else \
            with_windows(_read(spark, staged, [i.path for i in ready.infos], [i.schema for i in ready.infos]),
                         ready.windows)
        types = dict(out.columns)
        return merge_input(None if events is None else M.align(renaming.events(events, types), out.columns),
                           None if chunks is None else M.align(renaming.chunks(chunks, types), out.columns),
                           out.key, [c for c, _ in out.columns], after=done_upto)

    if first and ready is not None and (events is None or settings().merge.adopt_first_load != "off"):
        _first_load_inputs(out, staged, ready, events, compose, result)
    else:
        composed = compose()
        out.records, out.fill_unchanged = composed.records, composed.fill_unchanged
        result.newest_commit_ts, result.oldest_commit_ts = composed.newest_commit_ts, composed.oldest_commit_ts
    return out


def _no_events_adopted() -> str:
    """`MergeInputs.in_windows` of a rebuild: adoption refused, the general merge runs."""
    return "a rebuild replaces every file of the table in one commit"


def _first_load_inputs(out: MergeInputs, staged: StagedLog, ready: ReadyChunks, events: DataFrame | None,
                       compose: Callable[[], MergeInput], result: MergeResult) -> None:
    """A first load's chunks (`first_load`, `adopt`), its records composed only if it takes the
    general merge. With events of the table (a load under writes), the chunk files are adopted
    less the rows their windows drop and the events merged over them next (`merge_table`), or the
    general merge runs."""
    uris = _uris(staged, [i.path for i in ready.infos])
    out.loads = [LoadChunk(uri, w.high, w.rows, w.dump_id, i.schema, w.low)
                 for uri, w, i in zip(uris, ready.windows, ready.infos) if w.high]
    assert len(out.loads) == len(ready.windows), "a ready window has its HW position"
    if events is None:
        out.general = compose   # no event: no commit times to report
        return

    def in_windows() -> dict[str, set[tuple]] | str:
        keys = window_keys(events, ready.windows, out.key)
        return keys if isinstance(keys, str) else {uris[i]: found for i, found in keys.items()}

    def general() -> MergeInput:
        composed = compose()
        result.newest_commit_ts, result.oldest_commit_ts = composed.newest_commit_ts, composed.oldest_commit_ts
        return composed
    out.in_windows, out.general = in_windows, general


def merge_table(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, source: str,
                table: str, *, bucket_rows: int | None = None, lock_timeout: float | None = None) -> MergeResult:
    """Merge what the capture and the dumps staged for `table`, up to the capture's checkpoint
    (`bucket_rows`, `lock_timeout`: default the settings')."""
    tuned = settings().merge
    bucket_rows = tuned.bucket_rows if bucket_rows is None else bucket_rows
    lock_timeout = tuned.lock_timeout_seconds if lock_timeout is None else lock_timeout
    if bucket_rows < 1:
        raise MergeError(f"bucket rows must be >= 1, got {bucket_rows}")
    started = time.monotonic()
    result = MergeResult(source, table)
    try:
        lease = store.lease(paths.merge_lock(source, table), f"{socket.gethostname()}:{os.getpid()}", lock_timeout)
    except paths.LeaseTimeout as exc:
        raise MergeBusy(f"another merge of {source}/{table} holds its lock for more than {lock_timeout:.0f}s; "
                         "wait for it, or check `dblog status` for a stuck worker") from exc
    try:
        state = _merge(spark, store, staged, warehouse, result, bucket_rows, lease)
        if result.log_next:   # a first load adopted under writes: now its events, over it
            state = _then_its_events(spark, store, staged, warehouse, result, bucket_rows, lease)
        _record_changes(store, warehouse, staged, result, state)
        _ask_repairs(store, warehouse, result, state)
    finally:
        lease.release()
    result.seconds = time.monotonic() - started
    log.debug("%s/%s: %s", source, table, result)  # callers print their own summary
    return result


_SUMMED = ("commits", "commit_seconds", "survivors", "chunks", "chunk_rows", "blind_chunks", "blind_rows",
           "buckets_written")


def _then_its_events(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse,
                     result: MergeResult, bucket_rows: int, lease) -> TableState | None:
    """The second pass of a first load adopted under writes: every staged event of the table over
    it (its `log_upto` was left unset). The load's commit and this one are two snapshots: between
    them readers see the load without the rows its windows dropped and without its events. What
    the first pass counted (and recorded for its dumps) is kept, this pass's added."""
    first = {k: getattr(result, k) for k in _SUMMED}
    loaded, dumps = result.note, result.dumps
    result.log_next, result.note, result.dumps = False, "", {}
    for k in _SUMMED:
        setattr(result, k, type(first[k])())
    state = _merge(spark, store, staged, warehouse, result, bucket_rows, lease)
    for k in _SUMMED:
        setattr(result, k, getattr(result, k) + first[k])
    for dump_id, totals in dumps.items():
        later = result.dumps.get(dump_id, {})
        result.dumps[dump_id] = {k: v + later.get(k, 0) for k, v in totals.items()}
    result.note = "; ".join(filter(None, [loaded, result.note]))
    return state


def _merge(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, result: MergeResult,
           bucket_rows: int, lease) -> TableState | None:
    """Merge under the table's lock; the table's state after it (None: no table yet)."""
    source, table = result.source, result.table
    purge = not dumping(store, source, table)   # decided before chunks are listed: see module doc
    upto = checkpoint_position(store, source)
    state = warehouse.state(source, table, files=True)
    if state is None:   # dropped, or not made yet: a dump of it may be a first load again
        loaded_tables.clear(store, source, table)
    # A table with no key is synced by whole-table snapshots; one with a key only once it lost it (below).
    whole = _whole(store, staged, warehouse, result, state, upto, lease) if state is None or not state.key else None
    if whole is not None:
        return whole
    if state is not None:
        _report(result, state)
        if state.log_upto is not None and (upto is None or upto < state.log_upto):
            upto = state.log_upto
    if upto is None:
        result.note = "nothing staged yet: start the capture first"
        return state
    if _load_waits(store, staged, result, state, None):
        return state
    result.upto = upto
    inputs = merge_inputs(spark, store, staged, source, table, state, upto, result, bucket_rows)
    if inputs.unready and _load_waits(store, staged, result, state, inputs.unready):
        return state
    if inputs.records is None and inputs.general is None and not inputs.ready and not inputs.renaming:
        result.note = "up to date"
        return (_whole(store, staged, warehouse, result, state, upto, lease) if state is not None and state.key
                else None) or state
    fresh = None
    shape = _shape(state, inputs)
    if state is not None and shape is not None:
        fresh = _rebuild_inputs(spark, store, staged, state, shape, upto, result, bucket_rows)
        if fresh is None:   # the table waits for its rebuild, readable as it was
            return state
        fresh[1].renaming.stored = inputs.renaming.stored   # (a renamed field keeps its id through it)
        inputs = fresh[1]
    return _apply(spark, store, warehouse, result, state, fresh[0] if fresh else None, inputs, purge, bucket_rows,
                  lease)


def _load_waits(store: StateStore, staged: StagedLog, result: MergeResult, state: TableState | None,
                unready: set[str] | None) -> bool:
    """Whether the table's first load waits for its dump (`load_in_progress`), said in `result`;
    its chunks then stay waiting, so a continuous merge comes back for them."""
    waits = load_in_progress.in_progress(store, staged, result.source, result.table, state, unready)
    if waits is None:
        return False
    waiting = max(1, result.chunks_waiting, waits.chunks)
    vars(result).update(vars(MergeResult(result.source, result.table)))   # it merged nothing
    if state is not None:
        _report(result, state)
    result.note, result.load_waits, result.chunks_waiting = waits.note(), waits.dump_id, waiting
    return True


def _shape(state: TableState | None, inputs: MergeInputs) -> rebuild.Shape | None:
    """The shape `state`'s table is rebuilt under (`rebuild`), when its inputs changed its key or
    a column's type past what Iceberg promotes in place; None: they did not."""
    if state is None or not inputs.key:
        return None
    stored = {inputs.renaming.stored.get(c, c): t for c, t in state.columns}
    # (A table that stores no row takes a converted column in place: no stored value to mis-read.)
    types = T.converted(stored, inputs.columns) if state.rows or state.tombstones else {}
    if inputs.renaming.key(state.key) == inputs.key and not types:
        return None
    return rebuild.Shape(inputs.key, types)


def _rebuild_inputs(spark: SparkSession, store: StateStore, staged: StagedLog, state: TableState,
                    shape: rebuild.Shape, upto: str, result: MergeResult,
                    bucket_rows: int) -> tuple[rebuild.Rebuild, MergeInputs] | None:
    """The inputs of the table's rebuild under `shape` (`rebuild`); None while it waits (said; when
    nothing staged or asked for can give it, a whole-table re-read is asked for here)."""
    source, table = state.source, state.table
    planned = rebuild.plan(store, staged, state, shape, upto)
    if isinstance(planned, rebuild.Rebuild):
        result.__dict__.update(vars(MergeResult(source, table, upto=upto)))   # counted again here
        inputs = merge_inputs(spark, store, staged, source, table, planned.state, upto, result, bucket_rows)
        if not result.chunks_waiting:
            inputs.columns = inputs.columns or state.columns   # (a dump of an empty table: its columns stay)
            return planned, inputs
        text = f"{table}: {shape.change(state)}: the table is rebuilt from dump {planned.dump_id} once all its " \
               "windows passed"
    else:
        text = planned.text
        if planned.ask:
            repair_requests.request(store, source, [RepairNeed(table, f"rebuilt: {shape.change(state)}", upto)])
            text += "; a whole-table re-read is asked for now"
    log.warning("%s/%s: %s", source, table, text)
    result.__dict__.update(vars(MergeResult(source, table, upto=upto)), note=text, rebuilding=True)
    _report(result, state)
    return None


def _apply(spark: SparkSession, store: StateStore, warehouse: Warehouse, result: MergeResult, state: TableState | None,
           fresh: rebuild.Rebuild | None, inputs: MergeInputs, purge: bool, bucket_rows: int,
           lease) -> TableState | None:
    """Merge `inputs` into the table and commit. `fresh`: the table is rebuilt under a new shape
    (`rebuild`): composed on its state, every file the table had replaced, the superseded dumps
    recorded as merged."""
    source, table, upto = result.source, result.table, result.upto or ""
    base = _base(fresh.state if fresh else state, inputs, source, table)
    key, columns = base.key, base.columns
    pending = _begin(warehouse, base, state, inputs.renaming.stored)
    purge = purge and not pending.soft_deletes
    old = state if fresh is not None else None
    new = TableState(source, table, key, columns, base.buckets, log_upto=max(upto, base.log_upto or ""),
                     chunks=dict((old or base).chunks),
                     chunk_counts={**(old or base).chunk_counts, **inputs.chunk_counts}, merged_at=time.time())
    for dump_id, numbers in (fresh.superseded if fresh else {}).items():
        new.add_chunks(dump_id, numbers)
    files, touched = [], {b.id for b in old.buckets} if old else set()
    if fresh is not None and inputs.in_windows is not None:   # a rebuild replaces every file in one commit
        inputs.in_windows = _no_events_adopted
    done = _write(spark, base, pending, inputs, upto, purge, bucket_rows, result)
    if done is not None and done.log_next:   # the events are merged by a second pass (`merge_table`)
        new.log_upto, result.log_next = base.log_upto, True
    if done is not None:
        files, touched, new.buckets = done.files, touched | done.touched, done.buckets
        result.buckets_written, result.log_events, result.survivors = done.written, done.log_events, \
            done.survivors_total
    for dump_id, totals in result.dumps.items():
        totals["dropped"] = totals["rows"] - (done.survivors.get(dump_id, 0) if done is not None else 0)
    if state is None and not files:
        result.note = "nothing to merge yet"   # the table appears with its first row or tombstone
        result.blind_chunks = result.blind_rows = 0   # dropped, and counted, when a commit records them
        return state
    for dump_id, numbers in inputs.ready.items():
        new.add_chunks(dump_id, numbers)
    _unfollowed(store, result, inputs.renaming, upto)   # (before the commit: it passes the renames)
    try:
        # A merge whose lease lapsed (a long pause) must not commit: maintenance may have swept its files.
        lease.check()
        result.commit_seconds = commit(pending, files, touched, new.properties(), done.deletes if done else None,
                                       done.dropped if done else None)
        result.committed_at, result.commits, result.snapshots_expired = time.time(), 1, pending.expired
    except CommitError as exc:
        raise MergeError(f"{source}/{table}: {exc}") from exc
    _renamed(result, inputs.renaming)
    if old is not None:
        result.note = "; ".join(filter(None, [f"rebuilt ({fresh.why if fresh else ''}), replacing every row it "
                                              f"stored", result.note]))
        log.warning("%s/%s: %s", source, table, result.note)
    _record_dumps(store, lease, result)
    committed = table_state(pending.committed, source, table)   # as committed: no second catalog load
    # A table that stores something is no first load's: its dumps need not stage the warehouse form.
    loaded_tables.settle(store, source, table, bool(committed.rows or committed.tombstones))
    _report(result, committed)
    return committed


def _unfollowed(store: StateStore, result: MergeResult, renaming: Renaming, upto: str) -> None:
    """A rename the merge cannot follow (`column_renames`) re-reads the table: asked before the
    commit that passes it (a crash between repeats the merge, never loses the request)."""
    if renaming.conflicts:
        reason = "; ".join(renaming.conflicts) + ": the rows are re-read"
        log.warning("%s/%s: %s", result.source, result.table, reason)
        result.note = "; ".join(filter(None, [result.note, reason]))
        repair_requests.request(store, result.source, [RepairNeed(result.table, reason, upto)])


def _renamed(result: MergeResult, renaming: Renaming) -> None:
    """After a commit that renamed columns: said."""
    result.renamed = dict(renaming.stored)
    if renaming.stored:
        result.note = "; ".join(filter(None, [result.note, "renamed " + ", ".join(
            f"{old} to {new}" for old, new in renaming.stored.items()) + " (values kept)"]))


def _whole(store: StateStore, staged: StagedLog, warehouse: Warehouse, result: MergeResult, state: TableState | None,
           upto: str | None, lease) -> TableState | None:
    """The table after taking its newest whole-table snapshot (`whole_table`); None: none to take."""
    try:
        whole = merge_whole(staged, warehouse, result, state, upto, lease)
    except WholeTableError as exc:
        raise MergeError(str(exc)) from exc
    if whole is not None:
        _record_dumps(store, lease, result)   # (a repair's whole re-read lands with it)
        _report(result, whole)
    return whole


def _base(state: TableState | None, inputs: MergeInputs, source: str, table: str) -> TableState:
    """What the merge starts from: the table's state (a new one's: one empty bucket) with the key
    and columns of its inputs."""
    if state is not None and inputs.key and inputs.renaming.key(state.key) != inputs.key:
        raise MergeError(f"the primary key of {table} changed from {state.key} to {inputs.key}. "
                         f"{_rebuild(state, table)} to rebuild it")
    key = inputs.key or (state.key if state else [])
    columns = inputs.columns or (state.columns if state else [])
    base = state or TableState(source, table, key, columns, [Bucket(0, None)])
    base.key, base.columns = key, columns
    return base


def _begin(warehouse: Warehouse, base: TableState, state: TableState | None, renamed: dict[str, str]):
    """The merge's open transaction (`renamed`: stored columns' new names); first, the table's
    change table if it gets one (see `change_table.ensure`), and this merge's tombstones kept for
    it to read after the commit."""
    try:
        pending = warehouse.begin(base.source, base.table, base.key, base.columns, state, renamed)
    except CommitError as exc:
        raise MergeError(str(exc)) from exc
    if state is not None and state.key != base.key:   # a rebuild under a new key (`rebuild`)
        pending.tx.set_properties(**{"dblog.key": json.dumps(base.key)})  # type: ignore[attr-defined]
    if settings().warehouse.change_table(base.table):
        started = dt.datetime.now(dt.UTC)   # rows this merge writes are merged after it
        change_table.ensure(warehouse, base.source, base.table, base.columns, state.log_upto if state else None,
                            started)
        pending.keep_new_tombstones = True
    return pending


def _record_changes(store: StateStore, warehouse: Warehouse, staged: StagedLog, result: MergeResult,
                    state: TableState | None) -> None:
    """Append to the table's change table, when it has one, what the table took since the change
    table's reach (after the commit: a crash or a failure in between leaves it behind, and the
    next merge of the table, even one with nothing to merge, catches it up; see `change_table`).
    A failure here is said, not raised: the table's own commit stands."""
    if state is None or state.log_upto is None or not settings().warehouse.change_table(result.table):
        return
    try:
        committed = warehouse.load(result.source, result.table)   # (a first merge's commit is not scannable)
        changes = change_table.record(warehouse, staged, result.source, result.table, committed, state.log_upto,
                                      took_chunks=bool(result.commits and result.chunks),
                                      renames=renames_of(store, result.source, result.table))
    except Exception as exc:  # noqa: BLE001 - the merge committed; the next one catches the change table up
        log.warning("%s/%s: the change table was not appended (%s); the next merge of the table catches it up",
                    result.source, result.table, exc)
        result.note = "; ".join(filter(None, [result.note, f"change table behind: {exc}"]))
        return
    if changes is not None:
        result.changes, result.changes_after, result.changes_upto = changes.rows, changes.after, changes.upto


def _write(spark: SparkSession, base: TableState, pending, inputs: MergeInputs, upto: str, purge: bool,
           bucket_rows: int, result: MergeResult) -> Rewritten | None:
    """The merged buckets' new files: a small merge on the driver, a first load straight from its
    chunks, else by the merge rule."""
    if inputs.local is not None:
        if inputs.local.whole_bucket:
            done = rewrite_locally(base, pending, inputs.local, upto, purge)
        else:
            done = delta_locally(base, pending, inputs.local, upto, purge, settings().merge.delta_ratio, bucket_rows)
        if done is not None:
            result.note = _in_place(done, " without Spark") if done.deletes else "merged without Spark (small)"
            return done
    elif inputs.general is not None:
        done = adopt(base, pending, inputs.loads, bucket_rows, inputs.in_windows)
        if done is not None:
            result.note = f"first load: {len(done.files)} chunk file(s) adopted as data files, none rewritten"
            if done.log_next:
                gone = sum(c.rows for c in inputs.loads) - done.survivors_total
                result.note += f" ({gone} row(s) their windows drop deleted by position); its events merged over it next"
            return done
        done = None if inputs.in_windows is not None else \
            first_load(spark, base, pending, inputs.loads, purge and not pending.keep_new_tombstones, bucket_rows)
        if done is not None:
            result.note = "first load: chunks written straight into their buckets" + (
                ", on the driver (small)" if done.without_spark else "")
            return done
    records, fill_unchanged = inputs.merge_records()
    if records is None:
        return None
    done = rewrite(spark, base, pending, records, upto, purge, bucket_rows, fill_unchanged, inputs.unique)
    if done.deletes:
        result.note = _in_place(done)
    return done


def _in_place(done: Rewritten, how: str = "") -> str:
    return f"{len(done.deletes)} bucket(s) changed in place{how}: new rows beside their files, the rows they " \
           "replace named in position delete files"


def _report(result: MergeResult, state: TableState) -> None:
    result.snapshot_id, result.buckets, result.rows = state.snapshot_id, len(state.buckets), state.rows
    result.tombstones = state.tombstones


def _ask_repairs(store: StateStore, warehouse: Warehouse, result: MergeResult, state: TableState | None) -> None:
    """Rows whose values nothing proved (rules.latest) get their keys re-read by a repair dump,
    unless a repair already covers them; the result reports what still waits."""
    result.missing_rows = state.missing_rows if state else 0
    if state is not None and result.missing_rows and not result.rebuilding:   # (keys of the old key meanwhile)
        whole, covered = repair.covered(store, result.source, result.table)
        found: dict[tuple, list[str]] = {}
        if not whole:
            found = warehouse.missing_keys(result.source, result.table, [b.id for b in state.buckets if b.missing_rows])
        keys = [k for k in found if repair.key_id(k) not in covered]
        if keys:
            columns = sorted({c for k in keys for c in found[k]})
            result.repairs_requested = len(keys)
            repair_requests.request(store, result.source, [RepairNeed(
                result.table, f"values the log left out and nothing older proves ({', '.join(columns)})",
                result.upto, tuple(keys))])
    result.waiting = repair.waiting(store, result.source).get(result.table)


def _record_dumps(store: StateStore, lease, result: MergeResult) -> None:
    """Add what this merge took of each dump to the dump's totals for the table (after the commit:
    a crash in between under-counts, it never counts a chunk twice). Dumps no longer registered
    in ZooKeeper are left alone."""
    if result.blind_chunks:
        log.warning("%s/%s: %d chunk(s) (%d rows) dropped whole: a write the log holds without its rows "
                    "(statement-logged, LOAD DATA, TRUNCATE) fell inside their windows, so any of their rows may "
                    "predate it; its repair dump re-reads them", result.source, result.table, result.blind_chunks,
                    result.blind_rows)
    for dump_id, merged in result.dumps.items():
        if store.get(paths.dump_path(result.source, dump_id)) is None:
            continue
        path = paths.dump_merged_path(result.source, dump_id, result.table)
        totals = store.get(path) or {"chunks": 0, "rows": 0, "dropped": 0}
        store.fenced_put(lease, path, {k: int(totals.get(k, 0)) + merged[k] for k in ("chunks", "rows", "dropped")})


def staged_tables(staged: StagedLog, source: str) -> list[str]:
    """Every table with a staged log, staged chunks or whole-table snapshots, the watermark table aside."""
    return sorted((set(staged.tables(source)) | set(staged.chunk_tables(source))
                   | set(whole_tables.tables(staged, source))) - {WATERMARK_TABLE})


def merge_source(spark: SparkSession, store: StateStore, staged: StagedLog, warehouse: Warehouse, source: str,
                 tables: list[str] | None = None, **options) -> list[MergeResult]:
    return [merge_table(spark, store, staged, warehouse, source, t, **options)
            for t in (tables or staged_tables(staged, source))]
