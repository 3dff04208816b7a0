"""A streamed PostgreSQL transaction, spooled on local disk until it ends.

With pgoutput's streaming (protocol 2, PostgreSQL 14+), the server sends a large transaction's
changes while it is still in progress, in blocks between other transactions' messages, and its
commit LSN, which orders its changes (their positions), only at the end; an abort of it or of
one of its subtransactions discards their changes. Without streaming the server holds such a
transaction back (spilling it to its own disk) and sends all of it after the commit, so the
capture decodes millions of rows only then, and every later commit waits behind them.

Here each block is decoded as it arrives and its events kept in the staged row format
(`staged_format.log_table`), in pieces of at most `capture.piece_rows` events, one Arrow IPC file
per piece and table (LZ4-compressed) with each row's subtransaction and index in the
transaction; nothing reaches
the staged log before the commit. At the commit each piece is read back, the rows of aborted
subtransactions dropped, positions and commit time filled in column by column, and the piece
handed to the capture as staged rows (`Transaction.staged`). Watermark writes and TRUNCATEs are
few and stay in memory.

A change's index counts the changes received before it; at the commit the rolled-back ones are
taken out of the count, so the positions are the ones the server's non-streamed replay of the
same transaction gives (it leaves them out), and a transaction read again after a crash, streamed
or not, is staged at the same positions (readers drop repeated ones). Each source's spools live
in one directory (`dblog-spool-<slot>-<server>` in the system's temporary directory, `TMPDIR`), emptied
when its stream starts: a capture killed meanwhile leaves nothing behind for long, and reads the
transaction again from its checkpoint.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..model.events import ChangeEvent, SourceNote
from ..model.positions import int_to_lsn, postgres_encode, postgres_positions
from ..model.schema import TableSchema
from ..model.staged_format import COMMIT_TS, POSITION, log_table
from .base import WATERMARK_TABLE, SourceError, Transaction
from .pgoutput import Begin, RowChange, StreamAbort, StreamCommit, StreamStart, StreamStop, Truncate

_SUBXID, _INDEX = "_spool_subxid", "_spool_index"
# LZ4: a third of the disk a transaction's rows take uncompressed, at little CPU beside the log reader.
_SPOOL_WRITE = pa.ipc.IpcWriteOptions(compression="lz4")


def spool_root(source: str) -> Path:
    """Where a source's spools live (see the module doc); `source` names the stream (its slot)."""
    return Path(tempfile.gettempdir()) / f"dblog-spool-{source}"


class SpooledTransaction:
    """The changes of one streamed transaction `xid` received so far (see the module doc)."""

    def __init__(self, xid: int, piece_rows: int, schema_of: Callable[[str], TableSchema], root: Path):
        self.xid, self.piece_rows, self._schema_of = xid, piece_rows, schema_of
        self.begin = Begin(0, None, xid)    # what its changes are decoded with: the commit is unknown yet
        self.index = 0                      # the next change's index in the transaction
        self.rows = 0                       # events spooled or buffered
        root.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{xid}-", dir=root))
        self._buffer: list[tuple[ChangeEvent, int, int]] = []     # (event, subxid, index)
        self._pieces: list[list[tuple[str, Path]]] = []            # per piece: (table, file)
        self._marks: list[tuple[ChangeEvent, int, int]] = []
        self._needs: list[tuple[SourceNote, int, int]] = []
        self._runs: list[tuple[int, int]] = []   # (first index, subxid) of each run of one subtransaction's changes
        self._aborted: set[int] = set()

    def add(self, events: list[ChangeEvent], needs: list[SourceNote], subxid: int) -> bool:
        """The events and repair needs of the change numbered `self.index`, of subtransaction
        `subxid`; whether a piece went to disk."""
        for e in events:
            (self._marks if e.table == WATERMARK_TABLE else self._buffer).append((e, subxid, self.index))
        self._needs.extend((n, subxid, self.index) for n in needs)
        if not self._runs or self._runs[-1][1] != subxid:
            self._runs.append((self.index, subxid))
        self.rows += len(events)
        self.index += 1
        if len(self._buffer) < self.piece_rows:
            return False
        self._spill()
        return True

    def abort(self, subxid: int) -> None:
        """A subtransaction rolled back: its changes are dropped at the commit."""
        self._aborted.add(subxid)

    def pieces(self, commit_lsn: int, commit_ts: dt.datetime) -> Iterator[dict[str, pa.Table]]:
        """The committed rows, piece by piece (per table, staged row format, positions in log order)."""
        self._spill()
        renumber = self._renumbering()
        for files in self._pieces:
            piece = {}
            for table, path in files:
                with pa.OSFile(str(path)) as source:   # read whole: the file goes next
                    rows = pa.ipc.open_file(source).read_all()
                path.unlink()
                if self._aborted:
                    rows = rows.filter(pc.invert(pc.is_in(rows[_SUBXID], pa.array(sorted(self._aborted), pa.int64()))))
                if rows.num_rows:
                    piece[table] = _committed(rows, renumber, commit_lsn, commit_ts)
            if piece:
                yield piece
        self._pieces = []

    def ends(self, commit_lsn: int, commit_ts: dt.datetime) -> tuple[list[ChangeEvent], list[SourceNote]]:
        """The watermark events and repair needs kept in memory, with their committed positions."""
        renumber = self._renumbering()

        def position(index: int) -> str:
            return postgres_encode(commit_lsn, int(renumber(np.array([index]))[0]))

        marks = [dataclasses.replace(e, position=position(i), commit_ts=commit_ts)
                 for e, sub, i in self._marks if sub not in self._aborted]
        needs = [dataclasses.replace(n, position=position(i)) for n, sub, i in self._needs if sub not in self._aborted]
        return marks, needs

    def _renumbering(self) -> Callable[[np.ndarray], np.ndarray]:
        """Received index -> index among the committed changes (rolled-back runs taken out)."""
        bounds = [*self._runs, (self.index, -1)]
        gone = [(start, end) for (start, sub), (end, _) in zip(bounds, bounds[1:]) if sub in self._aborted]
        starts = np.array([s for s, _ in gone], dtype=np.int64)
        before = np.concatenate([[0], np.cumsum([e - s for s, e in gone])]).astype(np.int64)
        return lambda indexes: indexes - before[np.searchsorted(starts, indexes, side="right")]

    def discard(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        self._buffer, self._pieces, self._marks, self._needs = [], [], [], []

    def _spill(self) -> None:
        if not self._buffer:
            return
        tables: dict[str, list[tuple[ChangeEvent, int, int]]] = {}
        for item in self._buffer:
            tables.setdefault(item[0].table, []).append(item)
        files: list[tuple[str, Path]] = []
        for table, items in tables.items():
            rows = log_table(self._schema_of(table), [e for e, _, _ in items])
            rows = rows.append_column(_SUBXID, pa.array([s for _, s, _ in items], pa.int64())) \
                .append_column(_INDEX, pa.array([i for _, _, i in items], pa.int64()))
            path = self._dir / f"{len(self._pieces):08d}-{len(files):06d}.arrow"
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema, options=_SPOOL_WRITE) as writer:
                writer.write_table(rows)
            files.append((table, path))
        self._pieces.append(files)
        self._buffer = []


