"""Table metadata without the copies: what keeps a small merge's catalog work small.

pyiceberg parses a table's metadata file at every load (three a merge: the merge's read, its
transaction, the catalog's check at commit) and deep-copies the whole metadata each time it
applies updates (at each read of a transaction's metadata and again in the catalog's commit). Both
grow with the snapshots the table keeps; at 600 snapshots the copies alone took 0.55 s of a
0.9 s merge. The metadata models are frozen and every update makes new ones, so:

- `apply_updates` applies updates as pyiceberg does, without the closing deep copy;
- `MetadataCachingSqlCatalog` keeps recently read or committed metadata by file location (a
  metadata file never changes once written): a load reads the catalog row, and parses the file
  only when another process committed it.

Private API of pyiceberg 0.12 (`_apply_table_update`, the catalog's staging and ORM hooks):
tests/unit/test_iceberg_warehouse.py covers commits and schema changes through them,
tests/unit/test_snapshot_history.py expiry and a second catalog reading another's commit.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.update import (
    RemoveSnapshotsUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis

KEPT = 128   # metadata objects a process keeps (a continuous merge touches a few dozen tables a cycle)


def apply_updates(base, updates: tuple, metadata_location: str | None = None):
    """The metadata `updates` make of `base` (pyiceberg's `update_table_metadata` for an existing
    table, sharing the unchanged parts instead of copying them)."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes():
        if metadata_location:
            metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if metadata.last_updated_ms == base.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def still_expirable(metadata, updates: tuple) -> tuple:
    """A merge's snapshot removal (`history`) narrowed to the snapshots the table still has and no
    ref holds: another writer may have expired or tagged some since the merge read the table (a
    removal carries no requirement, and pyiceberg refuses to remove a snapshot that is gone)."""
    present = {s.snapshot_id for s in metadata.snapshots}
    held = {ref.snapshot_id for ref in metadata.refs.values()}
    out = []
    for update in updates:
        if isinstance(update, RemoveSnapshotsUpdate):
            ids = [i for i in update.snapshot_ids if i in present and i not in held]
            if not ids:
                continue
            update = RemoveSnapshotsUpdate(snapshot_ids=ids)  # type: ignore[call-arg]
        out.append(update)
    return tuple(out)


class MetadataCachingSqlCatalog(SqlCatalog):
    """pyiceberg's SQL catalog, keeping parsed metadata by location and applying commits'
    updates without deep copies."""

    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        self._kept: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()

    def _keep(self, location: str, metadata) -> None:
        with self._lock:
            self._kept[location] = metadata
            self._kept.move_to_end(location)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)

    def _convert_orm_to_iceberg(self, orm_table) -> Table:
        location = orm_table.metadata_location
        with self._lock:
            metadata = self._kept.get(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            self._keep(table.metadata_location, table.metadata)
            return table
        return Table(identifier=Catalog.identifier_to_tuple(orm_table.table_namespace) + (orm_table.table_name,),
                     metadata=metadata, metadata_location=location,  # type: ignore[arg-type]
                     io=self._load_file_io(metadata.properties, location), catalog=self)  # type: ignore[attr-defined]

    def _update_and_stage_table(self, current_table, table_identifier, requirements, updates) -> StagedTable:
        if current_table is None:   # a new table: pyiceberg's own path validates it whole
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        updates = still_expirable(current_table.metadata, updates)
        metadata = apply_updates(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(
            version)
        return StagedTable(identifier=table_identifier, metadata=metadata, metadata_location=location,
                           io=self._load_file_io(properties=metadata.properties, location=location), catalog=self)

    def commit_table(self, table, requirements, updates) -> CommitTableResponse:
        response = super().commit_table(table, requirements, updates)
        self._keep(response.metadata_location, response.metadata)
        return response


__all__ = ["MetadataCachingSqlCatalog", "apply_updates", "still_expirable"]
