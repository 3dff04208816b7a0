"""Parallel watermark windows: a low watermark, several key-range reads at once, a high watermark.

The paper's rule does not care how many reads happen inside one window: every row the log
touches between LW and HW is dropped from the window's reads, whichever read found it, and the
survivors take HW's position. So a window may read `parallelism` contiguous key ranges (splits)
on connections (or Spark executors) of their own. Each split is staged as a chunk file of its own
by whoever read it, before HW: a chunk's rows only need to be read between its watermarks, and
staging inside the window lets a crash or a failed read keep every split that was staged.

A window is planned before its LW (`WindowPlan`, recorded in ZooKeeper with the dump's
progress): its splits, its watermark ids and the chunk numbers its splits take. A window left
unfinished (the worker died, a read failed) is closed by whoever runs next: its HW id is written
(every staged split was read before now), the staged splits count, and only the others are read
again, in a fresh window (`WindowPlan.carry`).

The boundaries come from the key index alone (`Source.key_after`: a keyset query with an OFFSET
that reads only key columns); the last split is open above and bounded by a row count instead,
as the single-connection read always was. So with one split a window is exactly the classic
chunk, and a window whose open split reads no row means no row is left up to the dump's bound.

A single integer key that the last window found dense (`steps_next`) is split by arithmetic
instead: boundaries `split_rows` key values apart, every split closed. No boundary query runs
(on InnoDB each walked `split_rows` rows of the clustered index while every connection of the
window waited: 16% of an idle 10M-row dump at four splits; docs/performance.md), and as keys are
distinct integers a split still holds at most `split_rows` rows. A sparse stretch only makes
windows smaller, and the next window goes back to the index once it sees one.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from ..faults import crash_point
from ..model.schema import TableSchema, decode_key, encode_key, normalize_key
from ..model.staged_format import ChunkMeta, Op, WarehouseForm, last_key
from ..sources.base import Source
from ..stagedlog.staged_log import StagedLog


@dataclass(frozen=True)
class Split:
    """Rows with after < key <= upto in key order; the window's last split reads at most `limit`."""
    after: tuple | None          # None: from the table's first key
    upto: tuple | None           # None: no upper key (the last split of a key-list-free table)
    limit: int | None = None     # only the last split: the row count that ends it

    @property
    def open(self) -> bool:
        """The split whose end is a row count, not a key: where the window ends is what it read."""
        return self.limit is not None


# A window that found at least this share of its integer key span present: the next one steps.
# Stepping spares (parallelism - 1) boundary queries a window and makes a window that finds a
# share d of its keys d times its size. Measured on MariaDB (10M rows, 20,000-row splits), the
# queries cost ~15 ms a window of four splits and ~5 ms of two against ~8 ms of watermarks and
# records a window: a window a quarter smaller still comes out even at two splits.
DENSE = 0.75


def plan_window(source: Source, schema: TableSchema, after: tuple | None, upto: tuple | None,
                split_rows: int, parallelism: int, step: bool = False) -> list[Split]:
    """Up to `parallelism` contiguous splits of about `split_rows` rows after `after`: each
    boundary is the key `split_rows` rows past the previous one. Fewer splits when fewer rows are
    left; always at least the last, open one.

    With `step` (`steps_next` said so), the splits are `split_rows` key values apart up to
    `upto`, all closed; none at all once `after` has reached `upto`, as nothing is left to read."""
    if step and after is not None and upto is not None:
        stepped: list[Split] = []
        start = after[0]
        while len(stepped) < parallelism and start < upto[0]:
            end = min(start + split_rows, upto[0])
            stepped.append(Split((start,), (end,)))
            start = end
        return stepped
    splits: list[Split] = []
    start = after
    for _ in range(parallelism - 1):
        boundary = source.key_after(schema, start, split_rows, upto)
        if boundary is None:
            break
        splits.append(Split(start, boundary))
        start = boundary
    splits.append(Split(start, upto, split_rows))
    return splits


@dataclass(frozen=True)
class SplitRead:
    """What staging one split gave: its rows and the key it ends at (JSON; None: it read no row
    and is open, so it ends nowhere yet); `fallback`: the native reader gave up on it, so the
    Python driver read it (same values, slower: counted in the table's progress)."""
    index: int
    rows: int
    key_to: str | None
    fallback: bool = False
    nbytes: int = 0   # its rows' Arrow size (`window_growth` stops growing splits of wide rows)


