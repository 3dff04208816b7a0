"""A merge cycle costs what changed: with hundreds of tables in the source, the continuous merge
locks, loads and lists only the tables the capture staged new events of or a dump staged chunks of
(`dblog.coordination.changed_tables`). The long form, with 1,000 tables and timings, is the
"shape" benchmark (`make bench-shape`)."""
from __future__ import annotations

import pyarrow as pa

from dblog.coordination import changed_tables
from dblog.merge.continuous import ContinuousMerge, SliceReport
from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import Op, log_table
from dblog.operations.verify import compare_warehouse
from dblog.spark.data_sources import read_files
from dblog.stagedlog.staged_log import StagedLog, parse_member

from conftest import settle, wait_for

TABLES = [f"t{i:03d}" for i in range(300)]


def test_with_300_tables_a_cycle_merges_only_the_written_table_and_the_dumped_one(src, spark, warehouse):
    ns = src.namespace
    src.sql(*[f"CREATE TABLE {ns}.{t} (id INT PRIMARY KEY, v INT)" for t in TABLES],
            f"INSERT INTO {ns}.t150 VALUES (1, 1), (2, 2), (3, 3)")   # before the capture: only a dump brings it
    src.start_capture()
    src.sql(*[f"INSERT INTO {ns}.{t} VALUES (1, 0), (2, 0)" for t in TABLES[:12]])
    settle(src)
    # One transaction of 12 small tables: one shared segment, no file of their own.
    staged = src.staged()
    assert len(staged.shared_members(src.source_id)) == 12
    assert all(parse_member(p) for t in TABLES[:12] for p in staged.segments(src.source_id, src.table(t)))
    with src.store() as store:
        merge = ContinuousMerge(spark, store, src.staged(), warehouse, {src.source_id: None}, every=0.5,
                                say=lambda _: None)
        first = SliceReport()
        merge.cycle(first)
        merge.harvest(None)   # the merges side by side (DBLOG_MERGE_PARALLEL_TABLES) all ended
        assert (first.merges, first.listings) == (12, 1)   # what is staged; no position of them known yet
        assert compare_warehouse(src.source(), warehouse, src.table("t011")).equal

        src.sql(f"UPDATE {ns}.t002 SET v = 5 WHERE id = 1")
        dump = src.dblog("dump", "start", "one", "--source", src.source_id, "--table", f"{ns}.t150")
        assert dump.returncode == 0, dump.stderr
        settle(src)
        assert set(changed_tables.marks(store, src.source_id)) == {src.table("t150")}

        report, cycles = SliceReport(), []

        def cycle_merged(*tables: str) -> bool:
            cycles.append(merge.cycle(report))
            return all(compare_warehouse(src.source(), warehouse, src.table(t)).equal for t in tables)

        wait_for(lambda: cycle_merged("t002", "t150"), 60, interval=0.2,
                 what="the written and the dumped table to be merged")
        touched = {table for (_, table), entry in report.tables.items() if entry.merges}
        assert touched == {src.table("t002"), src.table("t150")}   # the 11 other staged tables: no lock, no load
        assert report.skipped >= 11 * len(cycles) and report.listings == 0
        assert changed_tables.marks(store, src.source_id) == {}   # every chunk merged: the mark is gone


def test_sparks_reader_reads_a_tables_segment_inside_a_shared_one(spark, tmp_path):
    staged = StagedLog(str(tmp_path / "staging"))
    ids = {"s.a": [1, 2], "s.b": [3]}
    refs = staged.write_shared("src", {t: log_table(schema(t), [event(t, i) for i in keys]) for t, keys in ids.items()})
    for table, keys in ids.items():
        rows = read_files(spark, [refs[table]]).orderBy("id").collect()
        assert [r["id"] for r in rows] == keys and {r["name"] for r in rows} == {table}


def schema(table: str) -> TableSchema:
    return TableSchema(table, (Column("id", "int", pa.int64()), Column("name", "text", pa.string())), ("id",))


def event(table: str, i: int) -> ChangeEvent:
    return ChangeEvent("src", table, Op.INSERT, Position(1, i).encode(), (i,), {"id": i, "name": table})
