"""Parallel watermark windows: a low watermark, several key-range reads at once, a high watermark.

The paper's rule does not care how many reads happen inside one window: every row the log
touches between LW and HW is dropped from the window's reads, whichever read found it, and the
survivors take HW's position. So a window may read `parallelism` contiguous key ranges (splits)
on connections of their own, and its rows are staged as one chunk covering all of them.

A window's splits are planned before its LW, so planning never lengthens the window. The
boundaries come from the key index alone (`Source.key_after`: a keyset query with an OFFSET that
reads only key columns); the last split is open above and bounded by a row count instead, as the
single-connection read always was. So with one split a window is exactly the classic chunk, and
a window that reads no row at all means no row is left up to the dump's bound: the dump is done.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

from .schema import TableSchema
from .sources.base import Source
from .staged import Rows


@dataclass(frozen=True)
class Split:
    """Rows with after < key <= upto in key order; the window's last split reads at most `limit`."""
    after: tuple | None          # None: from the table's first key
    upto: tuple | None           # None: no upper key (the last split of a key-list-free table)
    limit: int | None = None     # only the last split: the row count that ends it


def plan_window(source: Source, schema: TableSchema, after: tuple | None, upto: tuple | None,
                split_rows: int, parallelism: int) -> list[Split]:
    """Up to `parallelism` contiguous splits of about `split_rows` rows after `after`: each
    boundary is the key `split_rows` rows past the previous one. Fewer splits when fewer rows are
    left; always at least the last, open one."""
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


class WindowReads(Protocol):
    """Reads a window's splits: in this process (`WindowReader`) or on Spark executors
    (`dblog.spark.window_reads.SparkWindowReader`)."""

    def read(self, schema: TableSchema, splits: list[Split]) -> Rows:
        """Every split's rows, in split order (so in key order); any read failing fails the whole."""

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

    def read(self, schema: TableSchema, splits: list[Split]) -> list[tuple]:
        """Every split's rows, in split order (so in key order). If any read fails, the others
        are waited for and the first error is raised: the window is retried as a whole, and no
        read of it outlives it."""
        if len(splits) == 1:
            s = splits[0]
            return self.source.select_chunk(schema, s.after, s.limit, s.upto)
        while len(self._clones) < len(splits) - 1:
            self._clones.append(self.source.clone())
        if self._pool is None or self._workers < len(splits):  # a throttle raised the parallelism
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._workers = ThreadPoolExecutor(len(splits), thread_name_prefix="dblog-split"), len(splits)
        readers = [self.source, *self._clones]
        futures = [self._pool.submit(reader.select_chunk, schema, s.after, s.limit, s.upto)
                   for reader, s in zip(readers, splits)]
        wait(futures)
        for f in futures:
            if f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return [row for f in futures for row in f.result()]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool, self._workers = None, 0
        for clone in self._clones:
            clone.close()
        self._clones = []
