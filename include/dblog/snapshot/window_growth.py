"""Windows that grow while the source takes no writes.

A window's size is a trade made for the source's writers: a longer window holds more of the
table's changes out of its reads, and its reads compete with the writes for longer (the chunk size
sweeps, docs/performance.md). On a source nobody writes to there is nobody to trade with, and a
window's fixed costs (its watermarks and records, a connection and a file per split, the wait for
its slowest split) are what bound a bootstrap. So while the source's own counter of rows written
shows none between one window's plan and the next but the dump's own watermarks, each window's
splits are twice the last one's, up to `DBLOG_DUMP_QUIET_CHUNK_SIZE` rows and `SPLIT_BYTES` of
Arrow data; the first write seen sends them back to the dump's chunk size. The window rule holds
at any size: growth changes how many rows a window reads, never which rows it keeps.

The rows written by others are the counter's rise less the rows the source said each of the
dump's watermarks wrote. A source whose counter is late (a PostgreSQL backend reports its writes
to `pg_stat_database` at most once a second) shows a busy source's writes in bursts, with quiet
stretches between them; there the counter must have stayed still for the source's delay
(`Source.ROWS_WRITTEN_DELAY_S`) before a window grows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

# The most Arrow data a grown split reads at once: a wide row makes a window stop growing
# before its row count does (four splits of a table of 2 KB rows would hold 800 MB at 100,000 rows).
SPLIT_BYTES = 64 << 20


@dataclass
class WindowGrowth:
    """The split rows of a dump's next range window. `delay_s`: how late the source's counter
    shows a write."""
    delay_s: float = 0.0
    rows: int | None = None           # the last window's split rows (None: none planned yet)
    _chunk: int | None = None         # the chunk size they grew from
    _start: int | None = None         # the source's counter at the first window
    _last: int | None = None          # ... at the last one
    _own: int = 0                     # rows the dump wrote since (its watermarks)
    _others_high: int = 0             # the highest count of rows others wrote since
    _busy_at: float = 0.0             # when that count last rose (or the counting began)
    _bytes_per_row: float = 0.0       # of the largest split read so far

    def split_rows(self, chunk_size: int, top: int, written: int | None, now: float | None = None) -> int:
        """Rows a split of the next window reads, given the dump's chunk size, the most a quiet
        source's splits grow to, and the source's counter of rows written now (None: the source
        keeps none, so windows keep their size). A throttle that changes the chunk size starts the
        windows over from it. `now`: a monotonic clock's time (default: time.monotonic())."""
        quiet = self._quiet(written, time.monotonic() if now is None else now)
        if not quiet or top <= chunk_size or chunk_size != self._chunk or self.rows is None:
            self.rows, self._chunk = chunk_size, chunk_size
            return chunk_size
        grown = min(top, self.rows * 2)
        if self._bytes_per_row:
            grown = min(grown, max(chunk_size, int(SPLIT_BYTES / self._bytes_per_row)))
        self.rows = grown
        return grown

    def _quiet(self, written: int | None, now: float) -> bool:
        """Whether nobody but the dump wrote for the source's delay, up to now (False when the
        source cannot tell, and at the first window)."""
        if written is None:
            return False
        if self._start is None or written < (self._last or 0):
            # the first window, or a counter that went back (a restart, a reset, a failover): start over
            self._start, self._last, self._own, self._others_high, self._busy_at = written, written, 0, 0, now
            return False
        self._last = written
        others = written - self._start - self._own
        if others > self._others_high:
            self._others_high, self._busy_at = others, now
            return False
        return now - self._busy_at >= self.delay_s

    def window_written(self, own_rows: int, largest_rows: int, largest_bytes: int) -> None:
        """A window is over: its watermarks counted `own_rows` rows written (`write_watermark`),
        and its largest split read `largest_rows` rows of `largest_bytes` bytes."""
        self._own += own_rows
        if largest_rows:
            self._bytes_per_row = max(self._bytes_per_row, largest_bytes / largest_rows)
