"""The staged row format: what the capture and a dump write and every reader reads.

    {source}/log/{table}/{first position}_{last position}.parquet    a segment of the change log
    {source}/chunks/{table}/{dump id}/{chunk number:08d}.parquet       one dump chunk

A log row is an event's data columns (the row after the change; a delete's row before it) plus
`log_fields`; a chunk row is a row read by a dump (or, for a requested key the source does not
have, only that key) plus `CHUNK_FIELDS`; a range chunk in `WarehouseForm` also carries the
warehouse's `_dblog_*` columns, which no staged reader reads (`data_columns` leaves out every
`_` column). Both carry the table's name and key in the Arrow schema
metadata. `staging.StagedLog` decides where files go and writes them atomically; this module
alone says what their names, columns and op codes mean, so a writer and a reader cannot disagree.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

import pyarrow as pa

from ..errors import InvalidValue
from .events import ChangeEvent
from .schema import IDENT, Column, TableSchema, coerce, normalize_key


class Op(StrEnum):
    """The `_op` of a staged row (a str, so it compares, hashes and serializes as its code)."""
    INSERT = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"      # a row a dump read
    ABSENT = "x"    # a key a key-list dump requested and the source does not have: the row is gone


TOMBSTONES = (Op.DELETE, Op.ABSENT)  # the ops after which the key has no row

# Metadata columns. A chunk's own metadata columns are `_` + a ChunkMeta field's name. A MariaDB/MySQL
# transaction staged in pieces (`sources.base.Transaction`) has `_txid` only on its commit's part, and
# `_commit_ts` on the others is the time their statement ran: the binlog names both only at the end.
POSITION, OP, TXID, COMMIT_TS, UNCHANGED = "_position", "_op", "_txid", "_commit_ts", "_unchanged"
OLD_KEY, BEFORE = "_old_key", "_before"
DUMP_ID, CHUNK, LW, HW = "_dump_id", "_chunk", "_lw", "_hw"
KEY_FROM, KEY_TO = "_key_from", "_key_to"

LOG_FIELDS = [
    pa.field(POSITION, pa.string(), nullable=False),
    pa.field(OP, pa.string(), nullable=False),
    pa.field(TXID, pa.string()),
    pa.field(COMMIT_TS, _INSTANT := pa.timestamp("us", tz="UTC")),
    pa.field(UNCHANGED, pa.list_(pa.string())),  # columns the event does not carry (see ChangeEvent)
]

CHUNK_FIELDS = [
    pa.field(DUMP_ID, pa.string(), nullable=False),
    pa.field(CHUNK, pa.int64(), nullable=False),
    pa.field(OP, pa.string(), nullable=False),     # Op.READ or Op.ABSENT
    pa.field(LW, pa.string(), nullable=False),     # watermark ids (UUIDs) bracketing the read
    pa.field(HW, pa.string(), nullable=False),
    pa.field(KEY_FROM, pa.string()),               # range chunk: JSON of the exclusive lower key bound
    pa.field(KEY_TO, pa.string()),                 # range chunk: JSON of the last key read
    pa.field("_list_from", pa.int64()),            # key-list chunk: its slice [from, to) of the sorted list
    pa.field("_list_to", pa.int64()),
    pa.field("_read_ts", pa.timestamp("us", tz="UTC")),
]

_TABLE_META, _KEY_META = b"dblog.table", b"dblog.key"
_CHUNK_META = b"dblog.chunk"   # a chunk file's ChunkMeta as JSON, in its footer beside the columns
_WAREHOUSE_FORM = b"dblog.warehouse_form"   # a chunk's WarehouseForm, when it has one


def log_fields(schema: TableSchema) -> list[pa.Field]:
    """LOG_FIELDS plus two typed structs: `_old_key`, set when an update changed the primary key,
    and `_before`, an update's row before the change."""
    key_fields = [f for f in schema.arrow_fields() if f.name in schema.key]
    key_fields.sort(key=lambda f: schema.key.index(f.name))
    return LOG_FIELDS + [pa.field(OLD_KEY, pa.struct(key_fields)), pa.field(BEFORE, pa.struct(schema.arrow_fields()))]


def key_columns(schema: pa.Schema) -> list[str]:
    """The table's primary key columns, from a staged file's schema."""
    return (schema.metadata or {})[_KEY_META].decode().split(",")


def data_columns(names: list[str]) -> list[str]:
    return [n for n in names if not n.startswith("_")]


# -- file names ---------------------------------------------------------------------------------
SUFFIX = ".parquet"
_TEMPORARY = ".tmp-"


