"""`dblog maintain` of the staged log over real files on local disk (dblog.operations.staged_maintenance):
compaction keeps what readers see, replaced files outlive a reader that listed them, retention
and dump removal follow the rules; ZooKeeper and the warehouse stood in for."""
from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dblog.coordination import store as paths
from dblog.coordination.checkpoint import checkpoint_path
from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import ChunkMeta, Op, SegmentFile, key_columns
from dblog.operations.staged_maintenance import joinable_runs, maintain_staged, staged_usage, union
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.staged_log import StagedLog

from staged_fakes import MemoryStore, MergedWarehouse

S = "src"
T = TableSchema("app.t", (Column("id", "int", pa.int64()), Column("v", "text", pa.string())), ("id",))
WIDER = TableSchema("app.t", T.columns + (Column("extra", "int", pa.int32()),), ("id",))
WM = TableSchema(WATERMARK_TABLE, (Column("id", "varchar", pa.string()), Column("value", "char", pa.string())), ("id",))
LONG_AGO = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def pos(n: int) -> str:
    return Position(1, n).encode()


def event(n: int, schema: TableSchema = T, when: dt.datetime = LONG_AGO, **extra) -> ChangeEvent:
    before = {"id": n, "v": "old"} if n % 3 == 0 else None
    return ChangeEvent(S, schema.name, Op.UPDATE if before else Op.INSERT, pos(n), (n,),
                       {"id": n, "v": f"v{n}", **extra}, before=before, txid=f"t{n}", commit_ts=when)


def stage(staged: StagedLog, *ns: int, schema: TableSchema = T, **extra) -> None:
    for n in ns:
        staged.write_segment(S, schema, [event(n, schema, **extra)])


def visible(staged: StagedLog, table: str = T.name) -> list[str]:
    return [SegmentFile.parse(p).name for p in staged.segments(S, table)]


def run(staged: StagedLog, upto: str | None, checkpoint: int | None = 99, store: MemoryStore | None = None,
        warehouse=None, **opts):
    store = store or MemoryStore()
    if checkpoint is not None:
        store.nodes[checkpoint_path(S)] = {"position": pos(checkpoint)}
    options = {"window_seconds": 0, "compact_min_segments": 2, "compact_bytes": 1 << 20,
               "replaced_grace_seconds": 3600, **opts}
    return maintain_staged(store, staged, warehouse or MergedWarehouse(upto), S, **options)


@pytest.fixture
def staged(tmp_path):
    return StagedLog(str(tmp_path / "staging"))


def test_compaction_keeps_every_event_column_type_and_the_table_s_key_and_readers_list_the_new_segment_only(staged):
    stage(staged, 1, 2, 3)
    stage(staged, 4, 5, 6, schema=WIDER, extra=7)     # a column added to the table meanwhile
    before = staged.read_log(S, T.name)

    report = run(staged, upto=None)   # nothing merged: nothing goes, but everything is compacted

    assert (report.segments_compacted, report.compacted_into, report.segments_removed) == (6, 1, 0)
    assert visible(staged) == [f"{pos(1)}_{pos(6)}.parquet"]
    after = staged.read_log(S, T.name)
    assert sorted(after.schema, key=str) == sorted(before.schema, key=str)
    assert after.schema.metadata == before.schema.metadata and after.to_pylist() == before.to_pylist()
    [path] = staged.segments(S, T.name)
    schema = pq.read_schema(path, filesystem=staged.fs)
    assert key_columns(schema) == ["id"] and schema.field("extra").type == pa.int32()
    assert schema.names[:3] == ["id", "v", "extra"], "data columns first, as a capture writes them"
    assert schema.field("_before").type == before.schema.field("_before").type


def test_a_changed_column_type_or_key_starts_a_new_compacted_segment():
    def table(column_type: pa.DataType, key: str = "id") -> pa.Table:
        return pa.table({"id": pa.array([1], pa.int64()), "x": pa.array([1], column_type),
                         "_position": [pos(1)]}).replace_schema_metadata({b"dblog.key": key.encode()})
    parts = [table(pa.int32()), table(pa.int32()), table(pa.int64()), table(pa.int64()), table(pa.int64(), "x")]
    assert list(joinable_runs(parts)) == [(0, 2), (2, 4), (4, 5)]
    assert union(parts[2:4]).schema.metadata == {b"dblog.key": b"id"}


def test_a_reader_that_listed_segments_before_a_compaction_still_reads_them_until_the_grace_has_passed(staged):
    stage(staged, 1, 2, 3)
    listed = staged.segments(S, T.name)     # a merge's Spark job lists, then reads much later
    run(staged, upto=None)
    assert all(staged.fs.get_file_info(p).size > 0 for p in listed)
    assert pa.concat_tables([pq.read_table(p, filesystem=staged.fs) for p in listed]).num_rows == 3

    kept = run(staged, upto=None, replaced_grace_seconds=3600)
    assert kept.replaced_removed == 0
    gone = run(staged, upto=None, replaced_grace_seconds=0)
    assert gone.replaced_removed == 3 and not any(os.path.exists(p) for p in listed)
    assert staged.read_log(S, T.name)["id"].to_pylist() == [1, 2, 3]


