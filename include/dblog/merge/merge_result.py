"""What a merge did to one table (`MergeResult`), and the report of a `dblog merge` run that
carries those results from the spark-submit job to the Airflow task (`MergeReport`).

Kept apart from the merge itself so that a reader of the report (the Airflow task, at DAG parse
time too) loads neither Spark nor the merge.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

from ..snapshot import repair


@dataclass
class MergeResult:
    source: str
    table: str
    snapshot_id: int | None = None
    upto: str | None = None
    log_events: int = 0
    chunks: int = 0
    chunk_rows: int = 0
    survivors: int = 0
    blind_chunks: int = 0    # ready chunks dropped whole: an unlogged write fell in their window
    blind_rows: int = 0
    buckets_written: int = 0
    buckets: int = 0
    rows: int = 0
    tombstones: int = 0
    seconds: float = 0.0
    commit_seconds: float = 0.0
    note: str = ""
    dumps: dict[str, dict[str, int]] = field(default_factory=dict)  # dump id -> chunks, rows, dropped merged now
    newest_commit_ts: float | None = None   # unix time of the newest log event merged now (freshness)
    oldest_commit_ts: float | None = None   # ... and of the oldest (it waited longest to become visible)
    committed_at: float | None = None       # unix time the snapshot was committed (None: no commit)
    missing_rows: int = 0                   # warehouse rows with a value nothing proved yet (see rules.latest)
    repairs_requested: int = 0              # keys this merge asked to re-read (values it could not prove)
    waiting: dict | None = None             # repairs of this table not landed yet (repair.waiting)
    chunks_waiting: int = 0                 # staged chunks left for a later merge (their window not passed yet)
    commits: int = 0                        # snapshots committed (a continuous slice sums its merges')
    snapshots_expired: int = 0              # old snapshots the commit expired (`warehouse.history`)
    error: str | None = None                # a continuous slice's last failure of the table, if any
    rebuilding: bool = False                # its key changed: it waits for the dump that rebuilds it (`rebuild`)
    renamed: dict[str, str] = field(default_factory=dict)   # columns it renamed, old -> new (`column_renames`)
    changes: int = 0                        # rows appended to the table's change table (`change_table`)
    changes_after: int | None = None        # its snapshot before them (None: it was empty) ...
    changes_upto: int | None = None         # ... and the one holding them: the range downstream reads
    log_next: bool = False                  # a first load adopted under writes: its events merge next (`job.merge_table`)
    load_waits: str | None = None           # the dump whose first load of the table it waited for (`load_in_progress`)

    @property
    def dropped(self) -> int:
        """Chunk rows dropped in their watermark window (a newer change came through the log)."""
        return self.chunk_rows - self.survivors

    @property
    def visible_after_s(self) -> float | None:
        """How long the oldest change this merge made visible waited: its commit in the source
        until this merge's snapshot (None when it committed no log event)."""
        if self.committed_at is None or self.oldest_commit_ts is None:
            return None
        return max(0.0, self.committed_at - self.oldest_commit_ts)

    def summary(self) -> str:
        """The merge's line in a log: the CLI's and the continuous merge's. It says when the table
        is not in sync yet: a repair of it has not landed (a statement-logged write, a partial row
        image), or chunks were dropped whole (an unlogged write in their window: their repair comes)."""
        if self.load_waits and self.committed_at is None:   # nothing merged: only what it waits for
            return f"{self.source} {self.table}: {self.note}"
        waited = self.visible_after_s
        line = (f"{self.source} {self.table}: snapshot {self.snapshot_id}, {self.log_events} log events, {self.chunks} "
                f"chunks ({self.chunk_rows} rows, {self.dropped} dropped in windows), {self.buckets_written}/"
                f"{self.buckets} buckets written, {self.rows} rows, merged in {self.seconds:.1f}s (commit "
                f"{self.commit_seconds:.2f}s)" + ("" if waited is None else
                                                   f"; its oldest change waited {waited:.1f}s to be visible"))
        if self.blind_chunks:
            line += (f"; {self.blind_chunks} chunk(s) ({self.blind_rows} rows) dropped whole: a write the log holds "
                     "without rows fell in their windows")
        if self.snapshots_expired:
            line += f"; {self.snapshots_expired} old snapshot(s) expired"
        if self.waiting:
            line += f"; not in sync yet: {repair.not_landed(self.waiting)}"
        if self.missing_rows:
            line += (f"; {self.missing_rows} row(s) hold values not proven yet (null, listed in _dblog_missing), "
                     f"{self.repairs_requested} key(s) sent to repair now")
        return line + (f" [{self.note}]" if self.note else "")

    def to_json(self) -> dict:
        """The merge's row in a merge report (`dblog merge --report`, read by the Airflow task), with
        the derived figures a reader of the file cannot compute without this class."""
        return {**vars(self), "dropped": self.dropped, "visible_after_s": self.visible_after_s}

    @classmethod
    def from_json(cls, row: dict) -> MergeResult:
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


@dataclass
class MergeReport:
    """The report file of a run: each table's result, or why the run failed before it had any (the
    file then holds `{"error": ...}`, so the task can say why without reading Spark's output)."""
    results: list[MergeResult] = field(default_factory=list)
    error: str | None = None

    @property
    def failures(self) -> list[MergeResult]:
        """Tables a continuous merge kept failing on."""
        return [r for r in self.results if r.error]

    def write(self, path: str) -> None:
        data = {"error": self.error} if self.error is not None else [r.to_json() for r in self.results]
        with open(path, "w") as f:
            json.dump(data, f, default=str)

    @classmethod
    def read(cls, path: str) -> MergeReport:
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict):
            return cls(error=str(data.get("error") or ""))
        return cls([MergeResult.from_json(row) for row in data])


def failure_lines(results: list[MergeResult]) -> list[str]:
    """The `dblog: error:` lines of a continuous merge's failing tables."""
    return [f"dblog: error: the continuous merge of {r.source} {r.table} kept failing: {r.error}"
            for r in results if r.error]
