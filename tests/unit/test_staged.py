"""The staged row format: what a writer encodes, a reader decodes the same; names parse back."""
import datetime as dt

import pyarrow as pa
import pytest

from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.schema import Column, TableSchema
from dblog.model.staged_format import (
    ChunkFile,
    ChunkMeta,
    ChunkRow,
    Op,
    SegmentFile,
    absent_row,
    chunk_rows,
    chunk_table,
    decode_events,
    is_staged,
    log_table,
    temporary_name,
)

T = TableSchema("app.t", (Column("id", "int", pa.int64()), Column("v", "text", pa.string())), ("id",))
TS = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def pos(n: int) -> str:
    return Position(1, n).encode()


def test_events_decode_to_what_the_capture_encoded():
    events = [
        ChangeEvent("s", T.name, Op.INSERT, pos(1), (1,), {"id": 1, "v": "a"}, txid="t1", commit_ts=TS),
        ChangeEvent("s", T.name, Op.UPDATE, pos(2), (2,), {"id": 2, "v": None}, before={"id": 1, "v": "a"},
                    old_key=(1,), txid="t2", commit_ts=TS, unchanged=["v"]),
        ChangeEvent("s", T.name, Op.DELETE, pos(3), (2,), None, before={"id": 2, "v": "b"}, txid="t3", commit_ts=TS),
    ]
    assert decode_events(log_table(T, events), "s", T.name) == events


def test_a_chunk_decodes_to_its_metadata_and_rows_an_absent_key_without_values():
    meta = ChunkMeta("d1", 4, "lw-id", "hw-id", TS, list_from=10, list_to=12)
    table = chunk_table(T, meta, [(5, "five"), absent_row(T, (6,))], [Op.READ, Op.ABSENT])
    assert ChunkMeta.of(table) == meta
    assert chunk_rows(table) == [ChunkRow((5,), {"id": 5, "v": "five"}), ChunkRow((6,), None)]


def test_a_staged_chunk_s_footer_says_what_its_columns_say_and_a_footer_without_it_still_reads(tmp_path):
    from dblog.stagedlog.staged_log import StagedLog
    staged = StagedLog(str(tmp_path))
    ranged = ChunkMeta("d1", 7, "lw-id", "hw-id", TS, key_from="[4]", key_to="[5]")
    listed = ChunkMeta("d1", 8, "lw-id", "hw-id", TS, list_from=10, list_to=12)
    paths = [staged.write_chunk("s", T, ranged, [(5, "five")], Op.READ),
             staged.write_chunk("s", T, listed, [(5, "five"), absent_row(T, (6,))], [Op.READ, Op.ABSENT])]
    for path, meta in zip(paths, (ranged, listed)):
        table = staged.read_chunk(path)
        assert ChunkMeta.of_footer(table.schema) == ChunkMeta.of(table) == meta
    older = staged.read_chunk(paths[0])   # staged before footers carried it: the columns tell
    older = older.replace_schema_metadata({k: v for k, v in older.schema.metadata.items() if k != b"dblog.chunk"})
    staged._atomic_write(paths[0], older)
    assert ChunkMeta.of_footer(staged.read_chunk(paths[0]).schema) is None
    assert [(i.meta, i.rows) for i in staged.chunk_infos(paths)] == [(ranged, 1), (listed, 2)]


def test_a_chunk_without_rows_has_no_metadata_to_read():
    assert ChunkMeta.of(chunk_table(T, ChunkMeta("d1", 0, "l", "h"), [], [])) is None


def test_a_chunk_staged_before_the_key_list_columns_reads_them_as_unset():
    table = chunk_table(T, ChunkMeta("d1", 0, "l", "h", key_to="[1]"), [(1, "a")], [Op.READ])
    older = table.drop_columns(["_list_from", "_list_to"])
    assert ChunkMeta.of(older) == ChunkMeta("d1", 0, "l", "h", key_to="[1]")


