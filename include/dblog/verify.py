"""Compare a source table with the state rebuilt from the staged log, row for row."""
from __future__ import annotations

from dataclasses import dataclass, field

from .reconcile import rebuild
from .rules import visible_rows
from .schema import TableSchema
from .sources.base import Source
from .staging import StagedLog, rows_table


def source_rows(source: Source, schema: TableSchema, page: int = 5000) -> dict[tuple, dict]:
    """The whole table through bounded keyset reads, normalized through the staged Arrow types."""
    out: dict[tuple, dict] = {}
    after = None
    while True:
        rows = source.select_chunk(schema, after, page)
        if not rows:
            return out
        for r in rows_table(schema, [], rows).to_pylist():
            out[schema.key_of(r)] = r
        after = schema.key_of_tuple(rows[-1])


@dataclass
class Diff:
    table: str
    source_rows: int
    staged_rows: int
    missing: list = field(default_factory=list)     # in the source, not rebuilt
    extra: list = field(default_factory=list)       # rebuilt, not in the source
    different: list = field(default_factory=list)   # both, other values

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different)


def compare(source: Source, staged: StagedLog, table: str) -> Diff:
    schema = source.table_schema(table, refresh=True)
    expected = source_rows(source, schema)
    state, _ = rebuild(staged, source.name, schema.name)
    actual = {k: {c: row.get(c) for c in schema.column_names} for k, row in visible_rows(state).items()}
    diff = Diff(schema.name, len(expected), len(actual))
    diff.missing = sorted(set(expected) - set(actual), key=repr)
    diff.extra = sorted(set(actual) - set(expected), key=repr)
    diff.different = sorted((k for k in set(expected) & set(actual) if expected[k] != actual[k]), key=repr)
    return diff
