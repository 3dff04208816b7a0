"""The Spark job merges exactly what the Python rules give, on every shared scenario.

Each case is staged the way the capture and a dump stage it (real Parquet files in the staged
row format); the job's own `merge_inputs` reads and composes them and `merge.merge_records`
applies them, in one merge or in two, the second on the first one's stored warehouse rows.
No capture ran, so the watermark positions come from the staged log (`watermarks.positions`
before the index is built).
"""
import datetime as dt
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from dblog.coordination import store as paths
from dblog.coordination.store import StateStore
from dblog.merge import bucket_merge as M
from dblog.merge.first_load import first_load
from dblog.merge.job import MergeResult, merge_inputs
from dblog.model.schema import Column, TableSchema, encode_key
from dblog.model.staged_format import ChunkMeta, Op, absent_row
from dblog.stagedlog.staged_log import StagedLog
from dblog.warehouse.merged_state import Bucket, TableState
from dblog.warehouse.tables import Warehouse

from conftest import PORTS
from rule_cases import CASES, WM, T, checkpoint, chunk, ev, events, python_visible, unlogged_at, wm

SOURCE, DUMP = "s", "d1"


def schema(table: str) -> TableSchema:
    if table == WM:
        return TableSchema(WM, (Column("id", "varchar", pa.string()), Column("value", "varchar", pa.string())), ("id",))
    return TableSchema(table, (Column("id", "bigint", pa.int64()), Column("v", "text", pa.string())), ("id",))


def stage(root, log, chunks, copies: int = 1, ranges=None) -> StagedLog:
    """The case's events as the capture stages them (a copy after the first re-stages each event
    in a segment of its own, as after a crash) and its chunks as a dump stages them (`ranges`:
    per chunk the key it read after, None for the first, and its last key)."""
    staged = StagedLog(str(root))
    for table in {e.table for e in events(log)}:
        table_events = [e for e in events(log) if e.table == table]
        staged.write_segment(SOURCE, schema(table), table_events)
        for e in table_events if copies > 1 else []:
            staged.write_segment(SOURCE, schema(table), [e])
    numbered = [(n, c) for n, c in enumerate(chunks * copies)]
    for number, (lw, hw, rows) in numbered:
        after, last = ranges[number] if ranges else (None, None)
        meta = ChunkMeta(DUMP, number, lw, hw, key_from=None if after is None else encode_key((after,)),
                         key_to=None if last is None else encode_key((last,)))
        staged.write_chunk(SOURCE, schema(T), meta,
                           [absent_row(schema(T), r.key) if r.row is None else (r.row["id"], r.row["v"]) for r in rows],
                           [Op.ABSENT if r.row is None else Op.READ for r in rows])
    return staged


@pytest.fixture
def store(services):
    store = StateStore(f"127.0.0.1:{PORTS['ZK']}", f"/test_{uuid.uuid4().hex[:8]}", timeout=3).start()
    yield store
    store.stop()


def merge(spark, store, staged, upto, warehouse=None):
    """One merge up to the checkpoint `upto`, composed as the job composes it; the warehouse as
    (stored rows, table state) before and after."""
    stored, state = warehouse or (None, None)
    inputs = merge_inputs(spark, store, staged, SOURCE, T, state, upto, MergeResult(SOURCE, T))
    records, fill_unchanged = inputs.merge_records()   # a first load's too: its own path is held below
    if records is None:
        return stored, state
    names = [c for c, _ in inputs.columns]
    # This helper's table state lists no stored files, so the job's "nothing stored" is said here.
    rows = M.merge_records(stored, records, inputs.key, names, dt.datetime.now(dt.UTC),
                           fill_unchanged, F.lit(0), 1, unique=inputs.unique and stored is None).drop("_b")
    after = TableState(SOURCE, T, inputs.key, list(inputs.columns), [Bucket(0, None)], log_upto=upto,
                       chunks=dict(state.chunks) if state else {})
    for dump_id, numbers in inputs.ready.items():
        after.add_chunks(dump_id, numbers)
    return rows.cache(), after


def visible(warehouse) -> dict:
    rows, _ = warehouse
    return {} if rows is None else {r["id"]: r["v"] for r in rows.where(~M.is_tombstone()).collect()}


