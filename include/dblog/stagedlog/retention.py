"""Which staged files `dblog maintain` may remove or rewrite: the rules, as pure functions.

`staged_maintain` gathers what they need (a listing, ZooKeeper's dumps, the warehouse's merge
state) and carries the plan out. Per table, segments are taken in position order, only those a
reader lists (`staged.hidden_segments` leaves out the ones within another's range):

* **Retention** (`plan`): a segment goes when its last position is before the table's horizon
  and its newest change was committed before the cutoff, and every segment before it goes too.
  So the retained log is one stretch and the first position of its oldest segment is the one
  bound of `dblog export --from` (`export.export` refuses anything before it). The newest segment
  always stays, so the bound stays known.
  - The horizon of a table is the lowest of: what its warehouse table has merged
    (`TableState.log_upto`; no warehouse table: nothing merged, nothing goes), the capture's
    checkpoint, and the LW position of every staged chunk of the table that stays. A merge reads
    back to the LW of the chunks it reconciles and an export reconciles every staged chunk, so
    no staged chunk's window ever loses an event.
  - The watermark table is never merged: its horizon is the checkpoint and the LW position of
    every staged chunk of any table that stays, so each chunk keeps its two watermarks.
  - The cutoff is now minus the window; for the tables of a dump that may still stage chunks
    (running, paused, or failed and resumable) and for the watermark table, it is at most an hour
    (`SKEW_S`) before the dump was created: the chunk being read has its LW staged before its file.
  - A segment's age is its newest `_commit_ts` (its footer's statistics; its file time when it
    has none), not its file time: a compaction writes a new file of old changes, and the window
    is the one users think in, changes committed in the last N days.
* **Dumps** (`plan`): a finished dump (done, cancelled or failed, no worker holding a lease) last
  active before the window whose every staged chunk is merged goes, chunk files and ZooKeeper
  nodes, once the log before its chunks goes too: while a table's retained log starts at or
  before one of its chunks' HW, an export from there includes that chunk, so the dump stays and,
  as any staged chunk, holds the log from its LW (the two rules are applied to a fixpoint).
  Chunk directories ZooKeeper no longer knows (a landed repair the capture dropped, a removal
  cut short) count as finished dumps last active at their newest file's time.
* **Shared segments** (`whole_shared`): a shared file's members go together or not at all, so a
  table keeps its segments from the first one that is, or hides, a member of a shared file
  another table still keeps (files are never rewritten).
* **Compaction** (`compaction_groups`): runs of consecutive segments smaller than the target,
  all at or before the checkpoint (the capture is done with them), become one segment holding
  their union, at least `min_segments` (one, for a run holding a member of a shared segment:
  each run moves them into their tables' own segments) and about the target bytes at a time. The inputs stay,
  hidden behind it, for readers that listed them before (a merge's Spark job reads files long
  after it listed them), and go once the compacted file is older than the grace (`replaced`).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.staged_format import SegmentFile
from ..sources.base import WATERMARK_TABLE
from .staged_log import StagedFile, hidden_paths, parse_member

SKEW_S = 3600.0  # how far a source's commit clock may be behind the clock that stamped a dump's creation


@dataclass(frozen=True)
class Segment:
    table: str
    path: str
    name: SegmentFile
    size: int = 0
    mtime: float = 0.0     # when its file was written (the grace of what it replaced counts from it)

    @classmethod
    def of(cls, f: StagedFile) -> Segment:
        return cls(f.table, f.path, SegmentFile.parse(f.path), f.size, f.mtime)


@dataclass(frozen=True)
class StagedChunk:
    table: str
    dump_id: str
    path: str
    size: int
    mtime: float
    low: str | None        # its LW and HW positions; None: not staged (yet), or a chunk without rows
    high: str | None
    merged: bool           # the table's warehouse state records it merged


@dataclass(frozen=True)
class DumpLife:
    """What decides whether a dump's files may go."""
    dump_id: str
    tables: tuple[str, ...]
    finished: bool         # done, cancelled or failed, and no worker holds a table's lease
    may_stage: bool        # a worker could stage a chunk now or after a resume
    created_at: float
    last_active: float
    registered: bool = True  # False: chunk files of a dump ZooKeeper no longer knows


