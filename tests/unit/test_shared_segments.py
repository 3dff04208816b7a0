"""Shared segments (dblog.stagedlog.shared_segments) over real files on local disk: several tables'
events in one file read back as each table's own segment, by pyarrow and by the listing every
reader uses; `dblog maintain` moves them into the tables' own segments and the shared file goes
once none of it is listed; retention of some members rewrites the file without them."""
from __future__ import annotations

import pyarrow as pa
import pytest
from test_staged_maintain import S, T, event, pos, run, stage

from dblog.capture.capture_loop import runs_around
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import SegmentFile, log_table
from dblog.operations.staged_maintenance import staged_usage
from dblog.spark.data_sources import footer_schema, open_file
from dblog.stagedlog.staged_log import StagedLog, parse_member

from staged_fakes import MemoryStore, MergedWarehouse

U = TableSchema("app.u", (Column("id", "int", pa.int64()), Column("w", "double", pa.float64()),
                          Column("when", "date", pa.date32())), ("id",))
V = TableSchema("other.v%1/x", (Column("k", "text", pa.string()), Column("v", "text", pa.string())), ("k",))


def u_event(n: int):
    return event(n, U, w=n / 2, when=None)


@pytest.fixture
def staged(tmp_path):
    return StagedLog(str(tmp_path / "staging"))


def shared(staged: StagedLog, *ns: int) -> dict[str, str]:
    """One flush of three tables' events at positions ns (T), ns + 1 (U) and ns + 2 (V)."""
    parts = {T.name: log_table(T, [event(n) for n in ns]), U.name: log_table(U, [u_event(n + 1) for n in ns])}
    v_rows = [event(n + 2, T) for n in ns]
    for e in v_rows:
        e.table, e.key, e.after, e.before = V.name, (f"k{e.key[0]}",), {"k": f"k{e.key[0]}", "v": "x"}, None
    parts[V.name] = log_table(V, v_rows)
    return staged.write_shared(S, parts)


def test_a_shared_segment_reads_back_as_each_tables_own_segment_by_every_reader(staged):
    stage(staged, 1)                       # T has a file of its own too
    refs = shared(staged, 10, 20)
    assert len(staged._files(staged.shared_dir(S))) == 1 and set(refs) == {T.name, U.name, V.name}
    assert staged.tables(S) == sorted([T.name, U.name, V.name])
    assert [SegmentFile.parse(p).name for p in staged.segments(S, T.name)] == \
        [SegmentFile(pos(1), pos(1)).name, SegmentFile(pos(10), pos(20)).name]
    assert staged.read_log(S, T.name)["id"].to_pylist() == [1, 10, 20]
    assert staged.read_log(S, U.name, low=pos(15))["w"].to_pylist() == [10.5]
    assert staged.read_log(S, V.name)["k"].to_pylist() == ["k12", "k22"]
    member = staged.segments(S, V.name)[0]
    assert parse_member(member) == (staged._files(staged.shared_dir(S))[0], V.name)
    # Spark's reader (the dblog_parquet source) opens it as a file of its own.
    assert open_file(member).read().equals(staged.read_segment(member))
    assert footer_schema([member]).names == staged.read_log(S, V.name).schema.names
    usage = staged_usage(staged, S)
    assert (usage.files, usage.segments) == (2, 4)   # the shared file once; four segments in it and beside it


def test_maintenance_moves_members_into_their_tables_segments_and_removes_the_shared_file_after_the_grace(staged):
    shared(staged, 10, 20)
    shared(staged, 30, 40)
    before = {t: staged.read_log(S, t) for t in staged.tables(S)}
    store = MemoryStore()
    report = run(staged, None, store=store, replaced_grace_seconds=3600)
    assert report.segments_compacted == 6 and report.compacted_into == 3
    assert all(parse_member(p) is None for t in before for p in staged.segments(S, t))
    assert {t: staged.read_log(S, t) for t in before} == before
    assert len(staged._files(staged.shared_dir(S))) == 2       # hidden now, kept for readers that listed them
    run(staged, None, store=store, replaced_grace_seconds=0)
    assert staged._files(staged.shared_dir(S)) == []
    assert {t: staged.read_log(S, t) for t in before} == before


def test_a_shared_file_goes_only_whole_and_a_table_never_merged_holds_back_retention_where_it_shares_one(staged):
    stage(staged, 1)
    shared(staged, 10)
    stage(staged, 30, 40)
    refs = shared(staged, 50)
    staged.delete([refs[U.name]])   # some of its members only: the file stays whole
    assert StagedLog(staged.root).read_log(S, U.name).num_rows == 2
    # U never merged: T's log stays from its first segment in a file U shares, so no gap opens.
    report = run(staged, pos(99), warehouse=MergedWarehouse(pos(99), missing=frozenset({U.name, V.name})),
                 compact_min_segments=100)
    assert report.segments_removed == 1
    assert staged.read_log(S, T.name)["id"].to_pylist() == [10, 30, 40, 50]   # (compacted into one meanwhile)
    # Every member now hidden behind its table's compacted segment: past the grace the files go whole.
    run(staged, pos(99), compact_min_segments=100, replaced_grace_seconds=0)
    assert staged._files(staged.shared_dir(S)) == []
    assert all(parse_member(p) is None for t in (T.name, U.name, V.name) for p in staged.segments(S, t))
    assert staged.read_log(S, T.name)["id"].to_pylist() == [10, 30, 40, 50]   # the newest segment stays


def test_own_segments_and_members_are_listed_in_log_order_and_any_table_name_is_a_member(staged):
    shared(staged, 5)
    stage(staged, 1, 9)
    assert [SegmentFile.parse(p).first for p in staged.segments(S, T.name)] == [pos(1), pos(5), pos(9)]
    odd = TableSchema("app.a#b c", T.columns, ("id",))
    ref = staged.write_shared(S, {odd.name: log_table(odd, [event(3, odd)])})[odd.name]
    assert parse_member(ref)[1] == odd.name and staged.read_log(S, odd.name)["id"].to_pylist() == [3]


def test_a_tables_events_are_staged_in_runs_that_leave_a_streamed_transactions_pieces_outside_their_range():
    events = [event(n) for n in (1, 2, 5, 6, 9)]
    pieces = [log_table(T, [event(3), event(4)]), log_table(T, [event(7)])]
    assert [[e.key[0] for e in run] for run in runs_around(events, pieces)] == [[1, 2], [5, 6], [9]]
    assert runs_around(events, []) == [events] and runs_around([], pieces) == []


def test_a_member_compacted_alone_is_hidden_behind_its_own_segment_of_the_same_range(staged):
    refs = shared(staged, 10)
    staged.write_compacted(S, T.name, staged.read_segment(refs[T.name]))
    assert [parse_member(p) for p in staged.segments(S, T.name)] == [None]