def _committed(rows: pa.Table, renumber: Callable[[np.ndarray], np.ndarray], commit_lsn: int,
               commit_ts: dt.datetime) -> pa.Table:
    positions = postgres_positions(commit_lsn, pa.array(renumber(rows[_INDEX].to_numpy())))
    rows = rows.drop_columns([_SUBXID, _INDEX])
    at = rows.schema.get_field_index
    times = pa.repeat(pa.scalar(commit_ts, rows.schema.field(COMMIT_TS).type), rows.num_rows)
    rows = rows.set_column(at(POSITION), rows.schema.field(POSITION), positions)
    return rows.set_column(at(COMMIT_TS), rows.schema.field(COMMIT_TS), times)


class StreamedTransactions:
    """The streamed transactions of one replication connection: a spool each, from its first
    block to its commit or abort. `add_change(change, begin, index, events, needs)` decodes a
    change as the source does for any transaction."""

    def __init__(self, source: str, piece_rows: int, schema_of: Callable[[str], TableSchema],
                 add_change: Callable[..., None], root: Path):
        self.source, self.piece_rows, self._schema_of, self._add_change = source, piece_rows, schema_of, add_change
        self.spools: dict[int, SpooledTransaction] = {}
        self.open: SpooledTransaction | None = None     # the one whose stream block is being read
        self.root = root
        shutil.rmtree(root, ignore_errors=True)   # a killed predecessor's: its transactions are read again

    def change(self, change: RowChange | Truncate, subxid: int) -> Iterator[Transaction]:
        """Spool a change of the open block; each piece spooled yields an empty piece, so the capture
        knows it is inside a transaction (and reading, not stalled) while nothing is staged."""
        spool = self.open
        assert spool is not None, "a change outside a stream block is the source's own transaction's"
        events: list[ChangeEvent] = []
        needs: list[SourceNote] = []
        self._add_change(change, spool.begin, spool.index, events, needs)
        if spool.add(events, needs, subxid):
            yield Transaction.piece([])

    def handle(self, message: StreamStart | StreamStop | StreamCommit | StreamAbort,
               start: int) -> Iterator[Transaction]:
        """A stream message; a commit ending after `start` yields the transaction (`committed`)."""
        if isinstance(message, StreamStart):
            if message.first:
                if message.xid in self.spools:
                    self.spools.pop(message.xid).discard()
                self.spools[message.xid] = SpooledTransaction(message.xid, self.piece_rows, self._schema_of, self.root)
            self.open = self._spool(message.xid, "block")
        elif isinstance(message, StreamStop):
            self.open = None
        elif isinstance(message, StreamCommit):
            spool = self._spool(message.xid, "commit")
            del self.spools[message.xid]
            try:
                if message.end_lsn > start:
                    yield from committed(spool, message)
            finally:
                spool.discard()
        elif message.xid in self.spools:   # an abort of a transaction that streamed nothing has no spool
            if message.subxid == message.xid:
                self.spools.pop(message.xid).discard()
            else:
                self.spools[message.xid].abort(message.subxid)

    def discard(self) -> None:
        for spool in self.spools.values():
            spool.discard()
        self.spools, self.open = {}, None

    def _spool(self, xid: int, what: str) -> SpooledTransaction:
        spool = self.spools.get(xid)
        if spool is None:   # its first block never came: its earlier changes would be missing
            raise SourceError(f"{self.source}: logical replication sent a {what} of streamed transaction {xid} "
                              "without its first block, so its earlier changes were not received; nothing of it "
                              "is staged. The capture reads it again from its checkpoint when it restarts.")
        return spool


def committed(spool: SpooledTransaction, commit: StreamCommit) -> Iterator[Transaction]:
    """A committed streamed transaction as pieces of staged rows, the last one with its commit."""
    last: dict[str, pa.Table] = {}
    for piece in spool.pieces(commit.commit_lsn, commit.commit_ts):
        if last:
            yield Transaction.piece([], last)
        last = piece
    marks, needs = spool.ends(commit.commit_lsn, commit.commit_ts)
    yield Transaction(marks, {"lsn": int_to_lsn(commit.end_lsn)}, commit.commit_ts, needs, staged=last)
