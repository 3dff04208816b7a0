"""The warehouse: one Iceberg table (format v2) per source table, in the configured catalog.

Readers see the table's main branch: the live rows, the table's columns plus `_dblog_*` metadata,
one identity partition `_dblog_bucket` per key range. Tombstones live on the branch
`dblog-tombstones` of the same table; what was merged, in the `dblog.*` summary of main's snapshots.
"""
from __future__ import annotations

import json
import logging

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, In
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import IdentityTransform

from ..errors import WarehouseError
from ..settings import settings
from . import catalog as C
from . import deletes, history
from . import types as T
from .commit import CommitError, MergeTransaction, Pending
from .merged_state import Bucket, TableState

log = logging.getLogger("dblog.warehouse")


class Warehouse:
    def __init__(self, root: str | None = None, catalog_uri: str | None = None):
        if root is None:
            from ..connections import warehouse_root
            root = warehouse_root()
        self.root = C.warehouse_uri(root)
        self.catalog_uri = catalog_uri   # None: DBLOG_ICEBERG_CATALOG, else the default

    @property
    def catalog(self):
        return C.load(self.root, self.catalog_uri)

    def identifier(self, source: str, table: str) -> tuple[str, str]:
        return C.identifier(self.catalog, source, table)

    def load(self, source: str, table: str):
        """The pyiceberg Table, or None before the first merge."""
        try:
            return self.catalog.load_table(self.identifier(source, table))
        except NoSuchTableError:
            return None

    def tables(self, source: str) -> list[str]:
        """The source's tables that have a warehouse table (source names, `schema.table`)."""
        try:
            found = self.catalog.list_tables((source,))
        except NoSuchNamespaceError:
            return []
        if not C.is_rest(self.catalog):
            return sorted(name for _, name in found)
        return sorted(self.catalog.load_table(i).properties.get("dblog.table", i[-1]) for i in found)

    # -- reading --------------------------------------------------------------------------------
    def state(self, source: str, table: str, files: bool = False) -> TableState | None:
        """What the current snapshot holds (None before the first merge); with `files`, each
        bucket's data files and row counts too (metadata only, no data file is opened)."""
        t = self.load(source, table)
        return None if t is None else table_state(t, source, table, files)

    def table_summary(self, source: str, table: str) -> dict | None:
        """What a status page shows of the current snapshot, from the table's metadata alone."""
        state = self.state(source, table)
        if state is None:
            return None
        return {"table": table, "snapshot_id": str(state.snapshot_id), "merged_at": state.merged_at, "rows": state.rows,
                "tombstones": state.tombstones, "buckets": len(state.buckets), "log_upto": state.log_upto,
                "missing_rows": state.missing_rows}

    def read(self, source: str, table: str, columns: list[str], buckets: list[int] | None = None) -> pa.Table | None:
        """The live rows of the current snapshot (pyiceberg, no Spark): soft-deleted rows left out;
        columns the table does not have are null. None before the first merge."""
        t = self.load(source, table)
        if t is None:
            return None
        names = {f.name for f in t.schema().fields}
        present = [c for c in columns if c in names]
        where = In(T.BUCKET, set(buckets)) if buckets is not None else AlwaysTrue()  # type: ignore[call-arg,arg-type]
        if T.DELETED in names:
            where = And(where, EqualTo(T.DELETED, False))  # type: ignore[call-arg,arg-type,assignment]
        data = t.scan(selected_fields=tuple(present) or ("*",), row_filter=where).to_arrow()
        for c in columns:
            if c not in data.column_names:
                data = data.append_column(c, pa.nulls(data.num_rows))
        return data.select(columns)

    def data_files(self, source: str, table: str) -> list[str] | None:
        """Paths of the current snapshot's data files (local tables; benchmarks and tests read them
        as a plain Parquet dataset: rows a position delete file names are in them). None before
        the first merge."""
        t = self.load(source, table)
        if t is None:
            return None
        return [task.file.file_path.removeprefix("file://") for task in t.scan().plan_files()]

    def keys(self, source: str, table: str) -> list[tuple]:
        """The keys of the current snapshot's live rows (empty before the first merge)."""
        t = self.load(source, table)
        if t is None:
            return []
        key = json.loads(t.properties["dblog.key"])
        data = self.read(source, table, key)
        return list(zip(*(data.column(k).to_pylist() for k in key))) if data is not None else []

    def missing_keys(self, source: str, table: str, buckets: list[int]) -> dict[tuple, list[str]]:
        """Per key, the columns nothing proved yet, in the given buckets."""
        t = self.load(source, table)
        if t is None or not buckets:
            return {}
        key = json.loads(t.properties["dblog.key"])
        data = self.read(source, table, [*key, T.MISSING], buckets)
        assert data is not None
        return {tuple(r[k] for k in key): r[T.MISSING] for r in data.to_pylist() if r[T.MISSING]}

    # -- writing --------------------------------------------------------------------------------
    def _namespace(self, source: str) -> None:
        """The source's namespace, created if need be. Two first merges at once (tables merged side
        by side, or two processes) both find it missing and both create it: the loser uses the
        winner's."""
        try:
            self.catalog.create_namespace_if_not_exists((source,))
        except Exception:
            if not self.catalog.namespace_exists((source,)):
                raise

    def begin(self, source: str, table: str, key: list[str], columns: list[tuple[str, str]],
              state: TableState | None, renamed: dict[str, str] | None = None) -> Pending:
        """Open a merge's transaction: the table (created with it on the first merge, invisible
        until the commit) with its columns renamed (`renamed`: old -> new name) and become `columns`."""
        t = self.load(source, table) if state is not None else None
        soft = settings().warehouse.soft_deletes(table)
        if t is None:
            self._namespace(source)
            schema = T.schema(columns, soft)
            spec = PartitionSpec(PartitionField(source_id=schema.find_field(T.BUCKET).field_id, field_id=1000,
                                                transform=IdentityTransform(), name=T.BUCKET))
            props = {**C.PROPERTIES, "dblog.source": source, "dblog.table": table, "dblog.key": json.dumps(key)}
            where = {} if C.is_rest(self.catalog) else {"location": C.location(self.root, source, table)}
            tx = self.catalog.create_table_transaction(self.identifier(source, table), schema=schema,
                                                       partition_spec=spec, properties=props, **where)
        else:
            assert state is not None   # t is loaded only for a table with a state
            heads = (state.snapshot_id, state.branch_head)
            now = (t.current_snapshot().snapshot_id if t.current_snapshot() else None,
                   getattr(t.snapshot_by_name(C.BRANCH), "snapshot_id", None))
            if heads != now:   # another writer committed since the merge read the table
                raise CommitError(f"{source}/{table} changed while the merge read it (another writer?); "
                                  "re-run the merge")
            if soft != (T.DELETED in {f.name for f in t.schema().fields}):
                soft = not soft   # the table's own mode: its rows cannot be re-marked in place
                if (source, table) not in _TOLD:
                    _TOLD.add((source, table))
                    log.warning(_soft_switched(source, table, soft))
            tx = MergeTransaction(t)
            if renamed or T.needs_evolution(t.schema(), columns):
                T.evolve(tx, t.schema(), columns, renamed)
        metadata = tx.table_metadata
        schema_ipc = schema_to_pyarrow(metadata.schema(), include_field_ids=True).serialize().to_pybytes()
        pending = Pending(tx, metadata.location.rstrip("/"), schema_ipc, soft_deletes=soft)
        if state is not None:
            for b in state.buckets:
                pending.main[b.id], pending.branch[b.id] = b.files + b.deletes, b.tombstones
        return pending

    def drop(self, source: str, table: str) -> bool:
        """Remove a table and its files (`dblog warehouse drop`); whether it existed."""
        t = self.load(source, table)
        if t is None:
            return False
        location = t.metadata.location
        self.catalog.purge_table(self.identifier(source, table))
        from ..storage import filesystem
        fs, path = filesystem(location)
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            pass
        return True