@dataclass(frozen=True)
class TableLog:
    table: str
    segments: tuple[Segment, ...]   # every listed segment of the table, hidden ones too
    merged_upto: str | None = None  # the warehouse table's `log_upto`


@dataclass
class Snapshot:
    """A source's staged log as the rules see it."""
    now: float
    window: float
    checkpoint: str | None
    logs: dict[str, TableLog]
    chunks: list[StagedChunk] = field(default_factory=list)
    dumps: list[DumpLife] = field(default_factory=list)
    remove_dumps: bool = True       # False (some tables only): every dump stays, and holds the log
    shared: dict[str, frozenset[str]] = field(default_factory=dict)   # shared file -> all its members' paths


@dataclass
class RetentionPlan:
    segments: list[Segment]               # to remove, with the hidden segments within them
    dumps: list[DumpLife]                 # to remove, with their chunk files
    chunk_files: list[StagedChunk]
    retained: dict[str, list[Segment]]    # per table, the listed segments that stay, in order
    unmerged: list[str]                   # finished dumps past the window that stay: chunks not merged
    held: list[str]                       # ... that stay while the log before their chunks stays
    unfinished: list[str] = field(default_factory=list)  # dumps older than the window that may still stage

    @property
    def oldest(self) -> dict[str, str]:
        """Per table, the first position the retained log holds: `export --from`'s bound."""
        return {t: kept[0].name.first for t, kept in self.retained.items() if kept}

    def watermarks_removed_upto(self) -> str | None:
        """The last position removed from the watermark table's log, None when nothing is: no
        chunk that stays, nor one a dump may still stage, needs a watermark at or before it (an
        index of watermark positions may drop those)."""
        gone = [s.name.last for s in self.segments if s.table == WATERMARK_TABLE]
        return max(gone) if gone else None


class Listing:
    """A table's segments as readers list them: the visible ones in position order, and the
    hidden ones (`staged.hidden_segments`) each within a visible one."""

    def __init__(self, segments: tuple[Segment, ...] | list[Segment]):
        hidden = hidden_paths({s.path: s.name for s in segments})
        self.shown = sorted((s for s in segments if s.path not in hidden), key=lambda s: (s.name.first, s.name.last))
        self.hidden = [s for s in segments if s.path in hidden]
        self._firsts = [s.name.first for s in self.shown]

    def container(self, segment: Segment) -> Segment | None:
        """The visible segment whose range holds `segment`'s (visible ones never nest, so it is
        the last one starting at or before it)."""
        i = bisect_right(self._firsts, segment.name.first) - 1
        return self.shown[i] if i >= 0 and segment.name.within(self.shown[i].name) else None


def horizon(log: TableLog, checkpoint: str | None, staying: list[StagedChunk]) -> str | None:
    """Segments ending before this may go (see the module doc); None: none may."""
    if checkpoint is None:
        return None
    if log.table == WATERMARK_TABLE:
        return min([checkpoint, *(c.low for c in staying if c.low is not None)])
    if log.merged_upto is None:
        return None
    return min([log.merged_upto, checkpoint, *(c.low for c in staying if c.table == log.table and c.low is not None)])


def cutoff(table: str, now: float, window: float, dumps: list[DumpLife]) -> float:
    """Segments whose newest change was committed before this (unix time) are old enough to go."""
    guarded = [d.created_at - SKEW_S for d in dumps if d.may_stage and (table == WATERMARK_TABLE or table in d.tables)]
    return min([now - window, *guarded])


def _cut(log: TableLog, shown: list[Segment], snap: Snapshot, staying: list[StagedChunk],
         newest_commit: Callable[[Segment], float]) -> int:
    """How many of the table's visible segments, from the oldest, go."""
    bound = horizon(log, snap.checkpoint, staying)
    before = cutoff(log.table, snap.now, snap.window, snap.dumps)
    n = 0
    while bound is not None and n < len(shown) - 1 and shown[n].name.last < bound and newest_commit(shown[n]) < before:
        n += 1
    return n


