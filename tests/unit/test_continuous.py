"""The continuous merge's loop without Spark: which tables a cycle merges, and what a slice
reports (the merge of one table is `job.merge_table`, replaced here by a recording stand-in)."""
from __future__ import annotations

import pytest

from dblog.merge import continuous as C
from dblog.merge.job import MergeBusy, MergeError, MergeResult


class Deployment:
    """Checkpoints per source and what each table's merge does next (a result or an exception)."""

    def __init__(self, monkeypatch, tables: dict[str, list[str]]):
        self.checkpoints = {s: "p1" for s in tables}
        self.tables, self.merged, self.next = tables, [], {}
        monkeypatch.setattr(C, "checkpoint_position", lambda store, source: self.checkpoints[source])
        monkeypatch.setattr(C, "staged_tables", lambda staged, source: self.tables[source])
        monkeypatch.setattr(C, "merge_table", self.merge_table)
        self.index: C.changed_tables.ChangeIndex | None = None   # None: a capture without the change index
        self.marks: dict[str, list[str]] = {}
        self.cleared: list[str] = []
        monkeypatch.setattr(C.changed_tables, "load_index", lambda store, source: self.index)
        monkeypatch.setattr(C.changed_tables, "marks", lambda store, source: dict(self.marks))
        monkeypatch.setattr(C.changed_tables, "clear_marks",
                            lambda store, source, names: self.cleared.extend(names))

    def merge_table(self, spark, store, staged, warehouse, source, table, **options):
        self.merged.append((source, table))
        outcome = self.next.pop((source, table), None)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome or MergeResult(source, table, note="up to date")

    def loop(self, said: list[str], parallel: int = 1) -> C.ContinuousMerge:
        return C.ContinuousMerge(None, None, None, None, {s: None for s in self.tables}, every=1, say=said.append,
                                 parallel=parallel)


def committed(source: str, table: str, events: int, snapshot: int) -> MergeResult:
    return MergeResult(source, table, snapshot_id=snapshot, log_events=events, rows=10, upto="p9",
                       committed_at=100.0, oldest_commit_ts=97.5)


