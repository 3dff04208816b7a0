"""Whole-table snapshots: how a table with no key at all is staged.

With no key there is no chunk, window or merge rule: a dump reads the table in one statement (one
consistent snapshot of it) and stages the rows in parts; a marker written last says the snapshot is
complete. The merge replaces the warehouse table's rows with the newest complete snapshot in one
commit (`merge.whole_table`); the table's log events are not staged (`sources.base.schema_for_event`).

    {source}/whole/{table}/{dump id}+{attempt}/{part:08d}.parquet   the rows, in staged types
    {source}/whole/{table}/{dump id}+{attempt}/complete.parquet     one row: parts, rows, read_at

Each run of the dump writes into a directory of its own (`attempt`), so a run resumed after a
crash never mixes its parts with the ones a dead run left, complete or not. A snapshot without its
marker is never merged. `dblog maintain` removes every complete snapshot older than the newest,
and the parts of runs whose dump no longer runs (`outdated`).
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..model.staged_format import SUFFIX
from .staged_log import StagedLog, table_dir_name, table_from_dir

MARKER = f"complete{SUFFIX}"


@dataclass(frozen=True)
class WholeTable:
    """A complete snapshot of a table: its parts, rows, and when its read began."""
    table: str
    dump_id: str
    attempt: str
    parts: list[str]
    rows: int
    read_at: dt.datetime

    @property
    def ident(self) -> str:
        """What a warehouse table records as the snapshot it holds (`TableState.whole`)."""
        return f"{self.dump_id}+{self.attempt}@{self.read_at.isoformat()}"


_SEP = "+"   # between a dump id and its attempt (a dump id never holds it: settings.DUMP_ID)


def table_dir(staged: StagedLog, source: str, table: str) -> str:
    return f"{staged.base}/{source}/whole/{table_dir_name(table)}"


def new_attempt() -> str:
    return uuid.uuid4().hex[:8]


def part_path(staged: StagedLog, source: str, table: str, dump_id: str, attempt: str, number: int) -> str:
    return f"{table_dir(staged, source, table)}/{dump_id}{_SEP}{attempt}/{number:08d}{SUFFIX}"


def write_part(staged: StagedLog, source: str, table: str, dump_id: str, attempt: str, number: int,
               rows: pa.Table) -> str:
    path = part_path(staged, source, table, dump_id, attempt, number)
    staged._atomic_write(path, rows)
    return path


def finish(staged: StagedLog, source: str, table: str, dump_id: str, attempt: str, parts: int, rows: int,
           read_at: dt.datetime) -> WholeTable:
    """Mark the snapshot complete (after its last part): from now on a merge may take it."""
    marker = pa.table({"parts": [parts], "rows": [rows], "read_at": pa.array([read_at], pa.timestamp("us", tz="UTC"))})
    staged._atomic_write(f"{table_dir(staged, source, table)}/{dump_id}{_SEP}{attempt}/{MARKER}", marker)
    return WholeTable(table, dump_id, attempt,
                      [part_path(staged, source, table, dump_id, attempt, n) for n in range(parts)], rows, read_at)


@dataclass(frozen=True)
class _Run:
    """One run's directory as listed: its snapshot once complete."""
    dump_id: str
    path: str
    files: list[pafs.FileInfo]
    snapshot: WholeTable | None


def _runs(staged: StagedLog, source: str, table: str) -> list[_Run]:
    """Every run's directory of the table, in one listing (a decision made on two listings could
    see a snapshot complete in the second that the first did not)."""
    runs = []
    for entry in _listing(staged, table_dir(staged, source, table)):
        dump_id, sep, attempt = entry.base_name.rpartition(_SEP)
        if entry.type != pafs.FileType.Directory or not sep:
            continue
        files = [e for e in _listing(staged, entry.path) if e.type == pafs.FileType.File]
        snapshot = None
        if any(f.base_name == MARKER for f in files):
            (mark,) = pq.read_table(f"{entry.path}/{MARKER}", filesystem=staged.fs).to_pylist()
            snapshot = WholeTable(table, dump_id, attempt, [f"{entry.path}/{n:08d}{SUFFIX}" for n in range(mark["parts"])],
                                  mark["rows"], mark["read_at"])
        runs.append(_Run(dump_id, entry.path, files, snapshot))
    return runs


def _order(w: WholeTable) -> tuple:
    return (w.read_at, w.dump_id, w.attempt)


def snapshots(staged: StagedLog, source: str, table: str) -> list[WholeTable]:
    """The table's complete snapshots, the oldest read first."""
    return sorted((r.snapshot for r in _runs(staged, source, table) if r.snapshot is not None), key=_order)


def newest(staged: StagedLog, source: str, table: str) -> WholeTable | None:
    found = snapshots(staged, source, table)
    return found[-1] if found else None


def tables(staged: StagedLog, source: str) -> list[str]:
    """The tables with whole-table snapshot directories."""
    return sorted(table_from_dir(e.base_name) for e in _listing(staged, f"{staged.base}/{source}/whole")
                  if e.type == pafs.FileType.Directory)


def outdated(staged: StagedLog, source: str, table: str, running: Callable[[str], bool],
             older_than: dt.datetime | None = None) -> list[pafs.FileInfo]:
    """The files maintenance removes: each complete snapshot read before the newest (or before
    `older_than`, when the table is keyed since: then the newest goes too), and each unfinished
    run of a dump that no longer runs (`running(dump id)`; a paused one runs)."""
    runs = _runs(staged, source, table)
    done = sorted((r.snapshot for r in runs if r.snapshot is not None), key=_order)
    keep = done[-1] if done and older_than is None else None
    gone = []
    for run in runs:
        if run.snapshot is None:
            if not running(run.dump_id):
                gone += run.files
        elif keep is None and older_than is not None:
            if run.snapshot.read_at < older_than:
                gone += run.files
        elif keep is not None and _order(run.snapshot) < _order(keep):
            gone += run.files
    return gone


def _listing(staged: StagedLog, directory: str) -> list[pafs.FileInfo]:
    return staged.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
