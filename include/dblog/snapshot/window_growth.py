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

A source whose counter is late (PostgreSQL's statistics reach `pg_stat_database` up to a second
after a commit) may count the dump's watermarks a window late: the rows written by others are
the counter's rise less the rows the source said each watermark wrote, and only a rise of that
above the highest value it has had counts.
"""
from __future__ import annotations

from dataclasses import dataclass

# The most Arrow data a grown split reads at once: a wide row makes a window stop growing
# before its row count does (four splits of a table of 2 KB rows would hold 800 MB at 100,000 rows).
SPLIT_BYTES = 64 << 20


@dataclass
class WindowGrowth:
    """The split rows of a dump's next range window."""
    rows: int | None = None           # the last window's split rows (None: none planned yet)
    _chunk: int | None = None         # the chunk size they grew from
    _start: int | None = None         # the source's counter at the first window
    _own: int = 0                     # rows the dump wrote since (its watermarks)
    _others_high: int = 0             # the highest count of rows others wrote since
    _bytes_per_row: float = 0.0       # of the largest split read so far

    def split_rows(self, chunk_size: int, top: int, written: int | None) -> int:
        """Rows a split of the next window reads, given the dump's chunk size, the most a quiet
        source's splits grow to, and the source's counter of rows written now (None: the source
        keeps none, so windows keep their size). A throttle that changes the chunk size starts the
        windows over from it."""
        quiet = self._quiet(written)
        if not quiet or top <= chunk_size or chunk_size != self._chunk or self.rows is None:
            self.rows, self._chunk = chunk_size, chunk_size
            return chunk_size
        grown = min(top, self.rows * 2)
        if self._bytes_per_row:
            grown = min(grown, max(chunk_size, int(SPLIT_BYTES / self._bytes_per_row)))
        self.rows = grown
        return grown

    def _quiet(self, written: int | None) -> bool:
        """Whether nobody but the dump wrote since the last window was planned (False when the
        source cannot tell, and at the first window)."""
        if written is None:
            return False
        if self._start is None:
            self._start = written
            return False
        others = written - self._start - self._own
        quiet = others <= self._others_high
        self._others_high = max(self._others_high, others)
        return quiet

    def window_written(self, own_rows: int, largest_rows: int, largest_bytes: int) -> None:
        """A window is over: its watermarks counted `own_rows` rows written (`write_watermark`),
        and its largest split read `largest_rows` rows of `largest_bytes` bytes."""
        self._own += own_rows
        if largest_rows:
            self._bytes_per_row = max(self._bytes_per_row, largest_bytes / largest_rows)
