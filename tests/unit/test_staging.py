"""The staged log: atomic files, readers that ignore leftovers, duplicates dropped by position."""
import os

import pyarrow as pa

from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import Op
from dblog.stagedlog.staged_log import StagedLog

T = TableSchema("app.t", (Column("id", "int", pa.int64()), Column("v", "text", pa.string())), ("id",))


def event(n, op=Op.INSERT, **changes) -> ChangeEvent:
    return ChangeEvent("s", T.name, op, Position(1, n).encode(), (n,), {"id": n, "v": f"v{n}"}, **changes)


def rows(*ns):
    return [event(n) for n in ns]


def test_segments_are_renamed_into_place_and_leave_no_temporary_files(tmp_path):
    log = StagedLog(str(tmp_path))
    path = log.write_segment("s", T, rows(1, 2, 3))
    assert os.path.basename(path) == f"{Position(1, 1).encode()}_{Position(1, 3).encode()}.parquet"
    assert [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp-")] == []


def test_readers_ignore_a_half_written_temporary_file(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", T, rows(1))
    with open(os.path.join(log.log_dir("s", "app.t"), ".tmp-crashed.parquet"), "wb") as f:
        f.write(b"PAR1 garbage")
    assert log.read_log("s", "app.t")["id"].to_pylist() == [1]


def test_re_staged_events_are_read_once_in_position_order(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", T, rows(3, 4, 5))
    log.write_segment("s", T, rows(1, 2, 3, 4))  # a capture re-staging after a crash
    assert log.read_log("s", "app.t")["id"].to_pylist() == [1, 2, 3, 4, 5]


def test_a_position_range_reads_only_overlapping_segments(tmp_path):
    log = StagedLog(str(tmp_path))
    for n in range(0, 50, 10):
        log.write_segment("s", T, rows(*range(n + 1, n + 11)))
    low, high = Position(1, 23).encode(), Position(1, 31).encode()
    assert len(log.segments("s", "app.t", low, high)) == 2
    assert log.read_log("s", "app.t", low, high)["id"].to_pylist() == list(range(23, 32))


def test_a_new_column_in_a_later_segment_reads_as_null_for_older_events(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", T, rows(1))
    wider = TableSchema("app.t", T.columns + (Column("extra", "int", pa.int64()),), ("id",))
    log.write_segment("s", wider, [ChangeEvent("s", T.name, Op.INSERT, Position(1, 2).encode(), (2,),
                                               {"id": 2, "v": "v2", "extra": 7})])
    assert log.read_log("s", "app.t")["extra"].to_pylist() == [None, 7]


def test_an_update_keeps_its_before_image_typed_like_the_row(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", T, [event(1, Op.UPDATE, before={"id": 1, "v": "old"}), event(2)])
    assert log.read_log("s", "app.t")["_before"].to_pylist() == [{"id": 1, "v": "old"}, None]


def test_a_key_update_stages_its_old_key_typed_like_the_key(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", T, [event(2, Op.UPDATE, old_key=(1,))])
    assert log.read_log("s", "app.t")["_old_key"].to_pylist() == [{"id": 1}]


def test_a_non_local_filesystem_takes_the_same_write_rename_read_path():
    # pyarrow's in-memory mock filesystem stands in for s3:// or gs:// (not reachable here).
    log = StagedLog("mock:///staging")
    assert not log.local
    log.write_segment("s", T, rows(3, 4))
    log.write_segment("s", T, rows(1, 2, 3))
    assert log.read_log("s", "app.t")["id"].to_pylist() == [1, 2, 3, 4]
    assert log.tables("s") == ["app.t"]


def test_segments_after_a_position_leave_out_a_segment_ending_on_it(tmp_path):
    staged = StagedLog(str(tmp_path))
    directory = tmp_path / "s" / "log" / "db.t"
    directory.mkdir(parents=True)
    for name in ("a_c", "d_f", "g_h"):
        (directory / f"{name}.parquet").write_bytes(b"")
    names = lambda paths: [p.rsplit("/", 1)[1] for p in paths]  # noqa: E731
    assert names(staged.segments("s", "db.t", low="f")) == ["d_f.parquet", "g_h.parquet"]
    assert names(staged.segments("s", "db.t", after="f")) == ["g_h.parquet"]
    assert names(staged.segments("s", "db.t", after="e", high="f")) == ["d_f.parquet"]


def test_any_table_name_maps_to_one_path_component_and_back():
    from dblog.stagedlog.staged_log import table_dir_name, table_from_dir
    for name in ("shop.accounts", "s.o'rder \"lines\"; -- ✓/x", "s.../../etc", ".hidden", "s.100%", "s.a%2Fb"):
        encoded = table_dir_name(name)
        assert "/" not in encoded and not encoded.startswith(".")
        assert table_from_dir(encoded) == name
    assert table_dir_name("shop.accounts") == "shop.accounts"
