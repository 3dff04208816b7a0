"""Iceberg position deletes as a merge commits them (`dblog.warehouse.deletes`, `commit`): listed in
manifests of delete content, applied by pyiceberg and DuckDB, counted out of the table's rows,
and removed with their bucket's data files by a later rewrite. Without Spark."""
from __future__ import annotations

import decimal

import pyarrow as pa
from pyiceberg.manifest import DataFileContent, ManifestContent

from dblog.warehouse import deletes
from dblog.warehouse.commit import commit
from dblog.warehouse.readers import duckdb_read
from dblog.warehouse.tables import Warehouse

from iceberg_tables import commit_rows

COLUMNS = [("id", "bigint"), ("amount", "decimal(12,2)"), ("note", "string")]
SOURCE, TABLE = "s", "shop.t"


def row(i: int, position: str = "p1") -> dict:
    return {"id": i, "amount": decimal.Decimal(f"{i}.25"), "note": f"n{i}", "_dblog_position": position}


def delete_rows(warehouse: Warehouse, positions: dict[str, list[int]]) -> None:
    """A commit that only adds a position delete file to bucket 0 (its data files stay)."""
    state = warehouse.state(SOURCE, TABLE, files=True)
    pending = warehouse.begin(SOURCE, TABLE, ["id"], COLUMNS, state)
    spec = pending.tx.table_metadata.default_spec_id
    commit(pending, [], {0}, state.properties(), {0: deletes.write(pending.location, spec, 0, positions)})


def live_manifest_contents(warehouse: Warehouse) -> list[ManifestContent]:
    """The current snapshot's manifests' contents (those with a live file), each checked to list
    only files of its content (the spec's rule; pyiceberg alone would list delete files as data)."""
    t = warehouse.load(SOURCE, TABLE)
    contents = []
    for m in t.current_snapshot().manifests(t.io):
        entries = m.fetch_manifest_entry(t.io, discard_deleted=False)
        assert all((e.data_file.content == DataFileContent.DATA) == (m.content == ManifestContent.DATA)
                   for e in entries), m.manifest_path
        if m.fetch_manifest_entry(t.io, discard_deleted=True):
            contents.append(m.content)
    return sorted(contents, key=int)


def test_position_deletes_hide_rows_from_every_reader_and_a_rewrite_of_the_bucket_removes_them(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    commit_rows(wh, SOURCE, TABLE, [row(i) for i in range(10)], COLUMNS, ["id"])
    [data_file] = wh.state(SOURCE, TABLE, files=True).buckets[0].files
    delete_rows(wh, {data_file.file_path: [3, 7, 3]})
    state = wh.state(SOURCE, TABLE, files=True)
    assert [len(b.deletes) for b in state.buckets] == [1] and state.rows == 8
    assert live_manifest_contents(wh) == [ManifestContent.DATA, ManifestContent.DELETES]
    visible = sorted(wh.load(SOURCE, TABLE).scan().to_arrow()["id"].to_pylist())
    assert visible == [0, 1, 2, 4, 5, 6, 8, 9]
    assert sorted(duckdb_read(wh, SOURCE, TABLE)["id"].to_pylist()) == visible

    # A second delete file beside the first: both apply.
    delete_rows(wh, {data_file.file_path: [0]})
    assert sorted(wh.load(SOURCE, TABLE).scan().to_arrow()["id"].to_pylist()) == visible[1:]
    assert wh.state(SOURCE, TABLE).rows == 7

    # Rewriting the bucket removes its data file and both delete files, each from its own manifest.
    commit_rows(wh, SOURCE, TABLE, [row(i, "p2") for i in (1, 2)], COLUMNS, ["id"])
    state = wh.state(SOURCE, TABLE, files=True)
    assert [len(b.deletes) for b in state.buckets] == [0] and state.rows == 2
    assert live_manifest_contents(wh) == [ManifestContent.DATA]
    assert sorted(duckdb_read(wh, SOURCE, TABLE)["id"].to_pylist()) == [1, 2]


def test_kept_masks_only_the_rows_of_the_batch_a_delete_names():
    gone = pa.array([2, 5, 9]).to_numpy()
    assert deletes.kept(4, gone, offset=0).to_pylist() == [True, True, False, True]
    assert deletes.kept(4, gone, offset=4).to_pylist() == [True, False, True, True]
    assert deletes.kept(3, gone, offset=10) is None and deletes.kept(3, None) is None


def test_manifests_do_not_pile_up_over_many_rounds_of_delete_files_added_and_removed(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    for round_ in range(6):
        commit_rows(wh, SOURCE, TABLE, [row(i, f"p{round_}") for i in range(5)], COLUMNS, ["id"])
        [data_file] = wh.state(SOURCE, TABLE, files=True).buckets[0].files
        delete_rows(wh, {data_file.file_path: [round_ % 5]})
    t = wh.load(SOURCE, TABLE)
    assert len(t.current_snapshot().manifests(t.io)) <= 4
    assert live_manifest_contents(wh) == [ManifestContent.DATA, ManifestContent.DELETES]
    assert wh.state(SOURCE, TABLE).rows == 4


def test_stored_keys_of_a_column_widened_since_match_the_records_wider_values(tmp_path):
    """A key column widened in place (int -> bigint) keeps int32 in older files: the lookup of the
    records' keys casts the stored ones up, never the records' down."""
    import pyarrow.parquet as pq

    from dblog.merge.delta import _matches
    path = tmp_path / "old.parquet"
    field = pa.field("id", pa.int32(), metadata={b"PARQUET:field_id": b"1"})
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int32())}, schema=pa.schema([field])), path)
    keys = pa.table({"id": pa.array([2, 3_000_000_000], pa.int64())})
    positions, missing, _ = _matches(str(path), None, keys, {"id": 1})
    assert positions.tolist() == [1] and missing == 0
    positions, _, _ = _matches(str(path), pa.array([1]).to_numpy(), keys, {"id": 1})   # (row 1 already deleted)
    assert positions.tolist() == []
