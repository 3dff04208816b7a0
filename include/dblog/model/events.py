"""The change event: one row change (or watermark write) read from a source's log."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class ChangeEvent:
    source: str
    table: str                    # "schema.table"
    op: str                       # staged.Op: INSERT, UPDATE or DELETE
    position: str                 # encoded Position
    key: tuple                    # primary key values of the row after the change (before, for d)
    after: dict[str, Any] | None  # full row image after the change; None for deletes
    before: dict[str, Any] | None = None  # row image before, where the source gives it
    old_key: tuple | None = None  # set when an update changed the primary key
    txid: str | None = None
    commit_ts: datetime | None = None
    # Columns the event does not carry (PostgreSQL's unchanged TOASTed values, a MySQL session's
    # MINIMAL / NOBLOB row image): their value is the key's previous one, which the merge fills in.
    unchanged: list[str] = field(default_factory=list)

    def touched_keys(self) -> list[tuple]:
        """Keys this event touches: a primary-key update touches the old and the new key."""
        return [self.key] if self.old_key is None or self.old_key == self.key else [self.old_key, self.key]


@dataclass(frozen=True, slots=True)
class RepairNeed:
    """Rows the log did not describe in full, to be re-read from the source by a repair dump.

    `keys` None: the whole table (a statement-logged write: which rows it changed is unknown)."""
    table: str
    reason: str
    position: str | None = None
    keys: tuple[tuple, ...] | None = None


@dataclass(frozen=True, slots=True)
class ColumnRename:
    """A column renamed in the source at `position` (the DDL statement's on MariaDB, the next row
    change's on PostgreSQL): events before it carry the column as `old`, from it on as `new`.
    The merge renames the warehouse field (keeping its id and values; `dblog.merge.column_renames`)."""
    table: str
    old: str
    new: str
    position: str


# What a source's reader says beside row events, in log order: a repair to run, a column renamed.
SourceNote = RepairNeed | ColumnRename
