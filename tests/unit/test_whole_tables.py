"""Whole-table snapshots as staged (`stagedlog.whole_tables`): complete only once marked, the
newest read wins, and maintenance removes the others but never a running dump's."""
import datetime as dt

import pyarrow as pa

from dblog.model.schema import WHOLE_TABLE, Column, TableSchema
from dblog.model.staged_format import rows_table
from dblog.stagedlog import whole_tables as W
from dblog.stagedlog.staged_log import StagedLog

T = TableSchema("app.log", (Column("a", "int", pa.int64()), Column("m", "text", pa.string())), (), WHOLE_TABLE)
AT = dt.datetime(2026, 11, 30, 6, tzinfo=dt.UTC)


def stage(log: StagedLog, dump_id: str, parts: list[list[tuple]], read_at: dt.datetime | None,
          attempt: str = "a1") -> None:
    for n, rows in enumerate(parts):
        W.write_part(log, "s", T.name, dump_id, attempt, n, rows_table(T, [], rows))
    if read_at is not None:
        W.finish(log, "s", T.name, dump_id, attempt, len(parts), sum(map(len, parts)), read_at)


def test_only_marked_snapshots_count_and_the_newest_read_wins_whatever_its_dump_id(tmp_path):
    log = StagedLog(str(tmp_path))
    stage(log, "b-first", [[(1, "x"), (1, "x")]], AT)
    stage(log, "a-second", [[(2, "y")], [(3, "z")]], AT + dt.timedelta(hours=1))
    stage(log, "c-running", [[(4, "w")]], None)
    assert [w.dump_id for w in W.snapshots(log, "s", T.name)] == ["b-first", "a-second"]
    newest = W.newest(log, "s", T.name)
    assert newest is not None and (newest.rows, len(newest.parts)) == (2, 2)
    assert [r for p in newest.parts for r in log.read_chunk(p).to_pylist()] == [{"a": 2, "m": "y"}, {"a": 3, "m": "z"}]
    assert W.tables(log, "s") == [T.name]


def test_a_run_resumed_after_a_crash_never_mixes_its_parts_with_a_complete_earlier_run(tmp_path):
    log = StagedLog(str(tmp_path))
    stage(log, "d", [[(1, "x")], [(2, "x")], [(3, "x")]], AT, attempt="first")
    stage(log, "d", [[(10, "y")]], None, attempt="second")   # the re-run, one part in
    (only,) = W.snapshots(log, "s", T.name)
    assert only.attempt == "first" and [log.read_chunk(p)["a"].to_pylist() for p in only.parts] == [[1], [2], [3]]


def test_maintenance_removes_replaced_snapshots_and_a_dead_runs_parts_but_not_a_running_ones(tmp_path):
    log = StagedLog(str(tmp_path))
    stage(log, "old", [[(1, "x")]], AT)
    stage(log, "new", [[(2, "y")]], AT + dt.timedelta(hours=1))
    stage(log, "running", [[(3, "z")]], None)
    stage(log, "dead", [[(4, "w")]], None)
    gone = {f.path.rsplit("/", 2)[1] for f in W.outdated(log, "s", T.name, lambda d: d == "running")}
    assert gone == {"old+a1", "dead+a1"}
    # Once the table is merged keyed again, its snapshots read before that go, the newest too.
    gone = {f.path.rsplit("/", 2)[1] for f in W.outdated(log, "s", T.name, lambda d: True, AT + dt.timedelta(hours=2))}
    assert gone == {"old+a1", "new+a1"}