@dataclass(frozen=True)
class SegmentFile:
    """A log segment's name: the first and last position it holds (encoded positions never hold `_`).

    A segment holds every staged event of its table from its first position to its last: the
    capture stages a stretch of the log per flush, and a compacted segment is the union of
    consecutive ones. So a segment whose range lies within another's holds nothing the other
    lacks (`hidden_segments`), and readers list only the outer one."""
    first: str
    last: str

    @property
    def name(self) -> str:
        return f"{self.first}_{self.last}{SUFFIX}"

    @classmethod
    def parse(cls, path: str) -> SegmentFile:
        first, sep, last = path.rsplit("/", 1)[-1].removesuffix(SUFFIX).partition("_")
        if not (sep and first and last):
            raise InvalidValue(f"{path} is not a staged log segment (named first_last{SUFFIX})")
        return cls(first, last)

    def within(self, other: SegmentFile) -> bool:
        return other.first <= self.first and self.last <= other.last


def hidden_segments(names: Iterable[SegmentFile]) -> set[SegmentFile]:
    """The segments whose range lies within another's (see SegmentFile): small segments a
    compaction replaced, or a re-staged stretch inside an earlier segment."""
    hidden: set[SegmentFile] = set()
    reach: str | None = None  # the furthest last position of the segments starting earlier
    ordered = sorted(set(names), key=lambda n: (n.first, n.last))
    for i, name in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1].first == name.first:
            hidden.add(name)  # the next one starts there too and reaches further
        elif reach is not None and name.last <= reach:
            hidden.add(name)
        if reach is None or name.last > reach:
            reach = name.last
    return hidden


@dataclass(frozen=True)
class ChunkFile:
    """A chunk file's place: its dump's directory and its number there."""
    dump_id: str
    number: int

    @property
    def name(self) -> str:
        return f"{self.number:08d}{SUFFIX}"

    @classmethod
    def parse(cls, path: str) -> ChunkFile:
        dump_id, name = path.rsplit("/", 2)[-2:]
        try:
            return cls(dump_id, int(name.removesuffix(SUFFIX)))
        except ValueError:
            raise InvalidValue(f"{path} is not a staged chunk (named {{dump id}}/{{number}}{SUFFIX})") from None


def temporary_name() -> str:
    """Where a file is written before its rename; readers never list it."""
    return f"{_TEMPORARY}{uuid.uuid4().hex}{SUFFIX}"


def is_staged(base_name: str) -> bool:
    """A complete staged file (not a writer's temporary one)."""
    return base_name.endswith(SUFFIX) and not base_name.startswith(_TEMPORARY)


# -- log rows -------------------------------------------------------------------------------------
def log_table(schema: TableSchema, events: Sequence[ChangeEvent]) -> pa.Table:
    """Events of one table as a staged segment: the data columns (the after image, or the before
    image of a delete), then the metadata (`log_fields`). Column by column from the events as they
    are: this runs for every captured row, and a staged dict per event cost the capture ~1 µs an
    event (bench scenario 1). `decode_events` is its inverse."""
    target = arrow_schema(schema, log_fields(schema))
    data_fields = schema.arrow_fields()
    images = [e.after if e.after is not None else e.before for e in events]
    try:  # one pass in C over all images
        arrays = pa.array(images, type=pa.struct(data_fields)).flatten()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        arrays = [_array([(r or {}).get(f.name) for r in images], f) for f in data_fields]
    meta: dict[str, list | pa.Array] = {
        POSITION: [e.position for e in events], OP: [e.op for e in events], TXID: [e.txid for e in events],
        COMMIT_TS: commit_instants(events),
        OLD_KEY: [e.old_key for e in events],   # a tuple in key order: Arrow fills the struct field by field
        # A delete's data columns already are its before image; only updates need it apart.
        BEFORE: [e.before if e.after is not None else None for e in events],
        UNCHANGED: [e.unchanged or None for e in events]}
    arrays += [v if isinstance(v := meta[f.name], pa.Array) else _array(v, f) for f in list(target)[len(data_fields):]]
    return pa.Table.from_arrays(arrays, schema=target)


_EPOCH, _MICROSECOND = dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.timedelta(microseconds=1)


def commit_instants(events: Sequence[ChangeEvent]) -> pa.Array | list:
    """The events' commit times as microseconds since the epoch, each transaction's converted
    once: a transaction's events share its time, and Arrow converts a zoned datetime at ~0.15 µs
    a value (a fifth of a captured row's staging). A naive time (none is staged) goes the slow way."""
    out: list[int | None] = []
    last: dt.datetime | None = None
    micros = None
    try:
        for e in events:
            if e.commit_ts is not last:
                last = e.commit_ts
                micros = None if last is None else (last - _EPOCH) // _MICROSECOND
            out.append(micros)
    except TypeError:
        return [e.commit_ts for e in events]
    return pa.array(out, pa.int64()).cast(_INSTANT)


