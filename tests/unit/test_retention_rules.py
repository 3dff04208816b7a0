"""The staged log's retention and compaction rules (dblog.stagedlog.retention), over made-up listings: which
segments and dumps may go, which segments are compacted. No files, no services."""
from __future__ import annotations

from dblog.model.staged_format import SegmentFile, hidden_segments
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.retention import (
    SKEW_S,
    DumpLife,
    Segment,
    Snapshot,
    StagedChunk,
    TableLog,
    compaction_groups,
    plan,
    replaced,
)

T, U, WM = "shop.t", "shop.u", WATERMARK_TABLE
NOW, DAY = 1_000_000.0, 86_400.0


def p(n: int) -> str:
    return f"p{n:04d}"


def seg(table: str, first: int, last: int, size: int = 100, mtime: float = NOW - 30 * DAY) -> Segment:
    name = SegmentFile(p(first), p(last))
    return Segment(table, f"/s/log/{table}/{name.name}", name, size, mtime)


def log(table: str, *ranges: tuple[int, int], merged: int | None = None) -> TableLog:
    return TableLog(table, tuple(seg(table, a, b) for a, b in ranges), None if merged is None else p(merged))


def chunk(table: str, dump: str, low: int | None, high: int | None, merged: bool = True, n: int = 0) -> StagedChunk:
    return StagedChunk(table, dump, f"/s/chunks/{table}/{dump}/{n:08d}.parquet", 10, NOW - 30 * DAY,
                       None if low is None else p(low), None if high is None else p(high), merged)


def dump(dump_id: str, *tables: str, finished: bool = True, may_stage: bool = False, age: float = 30 * DAY,
         created_age: float = 31 * DAY) -> DumpLife:
    return DumpLife(dump_id, tables or (T,), finished, may_stage, NOW - created_age, NOW - age)


def ages(days_old: dict[int, float] | None = None):
    """A segment's newest change: 30 days old, unless `days_old` says otherwise (by its last position)."""
    def newest(s: Segment) -> float:
        return NOW - (days_old or {}).get(int(s.name.last[1:]), 30.0) * DAY
    return newest