def index_unlogged(store, log) -> None:
    """What the capture indexes of the log's unlogged writes (`dblog.coordination.unlogged`)."""
    if unlogged_at(log):
        store.put(paths.unlogged_path(SOURCE, T), [list(i) for i in unlogged_at(log)])


@pytest.mark.parametrize("name", CASES)
def test_the_spark_merge_and_the_python_rules_agree(spark, store, tmp_path, name):
    log, chunks, expected = CASES[name]
    staged = stage(tmp_path, log, chunks)
    index_unlogged(store, log)
    assert visible(merge(spark, store, staged, checkpoint(log))) == python_visible(log, chunks) == expected


@pytest.mark.parametrize("name", CASES)
def test_two_merges_split_mid_log_give_what_one_gives(spark, store, tmp_path, name):
    log, chunks, expected = CASES[name]
    staged = stage(tmp_path, log, chunks)
    index_unlogged(store, log)
    middle = sorted(e.position for e in log)[(len(log) - 1) // 2]
    assert visible(merge(spark, store, staged, checkpoint(log), merge(spark, store, staged, middle))) == expected


def test_re_staged_events_and_chunks_change_nothing(spark, store, tmp_path):
    log, chunks, expected = CASES["paper_k1_to_k6"]
    staged = stage(tmp_path, log, chunks, copies=2)
    assert visible(merge(spark, store, staged, checkpoint(log))) == expected


# A first load: chunks staged with the key ranges they read; whether each key can have only one
# record (the ranking skipped) and the rows stored.
FIRST_LOADS = {
    "chunks_that_follow_one_another": (
        [wm(1, "lw1"), wm(2, "hw1"), wm(3, "lw2"), wm(4, "hw2")],
        [chunk("lw1", "hw1", 1, 2, 3), chunk("lw2", "hw2", 4, 5)], [(None, 3), (3, 5)], True),
    "a_re_read_overlapping_the_chunk_before": (   # a crash after staging, before progress: read again from the cursor
        [wm(1, "lw1"), wm(2, "hw1"), wm(3, "lw2"), wm(4, "hw2")],
        [chunk("lw1", "hw1", 1, 2, 3), chunk("lw2", "hw2", 2, 3, 4)], [(None, 3), (None, 4)], False),
    "an_event_of_the_table_in_a_window": (
        [wm(1, "lw1"), ev(2, 2), wm(3, "hw1"), wm(4, "lw2"), wm(5, "hw2")],
        [chunk("lw1", "hw1", 1, 2, 3), chunk("lw2", "hw2", 4, 5)], [(None, 3), (3, 5)], False),
}


@pytest.mark.parametrize("name", FIRST_LOADS)
def test_a_first_load_ranks_records_unless_its_chunks_cannot_share_a_key(spark, store, tmp_path, name):
    log, chunks, ranges, unique = FIRST_LOADS[name]
    staged = stage(tmp_path, log, chunks, ranges=ranges)
    assert merge_inputs(spark, store, staged, SOURCE, T, None, checkpoint(log), MergeResult(SOURCE, T)).unique is unique
    rows, _ = merge(spark, store, staged, checkpoint(log))
    keys = [r["id"] for r in rows.collect()]
    assert sorted(keys) == sorted(set(keys))   # each key stored once, however the rows were ranked
    assert visible((rows, None)) == python_visible(log, chunks)
    if unique:   # the first load's own path, chunks straight into buckets, stores the same rows
        assert first_loaded(spark, store, staged, checkpoint(log), tmp_path) == python_visible(log, chunks)


def first_loaded(spark, store, staged, upto, tmp_path) -> dict:
    """The live rows `first_load` writes (one bucket per chunk), read back from its files."""
    inputs = merge_inputs(spark, store, staged, SOURCE, T, None, upto, MergeResult(SOURCE, T))
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    base = TableState(SOURCE, T, inputs.key, list(inputs.columns), [Bucket(0, None)])
    done = first_load(spark, base, warehouse.begin(SOURCE, T, inputs.key, list(inputs.columns), None),
                      inputs.loads, True, bucket_rows=1)
    assert done is not None and len(done.buckets) == len(inputs.loads)
    files = pa.concat_tables([pq.read_table(f.uri.removeprefix("file://")) for f in done.files if not f.tombstone])
    assert set(files["_dblog_origin"].to_pylist()) == {"dump"}
    return dict(zip(files["id"].to_pylist(), files["v"].to_pylist()))