def decode_events(log: pa.Table, source: str, table: str) -> list[ChangeEvent]:
    """A segment's rows back as events (in the table's row order)."""
    if log.num_rows == 0:
        return []
    key_cols, data_cols = key_columns(log.schema), data_columns(log.column_names)
    out = []
    for r in log.to_pylist():
        old = r.get(OLD_KEY)
        row = {c: r[c] for c in data_cols}
        deleted = r[OP] == Op.DELETE
        out.append(ChangeEvent(source, table, Op(r[OP]), r[POSITION], tuple(r[c] for c in key_cols),
                               None if deleted else row, before=row if deleted else r.get(BEFORE),
                               old_key=None if old is None else tuple(old[c] for c in key_cols),
                               txid=r[TXID], commit_ts=r[COMMIT_TS], unchanged=r[UNCHANGED] or []))
    return out


# -- chunk rows -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkMeta:
    """What a chunk file says about its read, the same on every row. A range chunk covers the keys
    after `key_from` up to `key_to`; a key-list chunk the slice [list_from, list_to) of its dump's
    sorted key list."""
    dump_id: str
    chunk: int
    lw: str                          # watermark ids (UUIDs), not positions: the log has those
    hw: str
    read_ts: dt.datetime | None = None
    key_from: str | None = None      # JSON key; None: from the table's first key
    key_to: str | None = None
    list_from: int | None = None
    list_to: int | None = None

    def columns(self) -> dict:
        return {f"_{f.name}": getattr(self, f.name) for f in fields(self)}

    def footer(self) -> bytes:
        """The metadata as JSON, for the file's footer: a merge reads which window a chunk belongs
        to from 500 footers in 0.05 s, from their first rows in 0.9 s (docs/performance.md)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["read_ts"] = None if self.read_ts is None else self.read_ts.isoformat()
        return json.dumps(values).encode()

    @classmethod
    def of_footer(cls, schema: pa.Schema) -> ChunkMeta | None:
        """The metadata a chunk file's footer carries; None for a file staged before footers did."""
        text = (schema.metadata or {}).get(_CHUNK_META)
        if text is None:
            return None
        known = {f.name for f in fields(cls)}   # a later version's extra field is not ours to read
        values = {k: v for k, v in json.loads(text).items() if k in known}
        read_ts = values.pop("read_ts", None)
        return cls(**values, read_ts=None if read_ts is None else dt.datetime.fromisoformat(read_ts))

    @classmethod
    def of(cls, chunk: pa.Table) -> ChunkMeta | None:
        """The metadata of a chunk file's table; None for a chunk without rows."""
        if chunk.num_rows == 0:
            return None
        names = set(chunk.column_names)  # files staged before a column existed lack it
        return cls(**{f.name: chunk[f"_{f.name}"][0].as_py() for f in fields(cls) if f"_{f.name}" in names})


@dataclass(frozen=True)
class WarehouseForm:
    """A range chunk that is also a warehouse data file (`warehouse.adoption`): besides its staged
    columns it carries a warehouse row's `_dblog_*` columns and Iceberg field ids for a new table,
    so a first load can adopt it as it is (`merge.adopt`). Said in its footer: the bucket the dump
    put it in (buckets of `bucket_rows`, by its rows before the window) and the position its rows
    take (the source's log head once the split was read: inside the window, before its HW)."""
    bucket: int
    bucket_rows: int
    position: str

    def footer(self) -> dict[bytes, bytes]:
        return {_WAREHOUSE_FORM: json.dumps({"bucket": self.bucket, "bucket_rows": self.bucket_rows,
                                             "position": self.position}).encode()}

    @classmethod
    def of_footer(cls, schema: pa.Schema) -> WarehouseForm | None:
        text = (schema.metadata or {}).get(_WAREHOUSE_FORM)
        if text is None:
            return None
        values = json.loads(text)
        return cls(int(values["bucket"]), int(values["bucket_rows"]), str(values["position"]))


@dataclass(frozen=True)
class ChunkRow:
    """A chunk row: its key, and its values (None: the source does not have the key, Op.ABSENT)."""
    key: tuple
    row: dict | None


def absent_row(schema: TableSchema, key: tuple) -> tuple:
    """The staged row of a requested key the source does not have: the key, every other value null."""
    row: list = [None] * len(schema.columns)
    for i, v in zip(schema.key_indexes, key):
        row[i] = v
    return tuple(row)


