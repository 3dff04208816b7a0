"""The change tables as Iceberg tables: where they live, their schema, how far they reach, expiry.

`merge.change_table` says what goes in them. One per warehouse table that `DBLOG_CHANGE_TABLES`
names, `("{source}__changes", table)`, append-only, an identity partition on the merge's day
(`_merged_day`; not Iceberg's day(_merged_at): pyiceberg writes that transform only with its
optional native module). Each snapshot records how far the table reaches (`Reach`).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import NestedField

from ..model.staged_format import COMMIT_TS, OP, POSITION, TXID, UNCHANGED
from . import catalog as C
from . import types as T

MERGED_AT, DAY = "_merged_at", "_merged_day"
META = ((OP, "string"), (POSITION, "string"), (COMMIT_TS, "timestamp"), (TXID, "string"),
        (UNCHANGED, "array<string>"), (MERGED_AT, "timestamp"), (DAY, "date"))
_UPTO, _TAKEN = "dblog.upto", "dblog.merged_at"
PROPERTIES = {**C.PROPERTIES, "commit.manifest-merge.enabled": "true", "dblog.changes": "true"}


@dataclass(frozen=True)
class Reach:
    """How far a change table reaches: the log position of its newest change (None: it holds
    none), and the warehouse commit whose dump rows it took last (`_dblog_merged_at`)."""
    upto: str | None
    taken: dt.datetime | None

    def properties(self) -> dict[str, str]:
        # `dblog.format` marks each snapshot as one holding the state, so the history rule may
        # expire every one but the head (`history.protected`).
        return {"dblog.format": C.FORMAT, _UPTO: self.upto or "", _TAKEN: self.taken.isoformat() if self.taken else ""}


def reach(t) -> Reach | None:
    """How far the change table reaches: what its newest snapshot recording it says (walking back
    past others', such as an expiry's delete), else what it was created with (its properties:
    the warehouse table's reach then); None: neither."""
    by_id = {s.snapshot_id: s for s in t.metadata.snapshots}
    sid = t.metadata.current_snapshot_id
    while sid is not None and sid in by_id:
        props = by_id[sid].summary.additional_properties or {}
        if _UPTO in props:
            return _parsed(props)
        sid = by_id[sid].parent_snapshot_id
    return _parsed(t.properties) if _UPTO in t.properties else None


def _parsed(props) -> Reach:
    taken = props.get(_TAKEN)
    return Reach(props.get(_UPTO) or None, dt.datetime.fromisoformat(taken) if taken else None)


def load(warehouse, source: str, table: str):
    """The change table, or None before its first append."""
    catalog = warehouse.catalog
    try:
        return catalog.load_table(C.identifier(catalog, C.changes_namespace(source), table))
    except NoSuchTableError:
        return None


def data_columns(t) -> list[tuple[str, str]]:
    """(name, Spark type) of the row's columns, every column it ever had and has now."""
    return T.data_columns(Schema(*[f for f in t.schema().fields if f.name not in dict(META)]))


def schema(columns: list[tuple[str, str]]) -> Schema:
    every = [*columns, *META]
    nested = iter(range(len(every) + 1, 2 * len(every) + 2))
    return Schema(*[NestedField(i, name, T.iceberg_type(t, lambda: next(nested)), required=False)
                    for i, (name, t) in enumerate(every, 1)])


def create(warehouse, source: str, table: str, columns: list[tuple[str, str]], start: Reach):
    """A new, empty change table that reaches `start` (the warehouse table's reach when it was
    created: it holds the changes after it)."""
    catalog = warehouse.catalog
    namespace = C.changes_namespace(source)
    warehouse._namespace(namespace)   # (created if need be, as a source's own)
    new = schema(columns)
    spec = PartitionSpec(PartitionField(source_id=new.find_field(DAY).field_id, field_id=1000,
                                        transform=IdentityTransform(), name=DAY))
    where = {} if C.is_rest(catalog) else {"location": C.location(warehouse.root, namespace, table)}
    props = {**PROPERTIES, **{k: v for k, v in start.properties().items() if k != "dblog.format"},
             "dblog.source": source, "dblog.table": table}
    return catalog.create_table(C.identifier(catalog, namespace, table), schema=new, partition_spec=spec,
                                properties=props, **where)


def expire_days(t, before: dt.datetime) -> None:
    """Delete the days before `before`'s (whole partitions: no file is rewritten); the delete's
    snapshot records the same reach."""
    held = reach(t)
    t.delete(LessThan(DAY, before.date().isoformat()),  # type: ignore[call-arg,arg-type]
             snapshot_properties=held.properties() if held is not None else {})
