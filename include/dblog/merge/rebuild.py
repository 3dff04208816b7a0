"""A table whose shape changed past what it can take in place: rebuilt from a full dump read
under the new shape, swapped in one commit.

The shape is the key and the column types. Rows stored under the old key cannot be merged with
records keyed by the new one (a row's identity changed), and a column whose type Iceberg cannot
promote (VARCHAR -> INT, INT -> VARCHAR, a decimal's scale) holds no value the new type can be
proved from: the source converted every row without row events. So the merge never mixes the
two. The capture asks for a full dump when it sees the change (`model.schema_changes`: a new key
or a conversion rewrites rows). Until such a dump is staged whole
and every window of it has passed the capture, merges of the table leave it as it is, readable as
of the change, and say what they wait for. Then one merge composes the table anew, as a first
merge does, from that dump's chunks and the log events after its first low watermark, and
commits it in place of every file the table had, with the new key, in one Iceberg commit
(`job._merge`).

The dump must be one that could not see the old shape: every chunk of it staged under the new
one, its first low watermark after the last event staged under the old one and after the table's
last merge. Events before that low
watermark are left out on purpose: the dump read every row after it, and an older event keyed by
the old key may name a row the new key does not (an update of a new-key column looked like an
upsert of another row). Dumps that ended before it, or read under the old key, are superseded:
counted as merged. Dumps after it are merged as usual by later merges. Older snapshots keep the
old rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ..coordination import store as paths
from ..coordination import watermark_index
from ..coordination.store import StateStore
from ..model.staged_format import ChunkFile, ChunkMeta, SegmentFile, key_columns
from ..snapshot import repair
from ..snapshot.dump import dump_status, finished_chunks
from ..spark.data_sources import spark_schema
from ..stagedlog.staged_log import ChunkInfo, StagedLog
from ..warehouse.merged_state import Bucket, TableState


@dataclass
class Rebuild:
    """What a rebuild composes on (`state`: no row stored, every dump but `dump_id` counted as
    merged, the log merged up to the dump's first low watermark) and what its commit records as
    merged besides: the superseded dumps' staged chunks."""
    dump_id: str
    state: TableState
    superseded: dict[str, set[int]] = field(default_factory=dict)
    why: str = ""   # what changed (`Shape.change`)


@dataclass(frozen=True)
class Shape:
    """What a rebuild's inputs must have been staged with: the key, and the new types (Spark's
    spelling) of the columns whose type changed past a promotion."""
    key: list[str]
    types: dict[str, str] = field(default_factory=dict)

    def fits(self, schema: pa.Schema) -> bool:
        if key_columns(schema) != self.key:
            return False
        if not self.types:
            return True
        found = {f.name: f.dataType.simpleString() for f in spark_schema(schema).fields if f.name in self.types}
        return all(found.get(n) == t for n, t in self.types.items())   # (a file without it: read before a rename)

    def change(self, state: TableState) -> str:
        """What changed, said."""
        was = dict(state.columns)
        parts = [f"its key changed from ({', '.join(state.key)}) to ({', '.join(self.key)})"] \
            if state.key != self.key else []
        parts += [f"column {n} changed type from {was.get(n, '?')} to {t}" for n, t in self.types.items()]
        return " and ".join(parts)


@dataclass(frozen=True)
class Waiting:
    """What a rebuild waits for, and whether nothing staged or asked for can ever give it (the
    merge then asks for a whole-table re-read itself)."""
    text: str
    ask: bool


def plan(store: StateStore, staged: StagedLog, state: TableState, shape: Shape, upto: str) -> Rebuild | Waiting:
    """The rebuild of `state`'s table under `shape`, or, while it cannot start, what it waits for."""
    source, table, key = state.source, state.table, shape.key
    dumps: dict[str, tuple[list[ChunkInfo], str | None, str | None]] = {}
    full: dict[str, int | None] = {}   # full dumps every chunk of which fits: their chunk counts once finished
    for dump_id in staged.chunk_dumps(source, table):
        count = finished_chunks(store, source, dump_id, table)   # before the listing: a chunk staged after it waits
        infos = staged.chunk_infos(staged.chunk_files(source, table, dump_id))
        dumps[dump_id] = (infos, *_span(store, staged, source, infos))
        scope = store.get(paths.dump_path(source, dump_id))
        if scope is not None and scope.get("keys") is None and all(shape.fits(i.schema) for i in infos):
            full[dump_id] = count
    # Old-shape events are looked for from the earliest such dump's first LW on (or the last merge's).
    since = [p for p in [*(dumps[d][1] for d in full), state.log_upto] if p is not None]
    last_old = _last_old_event(staged, state, shape, upto, min(since) if since else None)
    ready: list[tuple[str, str]] = []   # (first LW, dump id) of the dumps that can rebuild the table
    hopeful = False   # a dump that may still become one
    for dump_id, count in full.items():
        infos, first, last = dumps[dump_id]
        if first is not None and last_old is not None and first <= last_old:
            continue   # begun before an event under the old shape: read, in part, under it
        if count is not None and infos and first is not None and last is not None and last <= upto:
            ready.append((first, dump_id))   # (its count was read before the listing: every chunk is in it)
        else:
            hopeful = True
    wanted = f"{table}: {shape.change(state)}: the table is rebuilt"
    if not ready:
        return Waiting(
            f"{wanted} from a full dump read under the new shape after its last event under the old one (asked for "
            f"by the capture when it saw the change, else by this merge); until it is staged and its windows passed "
            f"the capture, the table stays as it was",
            ask=not hopeful and not _asked(store, source, table, set(dumps)))
    low, chosen = min(ready)   # the earliest: the dumps after it are merged as usual
    # Superseded: read under the old shape, or ended before the rebuild's dump began (a dump still
    # running under the new shape is merged as usual once its windows pass).
    superseded = {d: {ChunkFile.parse(i.path).number for i in infos} for d, (infos, _, last) in dumps.items()
                  if d != chosen and (any(not shape.fits(i.schema) for i in infos) or
                                      (last is not None and last <= low))}
    fresh = TableState(source, table, list(key), [], [Bucket(0, None)], log_upto=low,
                       chunk_counts={d: 0 for d in dumps if d != chosen})
    return Rebuild(chosen, fresh, superseded, shape.change(state))


def _asked(store: StateStore, source: str, table: str, staged_dumps: set[str]) -> bool:
    """Whether a whole-table re-read of `table` is asked for and has staged nothing yet (a pending
    request, a repair dump that has not read its first window): it begins after every event so far."""
    if any(r.table == table and r.keys is None for r in repair.pending(store, source)):
        return True
    for dump_id in repair.repair_dumps(store, source):
        scope = store.get(paths.dump_path(source, dump_id)) or {}
        if dump_id not in staged_dumps and table in scope.get("tables", []) and scope.get("keys") is None and \
                not repair.landed(dump_status(store, source, dump_id)):
            return True
    return False


def _last_old_event(staged: StagedLog, state: TableState, shape: Shape, upto: str, after: str | None) -> str | None:
    """The position of the last event staged under another shape than `shape` after `after` (a
    footer read per segment since)."""
    last = None
    for path in staged.segments(state.source, state.table, high=upto, after=after):
        try:
            if not shape.fits(staged.segment_file(path).schema_arrow):
                last = max(last or "", SegmentFile.parse(path).last)
        except FileNotFoundError:   # compacted since listed: the compacted one is listed next time
            continue
    return last


def _span(store: StateStore, staged: StagedLog, source: str, infos: list[ChunkInfo]) -> tuple[str | None, str | None]:
    """A dump's first low and last high watermark positions, over all of its chunks, the empty
    ones too (their footers name their window); None where one is not staged yet."""
    metas = [i.meta if i.meta is not None else ChunkMeta.of_footer(i.schema) for i in infos]
    at = watermark_index.positions(store, staged, source, {w for m in metas if m for w in (m.lw, m.hw)})
    lows = [at.get(m.lw) for m in metas if m]
    highs = [at.get(m.hw) for m in metas if m]
    first = None if not lows or None in lows else min(p for p in lows if p)
    last = None if not highs or None in highs else max(p for p in highs if p)
    return first, last