def test_a_reader_whose_listed_segment_was_removed_meanwhile_lists_again(staged, monkeypatch):
    stage(staged, 1, 2)
    small = staged.segments(S, T.name)
    staged.write_compacted(S, T.name, staged.read_log(S, T.name))
    real, calls = StagedLog.segments, []

    def stale_then_fresh(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            listed = list(small)
            staged.delete(small)     # removed between the listing and the read
            return listed
        return real(self, *args, **kwargs)
    monkeypatch.setattr(StagedLog, "segments", stale_then_fresh)
    assert staged.read_log(S, T.name)["id"].to_pylist() == [1, 2] and len(calls) == 2


def test_retention_removes_what_every_table_merged_keeps_the_newest_and_the_rest_and_reports_it(staged):
    stage(staged, 1, 2, 3, 4, 5, 6)
    staged.write_segment(S, WM, [ChangeEvent(S, WM.name, Op.UPDATE, pos(n), ("slot",),
                                             {"id": "slot", "value": f"w{n}"}, commit_ts=LONG_AGO)
                                 for n in (10, 11)])
    dry = run(staged, upto=pos(4), compact_min_segments=100, dry_run=True)
    assert (dry.segments_removed, dry.dry_run) == (3, True) and len(visible(staged)) == 6
    assert "would remove 3 segment(s) past retention" in dry.line()

    report = run(staged, upto=pos(4), compact_min_segments=100)

    assert report.segments_removed == 3 and report.bytes_removed > 0
    assert visible(staged) == [f"{pos(n)}_{pos(n)}.parquet" for n in (4, 5, 6)], "4 itself is not past what merged"
    assert visible(staged, WATERMARK_TABLE) == [f"{pos(10)}_{pos(11)}.parquet"], "the newest segment stays"
    assert report.oldest == pos(4) == staged_usage(staged, S).oldest
    assert report.files == 4 and "oldest retained position" in report.line()


def test_nothing_younger_than_the_window_goes_and_a_table_not_merged_keeps_everything(staged):
    now = dt.datetime.now(dt.UTC)
    stage(staged, 1, 2, 3, when=now)
    assert run(staged, upto=pos(3), window_seconds=3600, compact_min_segments=100).segments_removed == 0
    warehouse = MergedWarehouse(pos(99), missing=frozenset({T.name}))
    assert run(staged, upto=None, warehouse=warehouse, compact_min_segments=100).segments_removed == 0


def dump_nodes(dump_id: str, state: str, status: str) -> dict:
    return {paths.dump_path(S, dump_id): {"tables": [T.name], "created_at": time.time() - 60},
            paths.control_path(S, dump_id): {"state": state, "chunk_size": 10, "delay_s": 0.0},
            paths.table_progress_path(S, dump_id, T.name): {"table": T.name, "status": status, "chunks": 1}}


def stage_chunk(staged: StagedLog, dump_id: str, lw: str, hw: str) -> str:
    return staged.write_chunk(S, T, ChunkMeta(dump_id, 0, lw, hw), [(1, "one")], [Op.READ])


def test_a_finished_merged_dump_goes_with_its_chunk_files_and_a_running_one_keeps_them(staged):
    wm = [ChangeEvent(S, WM.name, Op.UPDATE, pos(n), ("slot",), {"id": "slot", "value": f"w{n}"},
                      commit_ts=LONG_AGO) for n in (2, 3, 12, 13)]
    for rows in (wm[:2], wm[2:]):
        staged.write_segment(S, WM, rows)
    stage(staged, 1, 4, 5, 14, 15)
    done, running = stage_chunk(staged, "done", "w2", "w3"), stage_chunk(staged, "running", "w12", "w13")
    store = MemoryStore({**dump_nodes("done", "running", "done"), **dump_nodes("running", "running", "running")},
                        holders={f"{paths.table_progress_path(S, 'running', T.name)}/lock": ["worker"]})
    report = run(staged, upto=pos(15), store=store, warehouse=MergedWarehouse.of_everything(staged, S, pos(15)),
                 compact_min_segments=100)
    assert (report.dumps_removed, report.chunk_files_removed) == (1, 1)
    assert not os.path.exists(done) and os.path.exists(running)
    assert store.children(paths.dumps_path(S)) == ["running"]
    # The running dump's chunk keeps its window (from its LW, 12) in the table's log and the watermarks'.
    assert visible(staged) == [f"{pos(n)}_{pos(n)}.parquet" for n in (14, 15)]
    assert visible(staged, WATERMARK_TABLE) == [f"{pos(12)}_{pos(13)}.parquet"]
    assert not os.path.exists(os.path.dirname(done)), "the removed dump's directory goes too"
    assert staged.chunk_tables(S) == [T.name], "the table's directory stays while it has a dump"
