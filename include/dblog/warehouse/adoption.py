"""Chunk files that are also warehouse data files: a first load written once.

A first load's rows need nothing from the merge rule (`merge.first_load`), so its chunk files can
be the table's data files as they are, if they carry what a data file carries: each column's
Iceberg field id, a warehouse row's `_dblog_*` columns and its bucket. A range dump writes its
chunks so (`warehouse_form`; the footer's `staged_format.WarehouseForm`): ids as a table created
from the chunk's columns numbers them (`types.schema`), the position the split was read at,
origin `dump`, merged at the time the chunk was read, the bucket its rows before the window put
it in. The staged columns take ids of their own from `STAGED_IDS` up, far above any the catalog
gives: an Iceberg reader skips a file's column whose id the table lacks, as it skips a dropped
column's (pyiceberg, DuckDB and Spark's reader by field id: tests/spark/test_first_load_adoption.py).

The merge adopts such files only where they match the table exactly (`mismatch`), after a copy
puts each under the table's location (`copy_in`: a hard link on a local disk, a server-side copy
on one object store), so the staged log's retention stays its own. `data_file` describes an
adopted file for the commit as pyiceberg's `parquet_file_to_data_file` does, its staged columns
left out.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..model.staged_format import DUMP_ID, OP, WarehouseForm, data_columns
from ..storage import filesystem, is_local
from .columns import BUCKET, DELETED, META, MISSING

FIELD_ID = b"PARQUET:field_id"
STAGED_IDS = 2_000_000_000   # the staged columns' field ids start here: no table reaches them
READ_TS = "_read_ts"         # the chunk's read time (`ChunkMeta.read_ts`): its rows' `_dblog_merged_at`
COLUMNS = frozenset({*META, DELETED, BUCKET})   # what the warehouse form adds to a chunk
_STRING = pa.string()
# A warehouse row's metadata columns as Arrow writes them (`types.META_TYPES`; a test holds them
# equal to what pyiceberg makes of the table's schema).
META_ARROW = {"_dblog_position": _STRING, "_dblog_op": _STRING, "_dblog_origin": _STRING, "_dblog_dump_id": _STRING,
              "_dblog_merged_at": pa.timestamp("us", tz="UTC"), MISSING: pa.list_(_STRING)}


def warehouse_form(chunk: pa.Table, form: WarehouseForm, soft_deletes: bool) -> pa.Table:
    """A range chunk's table (every row a dump's read) also as a data file of a new warehouse
    table with the chunk's columns: the same rows, in the same order."""
    n, data = chunk.num_rows, data_columns(chunk.column_names)
    staged = [c for c in chunk.column_names if c not in data]
    every = [*data, *META, *([DELETED] if soft_deletes else []), BUCKET]
    ids = {name: i for i, name in enumerate(every, 1)}
    element = pa.field("element", _STRING, metadata={FIELD_ID: str(len(every) + 1).encode()})
    types = {**META_ARROW, MISSING: pa.list_(element), DELETED: pa.bool_(), BUCKET: pa.int32()}
    values = {"_dblog_position": pa.repeat(pa.scalar(form.position, _STRING), n), "_dblog_op": chunk[OP],
              "_dblog_origin": pa.repeat(pa.scalar("dump", _STRING), n), "_dblog_dump_id": chunk[DUMP_ID],
              "_dblog_merged_at": chunk[READ_TS].cast(types["_dblog_merged_at"]), MISSING: pa.nulls(n, types[MISSING]),
              DELETED: pa.repeat(pa.scalar(False), n), BUCKET: pa.repeat(pa.scalar(form.bucket, pa.int32()), n)}
    fields, arrays = [], []
    for name in every:
        field = chunk.schema.field(name) if name in data else pa.field(name, types[name])
        fields.append(_with_id(field, ids[name]))
        arrays.append(chunk[name] if name in data else values[name])
    for i, name in enumerate(staged):
        fields.append(_with_id(chunk.schema.field(name), STAGED_IDS + i))
        arrays.append(chunk[name])
    metadata = {**(chunk.schema.metadata or {}), **form.footer()}
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))


def _with_id(field: pa.Field, field_id: int) -> pa.Field:
    return field.with_metadata({**(field.metadata or {}), FIELD_ID: str(field_id).encode()})


