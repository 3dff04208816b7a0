"""The names of a warehouse row's own columns, beside the table's: no Iceberg import, so a dump
that stages chunks in the warehouse's form (`adoption.warehouse_form`) does not load pyiceberg."""
from __future__ import annotations

# A live row's columns whose value nothing proved yet (null meanwhile; a repair re-reads the row).
MISSING = "_dblog_missing"
BUCKET = "_dblog_bucket"   # the key-range bucket: the table's identity partition
META = ("_dblog_position", "_dblog_op", "_dblog_origin", "_dblog_dump_id", "_dblog_merged_at", MISSING)
META_TYPES = ("string", "string", "string", "string", "timestamp", "array<string>")
# Soft-delete tables only (`DBLOG_SOFT_DELETE_TABLES`): a deleted row stays, flagged. Derived from
# `_dblog_op` by the file writer (`files.DataFiles`), so no merge path computes it.
DELETED = "_dblog_deleted"