@dataclass(frozen=True)
class WindowPlan:
    """A window as recorded before its LW. Split k (or the one key-list slice) is staged as chunk
    `chunk + k`; those numbers are the plan's alone, so nothing else ever writes those files."""
    chunk: int
    lw: str
    hw: str
    splits: tuple[Split, ...] = ()
    end: str | None = None          # carried plans: the cursor once staged (the open split was staged before)
    list_from: int | None = None    # a key-list window: the slice [list_from, list_to) of the dump's keys
    list_to: int | None = None
    bucket: int | None = None       # a range window: the warehouse bucket its chunks are written for,
    bucket_rows: int | None = None  # ... of buckets this many rows (`warehouse.adoption`)

    @classmethod
    def fresh(cls, chunk: int, splits=(), **kw) -> WindowPlan:
        return cls(chunk, str(uuid.uuid4()), str(uuid.uuid4()), tuple(splits), **kw)

    @property
    def parts(self) -> int:
        """How many chunk numbers the plan takes."""
        return len(self.splits) if self.splits else 1

    def meta(self, dump_id: str, index: int, key_to: str | None) -> ChunkMeta:
        """Split `index`'s chunk metadata (a key-list slice's for a key-list plan)."""
        now = dt.datetime.now(dt.UTC)
        if not self.splits:
            return ChunkMeta(dump_id, self.chunk, self.lw, self.hw, now, list_from=self.list_from, list_to=self.list_to)
        after = self.splits[index].after
        return ChunkMeta(dump_id, self.chunk + index, self.lw, self.hw, now,
                         key_from=None if after is None else encode_key(after), key_to=key_to)

    def end_after(self, reads: dict[int, SplitRead]) -> str | None:
        """The range cursor once every split is staged (`reads`: each split's)."""
        if self.end is not None:
            return self.end
        opened = next((k for k, s in enumerate(self.splits) if s.open), None)
        if opened is None:   # stepped: every split is closed, so the window ends at the last bound
            return _key_json(self.splits[-1].upto)
        if reads[opened].key_to is not None:
            return reads[opened].key_to
        after = self.splits[opened].after   # the open split read nothing: the window ends below it
        return None if after is None else encode_key(after)

    def carry(self, staged: dict[int, SplitRead]) -> WindowPlan | None:
        """The window that reads what this one left unstaged (`staged`: the splits it did stage),
        with fresh watermarks and numbers past this one's; None when nothing is left."""
        left = tuple(s for k, s in enumerate(self.splits) if k not in staged)
        if (not left) if self.splits else bool(staged):
            return None
        end = self.end
        if end is None and self.splits and not any(s.open for s in left):
            end = self.end_after(staged)
        return WindowPlan.fresh(self.chunk + self.parts, left, end=end, list_from=self.list_from,
                                list_to=self.list_to, bucket=self.bucket, bucket_rows=self.bucket_rows)

    def record(self) -> dict:
        return {"chunk": self.chunk, "lw": self.lw, "hw": self.hw, "end": self.end,
                "list_from": self.list_from, "list_to": self.list_to,
                "bucket": self.bucket, "bucket_rows": self.bucket_rows,
                "splits": [[_key_json(s.after), _key_json(s.upto), s.limit] for s in self.splits]}

    @classmethod
    def of(cls, record: dict, schema: TableSchema) -> WindowPlan:
        def key(text):
            return None if text is None else normalize_key(decode_key(json.loads(text), schema), schema)
        splits = tuple(Split(key(a), key(u), limit) for a, u, limit in record["splits"])
        return cls(record["chunk"], record["lw"], record["hw"], splits, record.get("end"),
                   record.get("list_from"), record.get("list_to"), record.get("bucket"), record.get("bucket_rows"))


def steps_next(schema: TableSchema, plan: WindowPlan, reads: dict[int, SplitRead], parallelism: int) -> bool:
    """Whether the window after `plan` (a range window that staged `reads`) splits its keys by
    arithmetic: the key is one integer column, it reads several splits, and this window found
    at least DENSE of the key values it covered present. The first window, which starts below the
    first key, cannot tell, so it is planned from the index."""
    if parallelism < 2 or len(schema.key) != 1 or not pa.types.is_integer(schema.column(schema.key[0]).arrow_type):
        return False
    start, end = plan.splits[0].after, plan.end_after(reads)
    if start is None or end is None:
        return False
    span = json.loads(end)[0] - start[0]
    return span > 0 and sum(r.rows for r in reads.values()) >= DENSE * span