def test_without_a_change_index_a_source_whose_checkpoint_stayed_put_is_skipped_until_the_full_pass_is_due(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t1", "t2"], "b": ["u"]})
    loop, report = d.loop([]), C.SliceReport()
    loop.cycle(report)
    assert d.merged == [("a", "t1"), ("a", "t2"), ("b", "u")]
    d.merged.clear()
    d.checkpoints["b"] = "p2"
    loop.cycle(report)
    assert d.merged == [("b", "u")]   # a's checkpoint did not move: nothing listed, nothing merged
    monkeypatch.setattr(C, "FULL_PASS_S", 0.0)
    d.merged.clear()
    loop.cycle(report)
    assert d.merged == [("a", "t1"), ("a", "t2"), ("b", "u")]   # a chunk staged after its HW is not left behind


def test_a_table_another_merge_holds_is_taken_by_the_next_cycle_without_failing_the_slice(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t1", "t2"]})
    loop, report = d.loop(said := []), C.SliceReport()
    d.next[("a", "t1")] = MergeBusy("another merge of a/t1 holds its lock")
    loop.cycle(report)
    d.merged.clear()
    loop.cycle(report)   # same checkpoint, but t1 was not merged up to it
    assert d.merged == [("a", "t1"), ("a", "t2")]
    assert report.failures == {} and not said


def test_a_failing_table_is_retried_said_once_and_fails_the_slice_while_the_others_merge(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["bad", "good"]})
    loop, report = d.loop(said := []), C.SliceReport()
    for n in range(3):
        d.next[("a", "bad")] = MergeError("the primary key of bad changed")
        d.next[("a", "good")] = committed("a", "good", 5, 100 + n)
        d.checkpoints["a"] = f"p{n + 2}"
        loop.cycle(report)
    failures = [line for line in said if "merge failed" in line]
    assert len(failures) == 1 and "the primary key of bad changed" in failures[0]
    assert report.failures == {("a", "bad"): "the primary key of bad changed"}
    good = report.tables[("a", "good")].report()
    assert (good["commits"], good["log_events"], good["snapshot_id"]) == (3, 15, 102)
    assert good["visible_after_s"] == pytest.approx(2.5)
    d.next[("a", "good")] = committed("a", "good", 1, 103)
    d.checkpoints["a"] = "p9"
    loop.cycle(report)   # the bad table merged this time
    assert report.failures == {}


def test_one_line_per_commit_names_the_snapshot_and_how_long_the_oldest_change_waited(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t"]})
    loop, report = d.loop(said := []), C.SliceReport()
    d.next[("a", "t")] = committed("a", "t", 7, 42)
    loop.cycle(report)
    assert said == ["a t: snapshot 42, 7 log events, 0 chunks (0 rows, 0 dropped in windows), 0/0 buckets written, "
                    "10 rows, merged in 0.0s (commit 0.00s); its oldest change waited 2.5s to be visible"]


def test_a_merge_interval_of_zero_is_refused():
    with pytest.raises(MergeError, match="interval must be > 0"):
        C.ContinuousMerge(None, None, None, None, {}, every=0)


@pytest.mark.parametrize("argv, said", [
    (["merge", "--every", "2"], "--duration and --every need --continuous"),
    (["merge", "--duration", "60"], "--duration and --every need --continuous"),
    (["merge", "--continuous", "--duration", "0"], "--duration must be > 0 seconds, got 0"),
    (["merge", "--continuous", "--every", "0"], "--every"),
])
def test_dblog_merge_refuses_options_that_cannot_work_before_touching_anything(argv, said, capsys):
    from dblog import cli
    assert cli.main(argv) == 2
    assert said in capsys.readouterr().err


def test_a_table_whose_repair_has_not_landed_is_said_when_that_changes_not_every_cycle(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t"]})
    loop, report = d.loop(said := []), C.SliceReport()
    first = {"keys": 0, "whole_table": True, "sample": [], "reasons": ["statement-logged write"], "dumps": []}
    for position, waiting in [("p2", first), ("p3", first), ("p4", {**first, "reasons": ["TRUNCATE"]})]:
        d.checkpoints["a"] = position
        d.next[("a", "t")] = MergeResult("a", "t", snapshot_id=7, upto=position, waiting=waiting, note="up to date")
        loop.cycle(report)
    assert len(said) == 2, said
    assert all("not in sync yet: a repair of every row has not landed" in line for line in said)
    assert "TRUNCATE" in said[1]


def test_a_first_load_waiting_for_its_dump_is_said_once_and_its_mark_kept_until_it_is_merged(monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t"]})
    d.index = C.changed_tables.ChangeIndex(since=None, tables={})
    d.marks = {"t": ["t-00"]}
    loop, report = d.loop(said := []), C.SliceReport()
    waits = "first load in progress: dump d1 has read 40,000 of about 100,000 rows (2 chunks)"
    for position in ("p2", "p3", "p4"):   # the dump reads on: each cycle's merge of the table waits
        d.checkpoints["a"] = position
        d.next[("a", "t")] = MergeResult("a", "t", note=waits, chunks_waiting=2, load_waits="d1")
        loop.cycle(report)
    assert said == [f"a t: {waits}"] and d.cleared == []
    d.checkpoints["a"] = "p5"
    d.next[("a", "t")] = committed("a", "t", 0, 8)   # the dump has read it: the whole load, one commit
    loop.cycle(report)
    assert d.merged == [("a", "t")] * 4 and d.cleared == ["t-00"] and "snapshot 8" in said[-1]


def test_with_a_change_index_a_cycle_merges_only_the_tables_with_newer_events_or_a_chunk_mark(monkeypatch):
    d = Deployment(monkeypatch, {"a": [f"t{i}" for i in range(50)]})
    d.index = C.changed_tables.ChangeIndex(since="p0", tables={"t3": "p1"})
    d.next.update({("a", f"t{i}"): MergeResult("a", f"t{i}", upto="p1", note="up to date") for i in range(50)})
    loop, report = d.loop([]), C.SliceReport()
    loop.cycle(report)
    assert len(d.merged) == 50 and report.listings == 1   # the first cycle: no table's position known yet
    d.merged.clear()
    for n in range(2, 5):
        d.checkpoints["a"] = f"p{n}"
        d.index.tables["t7"] = f"p{n}"
        d.next[("a", "t7")] = MergeResult("a", "t7", upto=f"p{n}")
        loop.cycle(report)
    assert d.merged == [("a", "t7")] * 3   # the 49 others: no lock, no state loaded, not listed again
    assert report.listings == 1 and report.skipped == 3 * 49 and report.merges == 53
    assert {t: s.merges for (_, t), s in report.tables.items() if s.merges > 1} == {"t7": 4}


def merged_once_with_an_index(monkeypatch) -> tuple[Deployment, C.ContinuousMerge, C.SliceReport]:
    """Source a with tables t1, t2, a change index, and a first cycle behind it (every table merged to p1)."""
    d = Deployment(monkeypatch, {"a": ["t1", "t2"]})
    d.index = C.changed_tables.ChangeIndex(since=None, tables={})
    d.next.update({("a", t): MergeResult("a", t, upto="p1") for t in ("t1", "t2")})
    loop, report = d.loop([]), C.SliceReport()
    loop.cycle(report)
    d.merged.clear()
    return d, loop, report


def test_a_table_a_dump_marked_is_merged_until_no_chunk_waits_then_its_mark_is_cleared(monkeypatch):
    d, loop, report = merged_once_with_an_index(monkeypatch)
    d.marks = {"t2": ["t2-04"], "new": ["new-00"]}   # a dump staged chunks of t2, and of a table not staged before
    d.next[("a", "t2")] = MergeResult("a", "t2", upto="p1", chunks_waiting=2)   # their windows not passed yet
    loop.cycle(report)
    assert sorted(d.merged) == [("a", "new"), ("a", "t2")] and d.cleared == ["new-00"]
    d.next[("a", "t2")] = MergeResult("a", "t2", upto="p2", chunks=2)
    loop.cycle(report)
    assert "t2-04" in d.cleared   # the marks read: a chunk staged meanwhile adds a mark of its own


def test_a_table_merged_only_up_to_before_the_index_began_is_merged_whatever_the_index_says():
    index = C.changed_tables.ChangeIndex(since="p5", tables={"t": "p3"})
    assert index.newer("t", "p4", "p9") and not index.newer("t", "p5", "p9") and index.newer("t", None, "p9")
    assert not C.changed_tables.ChangeIndex(None, {"t": "p7"}).newer("t", "p6", "p6")   # not past the checkpoint


def test_side_by_side_a_long_merge_runs_on_while_the_next_cycles_merge_the_other_tables(monkeypatch):
    import threading
    d = Deployment(monkeypatch, {"a": ["big", "small"]})
    d.index = C.changed_tables.ChangeIndex(since=None, tables={"big": "p1", "small": "p1"})
    landing, merging = threading.Event(), threading.Event()
    fast = d.merge_table

    def merge_table(spark, store, staged, warehouse, source, table, **options):
        if table == "big":
            merging.set()
            landing.wait(30)   # a dump landing: longer than many cycles
            return committed(source, table, 0, 7)
        return fast(spark, store, staged, warehouse, source, table, **options) or None
    monkeypatch.setattr(C, "merge_table", merge_table)
    loop, report = d.loop([], parallel=2), C.SliceReport()
    loop.every = 0.05
    for n in range(2, 6):
        d.checkpoints["a"] = d.index.tables["small"] = d.index.tables["big"] = f"p{n}"
        d.next[("a", "small")] = MergeResult("a", "small", snapshot_id=n, upto=f"p{n}", committed_at=1.0)
        loop.cycle(report)
    assert merging.is_set() and d.merged.count(("a", "small")) == 4   # every cycle, while big merged on
    assert report.tables[("a", "big")].merges == 1   # never started twice
    landing.set()
    loop.harvest(None)
    assert report.tables[("a", "big")].total.snapshot_id == 7


def test_with_a_change_index_every_table_is_still_merged_and_listed_again_once_a_backstop_interval(monkeypatch):
    d, loop, report = merged_once_with_an_index(monkeypatch)
    loop.cycle(report)
    assert d.merged == [] and report.listings == 1   # nothing new: passed over
    d.tables["a"] = ["t1", "t2", "t3"]   # a chunk staged without a mark, of a table not known here yet
    monkeypatch.setattr(C, "BACKSTOP_S", 0.0)
    loop.cycle(report)
    assert d.merged == [("a", "t1"), ("a", "t2"), ("a", "t3")] and report.listings == 2


def test_a_cycle_starts_as_soon_as_the_checkpoint_moves_not_an_interval_later(monkeypatch):
    import threading

    class Watched:   # the StateStore's watch: the checkpoint node's callback
        callbacks: list = []

        def watch(self, path, callback, wait=True):
            self.callbacks.append((path, callback))

    d = Deployment(monkeypatch, {"a": ["t"]})
    store = Watched()
    loop = C.ContinuousMerge(None, store, None, None, {"a": None}, every=3600, say=lambda _: None)
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: d.merged == [("a", "t")])   # the first cycle, then an hour's pause at most
        (path, moved), = store.callbacks
        assert path == "/a/capture/checkpoint"
        d.checkpoints["a"] = "p2"
        moved()
        wait_until(lambda: len(d.merged) == 2)   # not an hour later
    finally:
        loop.stop.set()
        runner.join(10)
    assert not runner.is_alive()


def wait_until(condition, timeout: float = 30.0) -> None:
    import time
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "the condition did not hold in time"
        time.sleep(0.01)


def test_a_slice_reports_its_change_table_range_from_before_its_first_append_to_its_last():
    total = C.TableSlice(MergeResult("s", "t"))
    for after, upto, rows in ((None, 11, 3), (None, None, 0), (11, 12, 2), (12, 13, 4)):
        total.add(MergeResult("s", "t", changes=rows, changes_after=after, changes_upto=upto))
    got = total.result()
    assert (got.changes_after, got.changes_upto, got.changes) == (None, 13, 9)
    later = C.TableSlice(MergeResult("s", "t"))
    later.add(MergeResult("s", "t", changes=1, changes_after=13, changes_upto=14))
    assert (later.result().changes_after, later.result().changes_upto) == (13, 14)


def test_each_source_hears_a_heartbeat_at_most_every_few_seconds_and_at_once_when_a_table_fails_or_recovers(
        monkeypatch):
    d = Deployment(monkeypatch, {"a": ["t1", "t2"]})
    beats: list = []
    monkeypatch.setattr(C, "beat", lambda store, source, state: beats.append((source, state)))
    loop = C.ContinuousMerge(None, None, None, None, {"a": None}, every=0.05, say=[].append, parallel=1)
    loop.run(duration=0.3)
    assert [(s, b.tables, b.failing) for s, b in beats] == [("a", None, {})]   # several cycles, one beat
    d.checkpoints["a"] = "p2"
    d.next[("a", "t2")] = MergeError("disk full")
    loop.run(duration=0.3)
    # (the next cycle merges t2 again, and it succeeds)
    assert [(s, b.failing) for s, b in beats[1:]] == [("a", {"t2": "disk full"}), ("a", {})]


def test_a_merge_that_runs_long_still_beats_from_its_own_thread_and_no_beat_follows_the_slices_end(monkeypatch):
    import threading
    import time
    Deployment(monkeypatch, {"a": ["t1"]})   # (its checkpoints and table listing)
    beats: list = []
    monkeypatch.setattr(C, "beat", lambda store, source, state: beats.append(time.monotonic()))
    monkeypatch.setattr(C, "BEAT_S", 0.05)
    release, merging = threading.Event(), threading.Event()

    def long_merge(*args, **kwargs):   # a dump landing: one merge far longer than a beat
        merging.set()
        release.wait(5)
        return MergeResult("a", "t1", note="up to date")
    monkeypatch.setattr(C, "merge_table", long_merge)
    loop = C.ContinuousMerge(None, None, None, None, {"a": None}, every=0.05, say=[].append, parallel=1)
    slice_ = threading.Thread(target=loop.run, kwargs={"duration": 0.1})
    slice_.start()
    assert merging.wait(5)
    time.sleep(0.5)
    during = len(beats)
    release.set()
    slice_.join(5)
    ended, after = time.monotonic(), len(beats)
    time.sleep(0.3)
    assert during >= 5, beats   # beats every 0.05 s while the cycle was stuck in its merge
    assert len(beats) == after and all(b <= ended for b in beats)
    assert not [t for t in threading.enumerate() if t.name == "dblog-merge-beat"]