def chunk_table(schema: TableSchema, meta: ChunkMeta, rows: list[tuple] | pa.Table, ops: list[Op] | Op) -> pa.Table:
    """A chunk's table: its rows (tuples in schema column order, as drivers return them, or a table
    of the staged column types, `rows_table`), an op each (or one for all)."""
    columns, constants = ({}, {OP: ops, **meta.columns()}) if isinstance(ops, Op) else ({OP: ops}, meta.columns())
    if isinstance(rows, pa.Table):
        table = with_meta(rows, schema, CHUNK_FIELDS, columns, constants)
    else:
        table = rows_table(schema, CHUNK_FIELDS, rows, columns, constants)
    return table.replace_schema_metadata({**(table.schema.metadata or {}), _CHUNK_META: meta.footer()})


def last_key(schema: TableSchema, rows: list[tuple] | pa.Table) -> tuple:
    """The key of the last of `rows` (not empty), as staged."""
    if isinstance(rows, pa.Table):
        return normalize_key(tuple(rows.column(c)[-1].as_py() for c in schema.key), schema)
    return normalize_key(schema.key_of_tuple(rows[-1]), schema)


def chunk_rows(chunk: pa.Table) -> list[ChunkRow]:
    key_cols, data_cols = key_columns(chunk.schema), data_columns(chunk.column_names)
    return [ChunkRow(tuple(r[c] for c in key_cols), None if r[OP] == Op.ABSENT else {c: r[c] for c in data_cols})
            for r in chunk.to_pylist()]


# -- Arrow tables ---------------------------------------------------------------------------------
def _array(values: list, field: pa.Field) -> pa.Array:
    try:  # drivers mostly hand over values Arrow converts as they are (in C)
        return pa.array(values, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        if pa.types.is_struct(field.type):
            names = [f.name for f in field.type]   # a tuple (an old key) is in field order
            rows = [v if v is None or isinstance(v, dict) else dict(zip(names, v)) for v in values]
            return pa.array([None if r is None else {f.name: coerce(r.get(f.name), f.type) for f in field.type}
                             for r in rows], type=field.type)
        if field.name.startswith("_"):
            raise
        return pa.array([coerce(v, field.type) for v in values], type=field.type)


def arrow_schema(schema: TableSchema, meta_fields: list[pa.Field]) -> pa.Schema:
    """A staged file's schema: the table's columns, then `meta_fields`, with its name and key."""
    meta = {_TABLE_META: schema.name.encode(), _KEY_META: ",".join(schema.key).encode()}
    return pa.schema(schema.arrow_fields() + meta_fields, metadata=meta)


def table_schema_of(staged: pa.Schema) -> TableSchema:
    """The table's schema a staged file was written with (`arrow_schema`'s inverse; a column's
    nullability and default are not staged: unknown)."""
    meta = staged.metadata or {}
    def ident(f: pa.Field) -> int | None:
        value = (f.metadata or {}).get(IDENT)
        return int(value) if value else None
    columns = tuple(Column(f.name, (f.metadata or {}).get(b"dblog.source_type", b"").decode(), f.type, None,
                           ident=ident(f)) for f in staged if not f.name.startswith("_"))
    return TableSchema(meta.get(_TABLE_META, b"").decode(), columns, tuple(key_columns(staged)))


def build_table(schema: TableSchema, meta_fields: list[pa.Field], rows: list[dict]) -> pa.Table:
    """Rows as dicts (data columns and metadata by name; missing ones are null)."""
    target = arrow_schema(schema, meta_fields)
    try:  # one pass in C over all rows: ~10x faster than a list per column
        return pa.Table.from_arrays(pa.array(rows, type=pa.struct(list(target))).flatten(), schema=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.Table.from_arrays([_array([r.get(f.name) for r in rows], f) for f in target], schema=target)


def rows_table(schema: TableSchema, meta_fields: list[pa.Field], rows: list[tuple],
               columns: dict[str, list] | None = None, constants: dict | None = None) -> pa.Table:
    """Rows as tuples in schema column order plus metadata columns given per row (`columns`) or
    once for all rows (`constants`)."""
    target = arrow_schema(schema, [])
    data = list(zip(*rows)) if rows else [()] * len(schema.columns)
    table = pa.Table.from_arrays([_array(list(values), f) for values, f in zip(data, target)], schema=target)
    return with_meta(table, schema, meta_fields, columns, constants) if meta_fields else table


def with_meta(data: pa.Table, schema: TableSchema, meta_fields: list[pa.Field],
              columns: dict[str, list] | None = None, constants: dict | None = None) -> pa.Table:
    """`data` (the table's columns in their staged types) with metadata columns, as `rows_table`."""
    n, columns, constants = data.num_rows, columns or {}, constants or {}
    arrays = list(data.columns)
    for f in meta_fields:
        arrays.append(_array(columns[f.name], f) if f.name in columns else
                      pa.repeat(pa.scalar(constants.get(f.name), type=f.type), n))
    return pa.Table.from_arrays(arrays, schema=arrow_schema(schema, meta_fields))