def _key_json(key: tuple | None) -> str | None:
    return None if key is None else encode_key(key)


@dataclass(frozen=True)
class SplitStaging:
    """Reads one split of a plan and stages it as its chunk file (in the dump's process or a
    Spark executor: it travels pickled, the source without its connection). An open split that
    read no row stages nothing: the window ends below it.

    A range window planned with a bucket (a dump of a table the warehouse does not hold yet:
    `coordination.loaded_tables`) stages its chunks in the warehouse's form too
    (`warehouse.adoption`), so a first load can adopt them as data files: its rows take the source's log head read right after
    the split (after its LW, before its HW: inside the window, as the merge rule asks)."""
    staged: StagedLog
    dump_id: str
    native: bool = True  # decode natively where exact (DBLOG_DUMP_DECODER)
    soft_deletes: bool = False   # the table keeps deleted rows (its data files have `_dblog_deleted`)

    def __call__(self, source: Source, schema: TableSchema, plan: WindowPlan, index: int) -> SplitRead:
        split, fallbacks = plan.splits[index], source.fallbacks
        rows = source.select_chunk_table(schema, split.after, split.limit, split.upto, self.native)
        fallback = source.fallbacks > fallbacks
        crash_point("dump.split_read")
        if split.open and not rows.num_rows:
            return SplitRead(index, 0, None, fallback)
        key_to = encode_key(last_key(schema, rows)) if split.open else _key_json(split.upto)
        self.staged.write_chunk(source.name, schema, plan.meta(self.dump_id, index, key_to), rows,
                                Op.READ, shape=self._shape(source, plan))
        crash_point("dump.split_staged")
        return SplitRead(index, len(rows), key_to, fallback, rows.nbytes)

    def _shape(self, source: Source, plan: WindowPlan):
        """The chunk's warehouse form, when its window has a bucket and the source says its log head
        (without one the chunk is staged as ever, and a first load rewrites it)."""
        if plan.bucket is None or plan.bucket_rows is None:
            return None
        try:
            position = source.head()["position"]
        except Exception:  # noqa: BLE001 - a head the source will not give only costs the adoption
            return None
        from ..warehouse.adoption import warehouse_form  # (pyiceberg's types: only where a dump stages)
        form = WarehouseForm(plan.bucket, plan.bucket_rows, position)
        return lambda chunk: warehouse_form(chunk, form, self.soft_deletes)


class WindowReads(Protocol):
    """Reads and stages a window's splits: in this process (`WindowReader`) or on Spark
    executors (`dblog.snapshot.spark_windows.SparkWindowReader`)."""

    def read(self, schema: TableSchema, plan: WindowPlan, stage: SplitStaging) -> list[SplitRead | Exception]:
        """Each split's outcome, in split order: what it staged, or why it failed. A reader that
        cannot tell (a failed Spark job) raises; the window is then closed from what was staged."""

    def close(self) -> None:
        """Let go of what the reads held (connections, threads)."""


class WindowReader:
    """Reads a window's splits at once: the first on the source's own connection, each other on
    a clone with a connection of its own (kept for the next window)."""

    def __init__(self, source: Source):
        self.source = source
        self._clones: list[Source] = []
        self._pool: ThreadPoolExecutor | None = None
        self._workers = 0

    def read(self, schema: TableSchema, plan: WindowPlan, stage: SplitStaging) -> list[SplitRead | Exception]:
        """Every split's outcome; all are waited for, so no read of the window outlives it."""
        n = len(plan.splits)
        if n == 1:
            return [_outcome(lambda: stage(self.source, schema, plan, 0))]
        while len(self._clones) < n - 1:
            self._clones.append(self.source.clone())
        if self._pool is None or self._workers < n:  # a throttle raised the parallelism
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._workers = ThreadPoolExecutor(n, thread_name_prefix="dblog-split"), n
        readers = [self.source, *self._clones]
        futures = [self._pool.submit(stage, reader, schema, plan, k) for k, reader in enumerate(readers[:n])]
        wait(futures)
        return [f.exception() or f.result() for f in futures]  # type: ignore[misc]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool, self._workers = None, 0
        for clone in self._clones:
            clone.close()
        self._clones = []


def _outcome(read) -> SplitRead | Exception:
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - the dump decides what a failure means
        return exc