def removed(snap: Snapshot, newest=None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in plan(snap, newest or ages()).segments:
        out.setdefault(s.table, []).append(s.name.name.removesuffix(".parquet"))
    return out


def snap(*logs: TableLog, chunks=(), dumps=(), checkpoint: int = 9999, window: float = 7 * DAY, **kw) -> Snapshot:
    return Snapshot(NOW, window, p(checkpoint), {x.table: x for x in logs}, list(chunks), list(dumps), **kw)


# -- the horizon --------------------------------------------------------------------------------------
def test_a_segment_goes_once_its_table_merged_past_it_and_it_is_older_than_the_window():
    t = log(T, (1, 9), (10, 19), (20, 29), (30, 39), merged=20)
    assert removed(snap(t)) == {T: ["p0001_p0009", "p0010_p0019"]}, "20-29 ends at or after what was merged"


def test_a_table_without_a_warehouse_table_merged_nothing_and_keeps_every_segment():
    assert removed(snap(log(T, (1, 9), (10, 19), (20, 29)))) == {}


def test_nothing_goes_before_the_capture_has_a_checkpoint():
    s = snap(log(T, (1, 9), (10, 19), merged=15), log(WM, (1, 2), (3, 4)))
    s.checkpoint = None
    assert removed(s) == {}


def test_the_newest_segment_always_stays_so_the_oldest_retained_position_stays_known():
    decided = plan(snap(log(T, (1, 9), (10, 19), merged=50), log(WM, (1, 2), (5, 6))), ages())
    assert [s.name.first for s in decided.segments if s.table == T] == [p(1)]
    assert decided.oldest == {T: p(10), WM: p(5)}


def test_retention_removes_a_prefix_so_a_young_segment_keeps_every_later_one():
    t = log(T, (1, 9), (10, 19), (20, 29), (30, 39), (40, 49), merged=100)
    # 10-19 holds a change committed yesterday (a long transaction's timestamp, a clock jump): it and
    # everything after it stay, or the retained log would have a hole `export --from` cannot see.
    assert removed(snap(t), ages({19: 1.0})) == {T: ["p0001_p0009"]}


def test_a_chunk_not_merged_yet_keeps_the_table_s_log_and_the_watermarks_from_its_low_watermark_on():
    t = log(T, (1, 9), (10, 19), (20, 29), (30, 39), merged=35)
    u = log(U, (1, 9), (10, 19), (20, 29), merged=35)
    wm = log(WM, (1, 4), (12, 14), (22, 24), (32, 34))
    s = snap(t, u, wm, chunks=[chunk(T, "d1", low=12, high=14, merged=False)], dumps=[dump("d1", finished=True)])
    assert removed(s) == {T: ["p0001_p0009"], U: ["p0001_p0009", "p0010_p0019"], WM: ["p0001_p0004"]}


def test_a_merged_chunk_still_staged_keeps_its_window_too_since_an_export_reconciles_it():
    t = log(T, (1, 9), (10, 19), (20, 29), merged=25)
    wm = log(WM, (1, 4), (12, 14), (22, 24))
    young = dump("d1", finished=True, age=DAY)  # finished yesterday: its chunks stay
    s = snap(t, wm, chunks=[chunk(T, "d1", low=12, high=14)], dumps=[young])
    assert removed(s) == {T: ["p0001_p0009"], WM: ["p0001_p0004"]}


def test_a_dump_that_may_still_stage_keeps_what_was_committed_since_an_hour_before_its_creation():
    t = log(T, (1, 9), (10, 19), (20, 29), merged=25)
    u = log(U, (1, 9), (10, 19), (20, 29), merged=25)
    wm = log(WM, (1, 4), (12, 14), (22, 24))
    running = DumpLife("d1", (T,), finished=False, may_stage=True, created_at=NOW - 2 * DAY, last_active=NOW)
    # Its next chunk's LW may be staged already, its file not: nothing committed since then goes.
    committed = {9: 2 * DAY / DAY + 0.5, 19: 2.0 - 0.5 * SKEW_S / DAY, 4: 3.0, 14: 1.9}
    s = snap(t, u, wm, dumps=[running], window=0)
    assert removed(s, ages(committed)) == {T: ["p0001_p0009"], U: ["p0001_p0009", "p0010_p0019"],
                                           WM: ["p0001_p0004"]}


# -- dumps --------------------------------------------------------------------------------------------
def test_a_finished_dump_past_the_window_with_every_chunk_merged_goes_with_its_chunk_files():
    t = log(T, (1, 9), (10, 19), (20, 29), merged=25)
    wm = log(WM, (1, 4), (12, 14), (22, 24))
    chunks = [chunk(T, "old", 2, 4, n=0), chunk(T, "old", 5, 7, n=1), chunk(T, "old", None, None, n=2)]
    decided = plan(snap(t, wm, chunks=chunks, dumps=[dump("old")]), ages())
    assert [d.dump_id for d in decided.dumps] == ["old"] and decided.chunk_files == chunks
    assert [s.name.first for s in decided.segments] == [p(1), p(10), p(1), p(12)]


def test_a_finished_dump_with_a_chunk_not_merged_stays_and_is_reported():
    t = log(T, (1, 9), (10, 19), merged=15)
    decided = plan(snap(t, chunks=[chunk(T, "d", 2, 4), chunk(T, "d", 5, 7, merged=False, n=1)],
                        dumps=[dump("d")]), ages())
    assert not decided.dumps and decided.unmerged == ["d"] and not decided.segments


def test_a_running_paused_or_young_dump_keeps_its_chunk_files_and_one_older_than_the_window_is_named():
    t = log(T, (1, 9), (10, 19), merged=15)
    for life in (dump("d", finished=False, may_stage=True), dump("d", age=DAY)):
        decided = plan(snap(t, chunks=[chunk(T, "d", 2, 4)], dumps=[life]), ages())
        assert not decided.dumps and not decided.chunk_files
        assert decided.unfinished == (["d"] if life.may_stage else [])


def test_a_dump_whose_chunk_the_retained_log_still_reaches_stays_and_holds_the_log_from_its_low_watermark():
    # A dump finished yesterday read a chunk before the old one's: its chunk keeps the log from 3 on,
    # so an export from 3 would include the old dump's chunk (HW 8); the old dump stays, and holds too.
    t = log(T, (1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), merged=12)
    chunks = [chunk(T, "recent", 3, 4), chunk(T, "done", 6, 8)]
    dumps = [dump("recent", age=DAY), dump("done")]
    decided = plan(snap(t, chunks=chunks, dumps=dumps), ages())
    assert not decided.dumps and decided.held == ["done"]
    assert [s.name.first for s in decided.segments] == [p(1)]


def test_chunks_of_a_dump_zookeeper_no_longer_knows_go_once_merged_and_old():
    t = log(T, (1, 9), (10, 19), merged=15)
    orphan = DumpLife("repair-x", (T,), True, False, NOW - 9 * DAY, NOW - 8 * DAY, registered=False)
    decided = plan(snap(t, chunks=[chunk(T, "repair-x", 2, 4)], dumps=[orphan]), ages())
    assert [d.dump_id for d in decided.dumps] == ["repair-x"] and len(decided.chunk_files) == 1


def test_with_some_tables_only_no_dump_goes_and_their_chunks_hold_the_log():
    t = log(T, (1, 9), (10, 19), (20, 29), merged=25)
    decided = plan(snap(t, chunks=[chunk(T, "old", 12, 14)], dumps=[dump("old")], remove_dumps=False), ages())
    assert not decided.dumps and [s.name.first for s in decided.segments] == [p(1)]


# -- hidden segments and compaction -------------------------------------------------------------------
def test_a_segment_within_another_s_range_is_hidden_from_readers():
    names = [SegmentFile(a, b) for a, b in [("a", "c"), ("a", "f"), ("b", "c"), ("d", "e"), ("e", "g"), ("h", "h")]]
    assert hidden_segments(names) == {SegmentFile("a", "c"), SegmentFile("b", "c"), SegmentFile("d", "e")}


def test_hidden_segments_within_a_removed_one_go_with_it_or_they_would_be_listed_again():
    t = TableLog(T, (seg(T, 1, 19), seg(T, 1, 9), seg(T, 10, 19), seg(T, 20, 29)), p(25))
    assert sorted(removed(snap(t))[T]) == ["p0001_p0009", "p0001_p0019", "p0010_p0019"]


def test_replaced_segments_go_only_once_the_compacted_one_is_older_than_the_grace():
    small = [seg(T, 1, 9, mtime=NOW - 10), seg(T, 10, 19, mtime=NOW - 10)]
    fresh = TableLog(T, (*small, seg(T, 1, 19, mtime=NOW - 60)))
    assert replaced(fresh, NOW, grace=3600) == []
    assert replaced(fresh, NOW, grace=30) == small, "the container's age counts, not the inputs'"


def test_compaction_takes_runs_of_small_segments_up_to_the_checkpoint_of_at_least_the_minimum():
    segs = [seg(T, 1, 1, 40), seg(T, 2, 2, 40), seg(T, 3, 3, 40),   # one run, cut at the target (100 bytes)
            seg(T, 4, 4, 40), seg(T, 5, 5, 40),
            seg(T, 6, 6, 500),                                       # big: not rewritten, and it cuts the run
            seg(T, 7, 7, 10),                                        # alone: below the minimum
            seg(T, 8, 8, 10), seg(T, 9, 9, 10), seg(T, 10, 10, 10)]  # after the checkpoint: the capture's
    groups = compaction_groups(segs, p(7), target_bytes=100, min_segments=2)
    assert [[s.name.first for s in g] for g in groups] == [[p(1), p(2)], [p(3), p(4)]]
    assert compaction_groups(segs, None, 100, 2) == [], "nothing is known complete before the first checkpoint"
