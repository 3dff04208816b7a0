"""A chunk in the warehouse form (`dblog.warehouse.adoption`) is a data file of the table a first
load creates from its columns: the catalog's field ids, the table's types, its metadata columns."""
import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from dblog.model.staged_format import WarehouseForm
from dblog.warehouse.adoption import FIELD_ID, STAGED_IDS, mismatch, warehouse_form
from dblog.warehouse.tables import Warehouse

UTC = dt.UTC
COLUMNS = [("id", "bigint"), ("name", "string"), ("amount", "decimal(12,2)"), ("at", "timestamp"),
           ("local", "timestamp_ntz"), ("n", "int")]


def _chunk(n_type: pa.DataType | None = None) -> pa.Table:
    data = {"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", None]),
            "amount": pa.array([Decimal("1.25"), None], pa.decimal128(12, 2)),
            "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")),
            "local": pa.array([dt.datetime(2024, 1, 1)] * 2, pa.timestamp("us")), "n": pa.array([1, 2], n_type or pa.int32()),
            "_dump_id": pa.array(["d1"] * 2), "_chunk": pa.array([7, 7], pa.int64()), "_op": pa.array(["r"] * 2),
            "_read_ts": pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC"))}
    return pa.table(data)


def _target(tmp_path, soft: bool = False) -> pa.Schema:
    wh = Warehouse(str(tmp_path / "wh"))
    pending = wh.begin("src", "shop.t", ["id"], COLUMNS, None)
    if soft:
        pending = wh.begin("src", "shop.soft", ["id"], COLUMNS, None)
    return pa.ipc.read_schema(pa.py_buffer(pending.schema_ipc))


@pytest.mark.parametrize("soft", [False, True])
def test_a_chunk_in_the_warehouse_form_has_the_ids_and_types_of_a_new_table_of_its_columns(tmp_path, monkeypatch,
                                                                                             soft):
    if soft:
        monkeypatch.setenv("DBLOG_SOFT_DELETE_TABLES", "shop.soft")
    form = warehouse_form(_chunk(), WarehouseForm(3, 4, "0000000001-00000000000000000100-0000000000"), soft)
    target = _target(tmp_path, soft)
    assert mismatch(form.schema, target) is None
    assert WarehouseForm.of_footer(form.schema) == WarehouseForm(3, 4, "0000000001-00000000000000000100-0000000000")
    row = form.to_pylist()[0]
    assert (row["_dblog_position"], row["_dblog_op"], row["_dblog_origin"], row["_dblog_dump_id"], row["_dblog_bucket"]) \
        == ("0000000001-00000000000000000100-0000000000", "r", "dump", "d1", 3)
    assert row["_dblog_merged_at"] == dt.datetime(2024, 1, 2, tzinfo=UTC) and row["_dblog_missing"] is None
    assert row.get("_dblog_deleted", False) is False and ("_dblog_deleted" in form.column_names) == soft
    staged_ids = {int(form.schema.field(c).metadata[FIELD_ID]) for c in ("_dump_id", "_chunk", "_op", "_read_ts")}
    assert min(staged_ids) >= STAGED_IDS   # ids no table has: readers skip those columns
    assert form.select(["id", "name", "_op"]).equals(_chunk().select(["id", "name", "_op"]))


def test_a_chunk_whose_column_type_is_not_the_tables_is_not_adopted_and_says_which(tmp_path):
    form = warehouse_form(_chunk(pa.int64()), WarehouseForm(0, 4, "p"), False)
    assert mismatch(form.schema, _target(tmp_path)) == "column n is int64, the table's int32"
    # A SMALLINT staged as int16 is stored as Parquet INT32: readers read it as the table's int.
    assert mismatch(warehouse_form(_chunk(pa.int16()), WarehouseForm(0, 4, "p"), False).schema, _target(tmp_path)) is None
    assert mismatch(form.schema.remove(form.schema.get_field_index("name")), _target(tmp_path)) == \
        "it has no column name"


def _load(form: WarehouseForm, low: str = "p1", high: str = "p9", rows: int = 2):
    from dblog.merge.first_load import LoadChunk
    return LoadChunk("file:///staged/00000000.parquet", high, rows, "d1",
                     warehouse_form(_chunk(), form, False).schema, low)


def test_a_chunk_read_outside_its_window_or_a_bucket_past_twice_its_size_is_not_adopted(tmp_path):
    """A split a deposed worker staged after its window's HW read its rows then: only HW's
    position keeps the window's later events ahead of them, so that first load is rewritten."""
    from dblog.merge.adopt import _refusal
    from dblog.warehouse.merged_state import TableState
    base, target = TableState("src", "shop.t", ["id"], COLUMNS), _target(tmp_path)
    assert _refusal(base, [_load(WarehouseForm(0, 4, "p5"))], [WarehouseForm(0, 4, "p5")], target, 4) is None
    late = WarehouseForm(0, 4, "p9")
    assert "was read at p9, outside its window (p1, p9)" in _refusal(base, [_load(late)], [late], target, 4)
    wide = WarehouseForm(0, 4, "p5")
    assert _refusal(base, [_load(wide, rows=9)], [wide], target, 4) == \
        "a bucket would hold 9 rows, more than twice 4"
    assert _refusal(base, [_load(wide)], [wide], target, 2) == \
        "its dump made buckets of 4 rows, this merge 2 (DBLOG_BUCKET_ROWS, --bucket-rows)"