def plan(snap: Snapshot, newest_commit: Callable[[Segment], float]) -> RetentionPlan:
    """What retention removes (see the module doc). `newest_commit`: a segment's age, as the unix
    time of its newest change (asked only of segments the other rules would let go)."""
    by_dump: dict[str, list[StagedChunk]] = {}
    for c in snap.chunks:
        by_dump.setdefault(c.dump_id, []).append(c)
    past = [d.dump_id for d in snap.dumps
            if snap.remove_dumps and d.finished and snap.now - d.last_active > snap.window]
    merged = {d for d in past if all(c.merged for c in by_dump.get(d, []))}
    listings = {t: Listing(log.segments) for t, log in snap.logs.items()}
    expired = set(merged)
    while True:
        staying = [c for c in snap.chunks if c.dump_id not in expired]
        cuts = whole_shared({t: _cut(log, listings[t].shown, snap, staying, newest_commit)
                             for t, log in snap.logs.items()}, listings, snap.shared)
        oldest = {t: listings[t].shown[n].name.first for t, n in cuts.items() if listings[t].shown}
        held = {c.dump_id for c in snap.chunks if c.dump_id in expired and c.high is not None
                and c.table in oldest and c.high >= oldest[c.table]}
        if not held:
            break
        expired -= held
    removed = [s for t, n in cuts.items() for s in _with_hidden(listings[t], listings[t].shown[:n])]
    return RetentionPlan(removed, [d for d in snap.dumps if d.dump_id in expired],
                         [c for c in snap.chunks if c.dump_id in expired],
                         {t: listings[t].shown[n:] for t, n in cuts.items()},
                         unmerged=sorted(set(past) - merged), held=sorted(merged - expired),
                         unfinished=sorted(d.dump_id for d in snap.dumps
                                           if d.may_stage and snap.now - d.created_at > snap.window))


def whole_shared(cuts: dict[str, int], listings: dict[str, Listing], shared: dict[str, frozenset[str]]) -> dict[str, int]:
    """The cuts shortened so that a shared segment's members go all at once or not at all: a
    table keeps its segments from the first one that is, or hides, a member of a shared file some
    other member of which stays (a file is never rewritten without some of its members). A table
    never merged thus holds back the others' retention at the first shared file it has a member in."""
    cuts = dict(cuts)
    while True:
        gone = {s.path for t, n in cuts.items() for s in _with_hidden(listings[t], listings[t].shown[:n])}
        kept = {c for c, members in shared.items() if members & gone and not members <= gone}
        if not kept:
            return cuts
        for t, n in cuts.items():
            listing = listings[t]
            for i, segment in enumerate(listing.shown[:n]):
                if any(_in(p, kept) for p in [segment.path, *(h.path for h in listing.hidden
                                                               if listing.container(h) is segment)]):
                    cuts[t] = i
                    break


def _in(path: str, files: set[str]) -> bool:
    member = parse_member(path)
    return member is not None and member[0] in files


def _with_hidden(listing: Listing, removed: list[Segment]) -> list[Segment]:
    """`removed` (visible) and every hidden segment within one of them: one left behind would be
    listed again once its container is gone."""
    gone = {s.path for s in removed}
    return removed + [s for s in listing.hidden if (c := listing.container(s)) is not None and c.path in gone]


def replaced(log: TableLog, now: float, grace: float) -> list[Segment]:
    """Hidden segments whose visible container was written more than `grace` seconds ago: since
    then no reader lists them, and one that listed them before has had the grace to read them."""
    listing = Listing(log.segments)
    return [s for s in listing.hidden if (c := listing.container(s)) is not None and now - c.mtime > grace]


def compaction_groups(retained: list[Segment], checkpoint: str | None, target_bytes: int,
                      min_segments: int) -> list[list[Segment]]:
    """Runs of consecutive small segments to rewrite as one each (see the module doc); a run with
    a member of a shared segment however short, so shared segments do not outlive a run."""
    groups: list[list[Segment]] = []
    run: list[Segment] = []
    size = 0
    for s in retained:
        small = checkpoint is not None and s.name.last <= checkpoint and (
            s.size < target_bytes or parse_member(s.path) is not None)
        if not small or (run and size + s.size > target_bytes):
            if len(run) >= least_run(run, min_segments):
                groups.append(run)
            run, size = [], 0
        if small:
            run.append(s)
            size += s.size
    if run and len(run) >= least_run(run, min_segments):
        groups.append(run)
    return groups


def least_run(run: list[Segment], min_segments: int) -> int:
    """How many segments a run needs to be compacted: one, when a shared segment holds any."""
    return 1 if any(parse_member(s.path) is not None for s in run) else min_segments
