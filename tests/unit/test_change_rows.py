"""What a change table appends, read from the staged log without Spark (`merge.change_table`)."""
import datetime as dt

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow

from dblog.merge.change_table import _log_rows
from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import Op
from dblog.stagedlog.staged_log import StagedLog
from dblog.warehouse import change_tables as CT

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def schema(v_type: pa.DataType) -> TableSchema:
    return TableSchema("app.t", (Column("id", "int", pa.int64()), Column("v", str(v_type), v_type)), ("id",))


def event(n: int, v, op=Op.INSERT, **more) -> ChangeEvent:
    return ChangeEvent("s", "app.t", op, Position(1, n).encode(), (n,), {"id": n, "v": v}, txid=f"tx{n}", **more)


def test_segments_whose_column_type_was_converted_are_each_fitted_and_key_updates_leave_a_delete(tmp_path):
    log = StagedLog(str(tmp_path))
    log.write_segment("s", schema(pa.int64()), [event(1, 10), event(2, 20)])
    # VARCHAR -> INT... the other way round here: the column became text, a value says "x"
    log.write_segment("s", schema(pa.string()), [event(3, "x"), event(4, "40", Op.UPDATE, old_key=(2,),
                                                                     before={"id": 2, "v": "20"})])
    log.write_segment("s", schema(pa.string()), [event(3, "x")])   # re-staged after a crash
    target = schema_to_pyarrow(CT.schema([("id", "bigint"), ("v", "string")]), include_field_ids=False)
    rows = _log_rows(log, "s", "app.t", Position(1, 1).encode(), Position(1, 4).encode(), target, NOW, {})
    got = [(r["id"], r["v"], r["_op"], r["_txid"]) for r in rows.to_pylist()]
    assert got == [(2, "20", "c", "tx2"), (3, "x", "c", "tx3"), (2, "20", "d", "tx4"), (4, "40", "u", "tx4")]
    assert set(rows["_merged_day"].to_pylist()) == {NOW.date()}