_TOLD: set[tuple[str, str]] = set()   # tables whose setting and mode differ, said once per process


def _soft_switched(source: str, table: str, soft: bool) -> str:
    now, kept = ("no longer names", "soft deletes") if soft else ("names", "hard deletes")
    return (f"{source}/{table}: DBLOG_SOFT_DELETE_TABLES {now} the table, but its warehouse table was created with "
            f"{kept}, which its merges keep: its rows cannot be re-marked in place. To change it, rebuild the table "
            f"under the new setting: `dblog warehouse drop --source {source} --table {table}`, then `dblog dump "
            f"--source {source} --table {table}`")


def live_rows(snapshot) -> int:
    """The rows a snapshot shows: its data files' records less those its position delete files name."""
    return int(snapshot.summary["total-records"] or 0) - int(snapshot.summary["total-position-deletes"] or 0)


def table_state(t, source: str, table: str, files: bool = False) -> TableState:
    """The state of a loaded table's current snapshot (walking back past snapshots another writer
    made, such as a user's compaction, to the newest one dblog wrote)."""
    key = json.loads(t.properties["dblog.key"])
    columns = T.data_columns(t.schema())
    snapshot = history.state_snapshot(t.metadata)
    if snapshot is None:
        raise WarehouseError(f"{source}/{table}: no snapshot of the warehouse table records what dblog merged; "
                         f"drop it (dblog warehouse drop --source {source} --table {table}) and run a full dump")
    state = TableState.from_properties(source, table, key, columns, snapshot.summary.additional_properties)
    head = t.current_snapshot()
    state.snapshot_id = head.snapshot_id
    state.rows = live_rows(head)
    branch = t.snapshot_by_name(C.BRANCH)
    state.tombstones = int(branch.summary["total-records"] or 0) if branch is not None else 0
    state.branch_head = branch.snapshot_id if branch is not None else None
    if files:
        by_id = {b.id: b for b in state.buckets}
        for ref, attr, count in (("main", "files", "rows"), (C.BRANCH, "tombstones", "tombstone_rows")):
            if t.snapshot_by_name(ref) is None:
                continue
            for task in t.scan().use_ref(ref).plan_files():
                bucket = by_id.get(task.file.partition[0])
                if bucket is None:
                    raise WarehouseError(f"{source}/{table}: a data file of bucket {task.file.partition[0]} is in no "
                                     "bucket the snapshot records")
                getattr(bucket, attr).append(task.file)
                for d in task.delete_files:
                    if ref != "main" or not deletes.is_delete(d) or d.partition[0] != bucket.id:
                        # (equality deletes, or position deletes across buckets: a rewrite would bring rows back)
                        raise WarehouseError(f"{source}/{table}: another engine wrote delete files dblog cannot "
                                             f"apply into the table ({d.file_path}); dblog owns its rows and cannot "
                                             f"merge past them. Fix: dblog warehouse drop --source {source} --table "
                                             f"{table}, then a full dump")
                    if d not in bucket.deletes:
                        bucket.deletes.append(d)
                setattr(bucket, count, getattr(bucket, count) + task.file.record_count)
        for b in state.buckets:   # (a delta merge deletes only live rows: no row is named twice)
            b.rows -= sum(d.record_count for d in b.deletes)
    return state


__all__ = ["Warehouse", "Bucket", "TableState", "live_rows", "table_state"]
