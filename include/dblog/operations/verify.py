"""Compare a source table with a copy of it, row for row, per primary-key range.

The source is read in bounded keyset pages (no long transaction, no lock); each page is a key
range with a row count and a row hash on both sides, so drift is reported as the ranges (and
keys) a repair dump must cover. The copy is either the warehouse table (`dblog verify`) or the
state rebuilt from the staged log (`compare`, the engine's own check).
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..model.rules import visible_rows
from ..model.schema import TableSchema, dumps_json, encode_key
from ..model.staged_format import rows_table
from ..settings import settings
from ..sources.base import NoPrimaryKey, Source
from ..stagedlog.staged_log import StagedLog
from .reconcile import rebuild


def source_pages(source: Source, schema: TableSchema, page: int | None = None) -> Iterator[list[dict]]:
    """The whole table in key order through bounded keyset reads (`page` rows, default the
    setting's), as staged Arrow types."""
    page = page or settings().verify.page_rows
    after = None
    while True:
        rows = source.select_chunk(schema, after, page)
        if not rows:
            return
        yield rows_table(schema, [], rows).to_pylist()
        after = schema.key_of_tuple(rows[-1])


def source_rows(source: Source, schema: TableSchema, page: int | None = None) -> dict[tuple, dict]:
    return {schema.key_of(r): r for rows in source_pages(source, schema, page) for r in rows}


def row_hash(row: dict, columns: list[str]) -> int:
    digest = hashlib.blake2b(dumps_json([row.get(c) for c in columns]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass
class Range:
    """A source page's key range: [first, last] with each side's row count and hash."""
    first: str
    last: str
    source_rows: int
    source_hash: str
    copy_rows: int
    copy_hash: str

    @property
    def equal(self) -> bool:
        return (self.source_rows, self.source_hash) == (self.copy_rows, self.copy_hash)


@dataclass
class Diff:
    table: str
    source_rows: int = 0
    staged_rows: int = 0                            # rows in the copy
    ranges: int = 0                                 # key ranges checked
    drifted: list[Range] = field(default_factory=list)
    missing: list = field(default_factory=list)     # in the source, not in the copy
    extra: list = field(default_factory=list)       # in the copy, not in the source
    different: list = field(default_factory=list)   # both, other values
    whole: bool = False     # a table with no key: rows compared as a multiset, repaired by a whole dump

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different)

    def keys(self) -> list[tuple]:
        """Every key a repair dump has to cover."""
        return sorted(set(self.missing) | set(self.extra) | set(self.different), key=repr)

    def repair(self) -> dict | None:
        """What a repair dump must cover: the drifted keys, or the whole table past the most keys
        one dump takes."""
        if self.equal:
            return None
        keys = self.keys()
        if self.whole or len(keys) > settings().dump.max_keys:
            return {"tables": [self.table], "keys": None}
        return {"tables": [self.table], "keys": [json.loads(encode_key(k)) for k in keys]}


def _hex(total: int) -> str:
    return f"{total % 2**64:016x}"


def compare_rows(schema: TableSchema, pages: Iterator[list[dict]], copy: dict[tuple, dict]) -> Diff:
    columns = schema.column_names
    diff, seen = Diff(schema.name, staged_rows=len(copy)), set()
    for rows in pages:
        s_hash = c_hash = c_rows = 0
        for r in rows:
            key = schema.key_of(r)
            seen.add(key)
            h = row_hash(r, columns)
            s_hash += h
            other = copy.get(key)
            if other is None:
                diff.missing.append(key)
                continue
            c_rows += 1
            o = row_hash(other, columns)
            c_hash += o
            if o != h:
                diff.different.append(key)
        diff.ranges += 1
        diff.source_rows += len(rows)
        drift = Range(encode_key(schema.key_of(rows[0])), encode_key(schema.key_of(rows[-1])), len(rows),
                      _hex(s_hash), c_rows, _hex(c_hash))
        if not drift.equal:
            diff.drifted.append(drift)
    diff.extra = sorted(set(copy) - seen, key=repr)
    diff.missing.sort(key=repr)
    diff.different.sort(key=repr)
    return diff


def compare(source: Source, staged: StagedLog, table: str, upto: str | None, page: int | None = None,
            unlogged: Sequence[tuple[str, str]] = ()) -> Diff:
    """Source against the state rebuilt from the staged log up to the checkpoint position `upto`
    (the engine's reference; `unlogged`: the table's `dblog.coordination.unlogged` intervals)."""
    schema = source.table_schema(table, refresh=True)
    state, _ = rebuild(staged, source.name, schema.name, upto, unlogged)
    copy = {k: {c: row.get(c) for c in schema.column_names} for k, row in visible_rows(state).items()}
    return compare_rows(schema, source_pages(source, schema, page), copy)


def compare_warehouse(source: Source, warehouse, table: str, page: int | None = None,
                      on_rows: Callable[[int, int], None] | None = None) -> Diff:
    """Source against its warehouse table (`dblog.warehouse.tables.Warehouse`); `on_rows(source
    rows compared, warehouse rows)` after each key range: the warehouse's count is the estimate."""
    try:
        schema = source.table_schema(table, refresh=True)
    except NoPrimaryKey:
        return _compare_whole(source, warehouse, source.keyless_schema(table), page)
    data = warehouse.read(source.name, schema.name, schema.column_names)
    copy = {schema.key_of(r): r for r in data.to_pylist()} if data is not None else {}
    pages = source_pages(source, schema, page)
    return compare_rows(schema, pages if on_rows is None else _counted(pages, len(copy), on_rows), copy)


def _compare_whole(source: Source, warehouse, schema: TableSchema, page: int | None) -> Diff:
    """A table with no key against its warehouse table, as multisets of rows (one read of each:
    it is synced whole, `stagedlog.whole_tables`); a row missing or extra is listed as its values."""
    columns = schema.column_names
    data = warehouse.read(source.name, schema.name, columns)
    copy = Counter(dumps_json([r[c] for c in columns]) for r in (data.to_pylist() if data is not None else []))
    rows = Counter(dumps_json([r[c] for c in columns]) for part in source.whole_table(schema, page or
                                                                                          settings().verify.page_rows)
                   for r in part.to_pylist())
    return Diff(schema.name, source_rows=sum(rows.values()), staged_rows=sum(copy.values()), ranges=1,
                missing=sorted((rows - copy).elements()), extra=sorted((copy - rows).elements()), whole=True)


def _counted(pages: Iterator[list[dict]], estimated: int, on_rows: Callable[[int, int], None]) -> Iterator[list[dict]]:
    done = 0
    for rows in pages:
        yield rows
        done += len(rows)
        on_rows(done, estimated)