def test_file_names_parse_back_to_what_named_them():
    segment = SegmentFile(pos(1), pos(9))
    assert SegmentFile.parse(f"/root/s/log/app.t/{segment.name}") == segment
    chunk = ChunkFile("dump-1_a", 12)
    assert chunk.name == "00000012.parquet"
    assert ChunkFile.parse(f"/root/s/chunks/app.t/dump-1_a/{chunk.name}") == chunk
    assert not is_staged(temporary_name()) and is_staged(segment.name)


@pytest.mark.parametrize("parse, path", [(SegmentFile.parse, "/root/s/log/app.t/stray.parquet"),
                                         (ChunkFile.parse, "/root/s/chunks/app.t/d1/first.parquet")])
def test_a_file_named_otherwise_is_refused_naming_it(parse, path):
    with pytest.raises(ValueError, match=f"{path} is not a staged"):
        parse(path)


def test_events_whose_values_need_converting_stage_converted_with_their_composite_old_key():
    """Values Arrow cannot take as they are (text for a DECIMAL or an integer key column) take the
    column-by-column path, the old key (a tuple) and the before image included, and read back typed."""
    from decimal import Decimal
    wide = TableSchema("app.w", (Column("a", "int", pa.int64()), Column("b", "text", pa.string()),
                                 Column("d", "decimal(10,2)", pa.decimal128(10, 2))), ("a", "b"))
    events = [ChangeEvent("s", wide.name, Op.UPDATE, pos(1), (1, "y"), {"a": 1, "b": b"y", "d": "1.50"},
                          before={"a": 1, "b": "x", "d": "0.25"}, old_key=("1", "x"), txid="t1", commit_ts=TS),
              ChangeEvent("s", wide.name, Op.INSERT, pos(2), (2, "z"), {"a": 2, "b": "z", "d": None}, txid="t2",
                          commit_ts=TS)]

    staged = log_table(wide, events)

    assert staged.column("d").to_pylist() == [Decimal("1.50"), None] and staged.column("b").to_pylist() == ["y", "z"]
    back = decode_events(staged, "s", wide.name)
    assert [e.old_key for e in back] == [(1, "x"), None]
    assert back[0].before == {"a": 1, "b": "x", "d": Decimal("0.25")}


def test_a_chunk_file_compresses_and_keeps_statistics_of_the_table_s_columns_not_of_its_constant_metadata_and_its_one_column_key_has_no_dictionary(tmp_path):
    import pyarrow.parquet as pq

    from dblog.stagedlog.staged_log import StagedLog
    nested = TableSchema("app.n", (Column("id", "int", pa.int64()), Column("tags", "text[]", pa.list_(pa.string())),
                                   Column("point", "json", pa.struct([("x", pa.int64())]))), ("id",))
    missing = pa.field("_dblog_missing", pa.list_(pa.string()))   # as a warehouse form carries it

    def shape(chunk: pa.Table) -> pa.Table:
        return chunk.append_column(missing, pa.nulls(chunk.num_rows, missing.type))
    path = StagedLog(str(tmp_path)).write_chunk("s", nested, ChunkMeta("d1", 1, "lw-id", "hw-id", TS),
                                                 [(1, ["a"], {"x": 2})], Op.READ, shape=shape)
    group = pq.ParquetFile(path).metadata.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for table_column in ("id", "tags.list.element", "point.x"):
        assert (columns[table_column].compression, columns[table_column].is_stats_set) == ("ZSTD", True)
    assert columns["_dblog_missing.list.element"].is_stats_set   # a data file's metrics, once adopted
    assert (columns["_lw"].compression, columns["_lw"].is_stats_set) == ("UNCOMPRESSED", False)
    # A one-column key is unique in its chunk: a dictionary would only be given up on.
    assert not any("DICTIONARY" in e for e in columns["id"].encodings)
    assert all(any("DICTIONARY" in e for e in columns[c].encodings) for c in ("tags.list.element", "_lw"))
