"""Spark 4 Python data sources: Parquet files and Iceberg snapshots on any storage, read by pyarrow
in the executors' Python workers, so Spark needs neither an S3 nor an Iceberg jar.

dblog_parquet  a list of Parquet file URIs (staged log, staged chunks): `read_files`
dblog_iceberg  one snapshot of a warehouse table (`spark_table`)

Options appear in query plans and logs: they carry names only. Credentials and the catalog come
from the environment, which executors inherit in local mode (`spark.executorEnv.*` on a cluster).
"""
from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import WarehouseError
from ..model.schema_changes import widens
from ..stagedlog import shared_segments
from ..stagedlog.staged_log import parse_member
from ..storage import filesystem, is_local
from ..warehouse import deletes as position_deletes

BATCH_ROWS = 65536
_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # session -> names registered


def conform(batch: pa.RecordBatch, target: pa.Schema, names: dict[str, str] | None = None) -> pa.RecordBatch:
    """The batch with exactly the declared columns and types: Spark refuses a batch whose Arrow
    schema differs at all (`large_string` for `string`, another time zone name), and a column a
    file lacks is null. `names`: the batch's column for each declared one (default: the same name)."""
    have = set(batch.schema.names)
    source = names if names is not None else {f.name: f.name for f in target if f.name in have}
    arrays = [_cast(batch.column(source[f.name]), f.type) if source.get(f.name) in have
              else pa.nulls(batch.num_rows, f.type) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


FIELD_ID = "parquet.field.id"          # a Spark field's Iceberg field id (Spark's own metadata key)
_ARROW_FIELD_ID = b"PARQUET:field_id"   # the same in a Parquet file's Arrow schema


def field_ids(schema_ipc: bytes) -> dict[str, int]:
    """Top-level field ids by name of an Arrow schema with Iceberg ids (`Pending.schema_ipc`)."""
    schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    return {f.name: int(f.metadata[_ARROW_FIELD_ID]) for f in schema if f.metadata and _ARROW_FIELD_ID in f.metadata}


def names_by_field_id(schema: pa.Schema) -> dict[int, str]:
    """A Parquet file's top-level columns by their Iceberg field id (columns without one left out)."""
    return {int(f.metadata[_ARROW_FIELD_ID]): f.name for f in schema if f.metadata and _ARROW_FIELD_ID in f.metadata}


def _columns_by_id(file_schema: pa.Schema, wanted: StructType) -> dict[str, str] | None:
    """Requested name -> the file's column holding that field id (None: the request has no ids)."""
    ids = {f.name: f.metadata.get(FIELD_ID) for f in wanted.fields if f.metadata and FIELD_ID in f.metadata}
    if not ids:
        return None
    by_id = names_by_field_id(file_schema)
    return {name: by_id[i] for name, i in ids.items() if i in by_id}


def _cast(column: pa.Array, to: pa.DataType) -> pa.Array:
    """`column` as `to`. Only where a column's type was converted in the source (`footer_schema`:
    an older file's type is not one `to` promotes) is a value that cannot be read as `to` null;
    any other failure is an error, never a silent null."""
    try:
        return column.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if widens(str(column.type), str(to)) or column.type in (pa.large_string(), pa.large_binary()):
            raise
        return pa.array([_value_as(v, to) for v in column.to_pylist()], type=to)


def _value_as(value, to: pa.DataType):
    try:
        return pa.scalar(value).cast(to).as_py() if value is not None else None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def spark_schema(arrow: pa.Schema) -> StructType:
    """Every column nullable (a file may lack it), without field metadata (field ids mean nothing to Spark)."""
    return from_arrow_schema(pa.schema([f.with_nullable(True).remove_metadata() for f in arrow]))


def register(spark: SparkSession, source: type[DataSource]) -> None:
    names = _registered.setdefault(spark, set())
    if source.name() not in names:
        spark.dataSource.register(source)
        names.add(source.name())


# -- dblog_parquet ----------------------------------------------------------------------------------
class ParquetFiles(DataSource):
    """Options: `files` (JSON list of URIs), `partitions` (groups of files, default one per file),
    `deletes` (JSON list of position delete files' URIs: the rows they name are left out), `rows`
    (JSON {URI: [row position, ...]}: only those rows of those files)."""

    @classmethod
    def name(cls) -> str:
        return "dblog_parquet"

    def schema(self) -> StructType:
        return spark_schema(footer_schema(json.loads(self.options["files"])))

    def reader(self, schema: StructType) -> DataSourceReader:
        files = json.loads(self.options["files"])
        return ParquetReader(schema, files, int(self.options.get("partitions") or len(files) or 1),
                             json.loads(self.options.get("deletes") or "[]"), json.loads(self.options.get("rows") or "{}"))


class ParquetReader(DataSourceReader):
    def __init__(self, schema: StructType, files: list[str], partitions: int, deletes: list[str] | None = None,
                 rows: dict[str, list[int]] | None = None):
        self.schema, self.files, self.n = schema, files, max(1, min(partitions, len(files)))
        self.deletes, self.rows = deletes or [], rows or {}

    def partitions(self) -> list[InputPartition]:
        # Round robin: files listed in time order tend to grow or shrink together.
        return [InputPartition(self.files[i::self.n]) for i in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        target = to_arrow_schema(self.schema, timezone="UTC")
        gone = position_deletes.positions(self.deletes)
        for uri in partition.value or []:
            f = open_file(uri)
            by_id = _columns_by_id(f.schema_arrow, self.schema)   # a table's data files: by field id
            names = by_id if by_id is not None else {n: n for n in target.names if n in f.schema_arrow.names}
            present = list(dict.fromkeys(names.values()))
            if uri in self.rows:   # a few rows of a big file (`merge.delta`)
                for batch in f.read(columns=present).take(pa.array(sorted(self.rows[uri]), pa.int64())).to_batches():
                    yield conform(batch, target, names)
                continue
            offset = 0
            for batch in f.iter_batches(BATCH_ROWS, columns=present):
                kept = position_deletes.kept(batch.num_rows, gone.get(uri), offset)
                offset += batch.num_rows
                yield conform(batch if kept is None else batch.filter(kept), target, names)


def open_file(uri: str) -> pq.ParquetFile:
    """A Parquet file, or a table's segment inside a shared segment (`stagedlog.shared_segments`)."""
    member = parse_member(uri)
    fs, path = filesystem(member[0] if member else uri)
    return shared_segments.member_file(fs, path, member[1]) if member else pq.ParquetFile(path, filesystem=fs)


def footer_schema(uris: list[str]) -> pa.Schema:
    """The union of the files' schemas (first file's column order, then new columns), footers only.
    A column whose type changed to one the older cannot be promoted to takes the last file's type
    (files are given in log order): older files' values are cast where they can be, else null
    (`conform`); the type conversion's repair re-reads every row after it anyway."""
    return unified(footer_schemas(uris))


def footer_schemas(uris: list[str]) -> list[pa.Schema]:
    """Each file's schema, from its footer."""
    with ThreadPoolExecutor(8) as pool:   # a GET each on an object store
        return list(pool.map(lambda uri: open_file(uri).schema_arrow, uris))


def unified(schemas: list[pa.Schema]) -> pa.Schema:
    """`footer_schema` of files with these schemas (in log order)."""
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        newest = {f.name: f for s in schemas for f in s}   # the last file's type of each column wins
        names = list(dict.fromkeys(f.name for s in schemas for f in s))
        return pa.schema([newest[n] for n in names], metadata=schemas[-1].metadata)


def read_files(spark: SparkSession, uris: list[str], schema: StructType | None = None,
               deletes: list[str] | None = None) -> DataFrame:
    """The rows of Parquet files on any storage, columns merged across files; with `schema` (a
    table's), read as that schema: a column a file lacks is null, a narrower type is widened
    (Spark's mergeSchema refuses int beside bigint). `deletes`: position delete files (URIs) whose
    rows are left out."""
    if not uris:
        raise ValueError("read_files: no file to read")
    if deletes:
        return read_with_source(spark, uris, schema, deletes)
    if all(is_local(u) and parse_member(u) is None for u in uris):   # Spark's own reader: about twice as fast
        reader = spark.read.schema(schema) if schema is not None else spark.read.option("mergeSchema", "true")
        try:
            return reader.parquet(*uris)
        except Exception as exc:   # py4j's error, raised while the schemas are merged (not lazily)
            if schema is not None or "CANNOT_MERGE_SCHEMAS" not in str(exc):
                raise
            # A column's type changed between files (a source type conversion): `footer_schema`.
    return read_with_source(spark, uris, schema)


def read_with_source(spark: SparkSession, uris: list[str], schema: StructType | None = None,
                     deletes: list[str] | None = None, rows: dict[str, list[int]] | None = None) -> DataFrame:
    """`read_files` through `dblog_parquet`, whatever the storage (`rows`: only these rows of these
    files, by position)."""
    register(spark, ParquetFiles)
    partitions = min(len(uris), 2 * spark.sparkContext.defaultParallelism)
    return (spark.read.format("dblog_parquet").schema(schema or spark_schema(footer_schema(uris)))
            .option("files", json.dumps(uris)).option("partitions", str(partitions))
            .option("deletes", json.dumps(deletes or [])).option("rows", json.dumps(rows or {})).load())


# -- dblog_iceberg ----------------------------------------------------------------------------------
class IcebergTable(DataSource):
    """Options: `root` (warehouse root), `identifier` (JSON [namespace, name]), `snapshot_id`
    (default: the current one when the reader is planned)."""

    @classmethod
    def name(cls) -> str:
        return "dblog_iceberg"

    def schema(self) -> StructType:
        return iceberg_schema(self._scan().projection())

    def reader(self, schema: StructType) -> DataSourceReader:
        return IcebergReader(self.options["root"], schema, self._scan())

    def _scan(self):
        from ..warehouse import catalog
        table = catalog.load(self.options["root"]).load_table(tuple(json.loads(self.options["identifier"])))
        snapshot = self.options.get("snapshot_id")
        if snapshot and table.metadata.snapshot_by_id(int(snapshot)) is None:
            raise ValueError(f"{table.name()}: no snapshot {snapshot} (expired?)")
        return table.scan(snapshot_id=int(snapshot)) if snapshot else table.scan()


def iceberg_schema(schema) -> StructType:
    """Spark's view of an Iceberg schema: timestamptz -> timestamp, timestamp -> timestamp_ntz."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    return spark_schema(schema_to_pyarrow(schema, include_field_ids=False))


class IcebergReader(DataSourceReader):
    """Planned in the driver's planner worker (which pickles this reader for the executors before
    it calls `partitions()`, hence the planning here); one partition per data file."""

    def __init__(self, root: str, schema: StructType, scan):
        self.root, self.schema = root, schema
        self.metadata, self.projection = scan.table_metadata, scan.projection()
        self.tasks = list(scan.plan_files())

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(len(self.tasks))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:   # what Spark reads for a table without files
            return
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO

        from ..warehouse.catalog import io_properties
        target = to_arrow_schema(self.schema, timezone="UTC")
        io = PyArrowFileIO(io_properties(self.root))   # credentials from the executor's environment
        scan = ArrowScan(self.metadata, io, self.projection, AlwaysTrue())
        for batch in scan.to_record_batches([self.tasks[partition.value]]):
            yield conform(batch, target)


def spark_table(spark, warehouse, source: str, table: str, snapshot_id: int | None = None):
    """A DataFrame of one snapshot (default: the current one) of the table, for Spark without the
    Iceberg runtime. The snapshot is resolved here so every partition reads the same one."""
    t = warehouse.load(source, table)
    if t is None:
        raise WarehouseError(f"{source}/{table}: no warehouse table yet (nothing merged)")
    snapshot = t.snapshot_by_id(snapshot_id) if snapshot_id is not None else t.current_snapshot()
    if snapshot is None:
        raise WarehouseError(f"{source}/{table}: " + ("no snapshot yet" if snapshot_id is None
                                                   else f"no snapshot {snapshot_id} (expired?)"))
    register(spark, IcebergTable)
    schema = iceberg_schema(t.scan(snapshot_id=snapshot.snapshot_id).projection())
    return (spark.read.format("dblog_iceberg").schema(schema).option("root", warehouse.root)
            .option("identifier", json.dumps(list(warehouse.identifier(source, table))))
            .option("snapshot_id", str(snapshot.snapshot_id)).load())