def mismatch(file: pa.Schema, target: pa.Schema) -> str | None:
    """Why a chunk file cannot be adopted as a data file of the table whose Arrow schema (with
    field ids, `Pending.schema_ipc`) is `target`; None when every column of the table is in the
    file with the table's field id and a type a reader reads as the table's."""
    have = {f.name: f for f in file}
    for want in target:
        got = have.get(want.name)
        if got is None:
            return f"it has no column {want.name}"
        if field_id(got) != field_id(want):
            return f"column {want.name} has field id {field_id(got)}, the table {field_id(want)}"
        if _plain(got.type) != _plain(want.type) and not (want.type == pa.int32() and got.type in _NARROW):
            return f"column {want.name} is {got.type}, the table's {want.type}"
        if _is_list(want.type) and field_id(got.type.value_field) != field_id(want.type.value_field):
            return f"column {want.name}'s elements have field id {field_id(got.type.value_field)}, the table's " \
                   f"{field_id(want.type.value_field)}"
    return None


def field_id(field: pa.Field) -> int | None:
    """A Parquet file's column's Iceberg field id (None: it has none)."""
    value = (field.metadata or {}).get(FIELD_ID)
    return int(value) if value is not None else None


# A SMALLINT or TINYINT column is staged as Arrow int16 / int8, which Parquet stores as INT32 (with
# a width annotation) and every Iceberg reader reads as the table's int (checked: pyiceberg, DuckDB,
# Spark's Parquet reader).
_NARROW = (pa.int8(), pa.int16())


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _plain(t: pa.DataType):
    """A type as Parquet stores it: no large variants, an instant's zone only as "has one"."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if _is_list(t):
        return ("list", _plain(t.value_type))
    if pa.types.is_timestamp(t):
        return ("timestamp", t.unit, t.tz is not None)
    return t


def copy_in(source: str, dest: str) -> None:
    """The file at URI `source` also at URI `dest` (a new name): a hard link where both are on one
    local disk, else a copy (server-side on one object store)."""
    src_fs, src_path = filesystem(source)
    dest_fs, dest_path = filesystem(dest)
    if is_local(source) and is_local(dest):
        os.makedirs(os.path.dirname(dest_path), exist_ok=True)
        try:
            os.link(src_path, dest_path)
        except OSError:   # another disk, or links not allowed: a copy
            pass
        else:
            # A file the table does not reference yet is young: the orphan sweep's grace keeps it
            # (the staged chunk, the same file, only looks younger to the staged log's retention).
            os.utime(dest_path)
            return
    pafs.copy_files(src_path, dest_path, source_filesystem=src_fs, destination_filesystem=dest_fs)


def metrics_plan(metadata) -> tuple[dict, dict]:
    """What `data_file` needs of the table's schema (its Parquet paths' field ids, each field's
    metrics mode): computed once per commit, not once per file (a tenth of a file's cost)."""
    from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping

    schema = metadata.schema()
    return parquet_path_to_id_mapping(schema), compute_statistics_plan(schema, metadata.properties)


def data_file(io, metadata, uri: str, plan: tuple[dict, dict] | None = None):
    """The Iceberg DataFile of an adopted file (`parquet_file_to_data_file`'s, its columns that the
    table does not have left out of the metrics); `plan`: the table's `metrics_plan`."""
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        MetricsMode,
        StatisticsCollector,
        data_file_statistics_from_parquet_metadata,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.types import StringType

    schema = metadata.schema()
    input_file = io.new_input(uri)
    with input_file.open() as stream:
        parquet = pq.read_metadata(stream)
    mapping, stats = plan or metrics_plan(metadata)
    mapping, stats = dict(mapping), dict(stats)   # (a file's own columns are added below)
    extra: list[int] = []
    for i in range(parquet.num_columns):
        path = parquet.schema.column(i).path
        if path not in mapping:   # a staged column: counted under an id nothing keeps
            mapping[path] = -1 - i
            extra.append(-1 - i)
            stats[-1 - i] = StatisticsCollector(field_id=-1 - i, iceberg_type=StringType(),
                                                mode=MetricsMode(MetricModeTypes.NONE), column_name=path)
    statistics = data_file_statistics_from_parquet_metadata(parquet, stats, mapping)
    for field_id in extra:
        statistics.column_sizes.pop(field_id, None)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
                              partition=statistics.partition(metadata.spec(), schema),
                              file_size_in_bytes=len(input_file), sort_order_id=None,
                              spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
                              **statistics.to_serialized_dict())
