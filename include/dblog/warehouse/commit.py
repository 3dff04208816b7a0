"""One merge, one Iceberg commit: the touched buckets' data files swapped on main, their tombstones
swapped on the tombstone branch, any schema change, and the `dblog.*` state, in one transaction.

Before the commit nothing a reader can reach changed (the new files are not referenced; a first
merge's table does not exist yet); a kill -9 anywhere leaves the previous snapshot current and the
orphan sweep (`maintain`) removes what the killed merge wrote.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import RemoveSnapshotsUpdate
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _OverwriteFiles

from ..errors import DBLogError
from ..faults import crash_point
from ..settings import settings
from . import history
from .catalog import BRANCH, FORMAT
from .metadata_cache import apply_updates

MERGE_MANIFESTS_AT = 8   # manifests of a snapshot before they are merged into one


class CommitError(DBLogError, RuntimeError):
    """The table changed under the merge (another writer); re-running the merge converges."""


@dataclass(frozen=True)
class WrittenFile:
    """One data file an executor wrote (a row of `files.WRITTEN`)."""
    uri: str
    bucket: int
    tombstone: bool
    rows: int
    missing: int


@dataclass
class Pending:
    """A merge's open transaction, until `commit` (then `committed`: the table as committed)."""
    tx: object
    location: str
    schema_ipc: bytes                                   # the staged schema with field ids, for the writers
    main: dict[int, list] = field(default_factory=dict)       # bucket id -> its DataFiles on main
    branch: dict[int, list] = field(default_factory=dict)     # ... on the tombstone branch
    committed: object = None
    expired: int = 0     # snapshots the commit expired (`history`)
    soft_deletes: bool = False   # deleted rows stay on main, flagged (`files.DataFiles`), never purged
    keep_new_tombstones: bool = False   # the merge's own tombstones outlive its purge (a change table reads them)

    @property
    def io(self):
        return self.tx._table.io


class MergeTransaction(Transaction):
    """A transaction whose `table_metadata` is computed once per set of updates, and without a
    deep copy (`metadata_cache.apply_updates`): pyiceberg applies every update to the table's
    metadata and deep-copies the result at each read, some 20 reads a merge (21 ms of a 92 ms
    small merge, and growing with the snapshots a table keeps). The metadata models are frozen and
    updates make new ones, so one result serves until the next update. Private API of pyiceberg
    0.12, as `MergingOverwrite`."""

    _seen: tuple | None = None   # (the table's metadata, the updates, the metadata they make)

    @property
    def table_metadata(self):
        seen = self._seen
        if seen is None or seen[0] is not self._table.metadata or seen[1] is not self._updates:
            seen = self._seen = (self._table.metadata, self._updates, apply_updates(self._table.metadata,
                                                                                    self._updates))
        return seen[2]


class MergingOverwrite(_OverwriteFiles):
    """An overwrite that also merges small manifests, as an append can (pyiceberg's overwrite adds
    one manifest per commit, and commit time grows with them). Private API of pyiceberg 0.12:
    tests/unit/test_iceberg_warehouse.py::test_manifests_stay_few_over_many_merges fails if an
    upgrade breaks it."""

    def _process_manifests(self, manifests):
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content != ManifestContent.DATA]
        return _ManifestMergeManager(8 << 20, MERGE_MANIFESTS_AT, True, self).merge_manifests(data) + deletes


def overwrite(tx, branch: str, properties: dict[str, str]) -> MergingOverwrite:
    operation = Operation.OVERWRITE if tx.table_metadata.snapshot_by_name(branch) else Operation.APPEND
    return MergingOverwrite(operation=operation, transaction=tx, io=tx._table.io, branch=branch,
                            snapshot_properties=properties)


def data_files(pending: Pending, written: list[WrittenFile]) -> list:
    """The DataFiles of the written files (one footer read each, in parallel: a GET each on S3),
    checked to sit in the bucket they were written for."""
    metadata = pending.tx.table_metadata  # type: ignore[attr-defined]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda f: parquet_file_to_data_file(pending.io, metadata, f.uri), written))
    for f, df in zip(written, out):
        if df.partition is None or df.partition[0] != f.bucket:   # a file without the column: partition None
            raise CommitError(f"{f.uri}: partition {df.partition} is not bucket {f.bucket}")
    return out


def commit(pending: Pending, written: list[WrittenFile], touched: set[int], properties: dict[str, str]) -> float:
    """Swap the touched buckets' files for the written ones on main and on the tombstone branch and
    record `properties`, in one catalog commit. Returns the seconds it took (footers read,
    manifests written, catalog swapped)."""
    started = time.monotonic()
    tx = pending.tx
    new = data_files(pending, written)
    with overwrite(tx, "main", properties) as ow:
        for b in sorted(touched):
            for df in pending.main.get(b, []):
                ow.delete_data_file(df)
        for f, df in zip(written, new):
            if not f.tombstone:
                ow.append_data_file(df)
    old_dead = [df for b in sorted(touched) for df in pending.branch.get(b, [])]
    new_dead = [df for f, df in zip(written, new) if f.tombstone]
    if old_dead or new_dead:
        with overwrite(tx, BRANCH, {"dblog.format": FORMAT}) as ow:
            for df in old_dead:
                ow.delete_data_file(df)
            for df in new_dead:
                ow.append_data_file(df)
    pending.expired = thin_history(tx)
    crash_point("merge.before_commit")   # manifests written, the catalog not swapped yet
    try:
        pending.committed = tx.commit_transaction()  # type: ignore[attr-defined]
    except (CommitFailedException, ValidationException) as exc:
        raise CommitError(f"the table changed while the merge ran (another writer?): {exc}; re-run the merge") \
            from exc
    return time.monotonic() - started


def thin_history(tx, by_count: bool = True) -> int:
    """Expire, in the transaction's own commit, the snapshots the history rule lets go (`history`):
    the metadata every commit rewrites stays bounded however often the table is merged (`by_count`
    False: only those past the keep window). Returns how many."""
    tuned = settings().warehouse
    keep = tuned.keep_snapshots if by_count else 2**62
    old = history.to_expire(tx.table_metadata, int(time.time() * 1000), tuned.keep_seconds, keep,
                            tuned.keep_all_seconds)
    if old:
        tx._apply((RemoveSnapshotsUpdate(snapshot_ids=sorted(old)),))  # type: ignore[call-arg]
    return len(old)
