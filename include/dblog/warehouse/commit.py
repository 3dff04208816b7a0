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
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
)
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import RemoveSnapshotsUpdate
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _OverwriteFiles
from pyiceberg.typedef import KeyDefaultDict

from ..errors import DBLogError
from ..faults import crash_point
from ..settings import settings
from . import adoption, history
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
    adopted: bool = False   # a chunk file taken as it is (`adoption`): staged columns beside the table's


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


class _DeleteManifestWriter(ManifestWriterV2):
    """A manifest of delete files (pyiceberg 0.12 writes only data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class MergingOverwrite(_OverwriteFiles):
    """An overwrite that also merges small manifests, as an append can (pyiceberg's overwrite adds
    one manifest per commit, and commit time grows with them), and that adds and removes position
    delete files (`deletes`) in manifests of their own content, as the spec requires (pyiceberg's
    would list them in data manifests). Private API of pyiceberg 0.12:
    tests/unit/test_iceberg_warehouse.py::test_manifests_stay_few_over_many_merges and
    tests/unit/test_position_deletes.py fail if an upgrade breaks it."""

    def _process_manifests(self, manifests):
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content != ManifestContent.DATA]
        return _ManifestMergeManager(8 << 20, MERGE_MANIFESTS_AT, True, self).merge_manifests(data) + deletes

    def _writer(self, spec, content: ManifestContent):
        if content == ManifestContent.DATA:
            return self.new_manifest_writer(spec)
        return _DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id,
                                     self._compression)

    def _manifests(self):
        self._build_delete_files_partition_predicate()
        deleted = self._deleted_entries()
        written = []
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            added = [f for f in self._added_data_files if _manifest_content(f) == content]
            if added:
                with self._writer(self._transaction.table_metadata.spec(), content) as writer:
                    for f in added:
                        writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                           sequence_number=None, file_sequence_number=None, data_file=f))
                written.append(writer.to_manifest_file())
            groups: dict[int, list] = {}
            for entry in deleted:
                if _manifest_content(entry.data_file) == content:
                    groups.setdefault(entry.data_file.spec_id, []).append(entry)
            for spec_id, entries in groups.items():
                with self._writer(self.spec(spec_id), content) as writer:
                    for entry in entries:
                        writer.add_entry(entry)
                written.append(writer.to_manifest_file())
        return self._process_manifests(written + self._existing_manifests())

    def _deleted_entries(self):
        """The parent snapshot's entries of the removed files, delete files included (pyiceberg's
        looks at data files only); every removed file must be found."""
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        found = []
        may_hold = KeyDefaultDict(self._build_manifest_evaluator)
        for manifest in parent.manifests(self._io) if parent else []:
            if not may_hold[manifest.partition_spec_id](manifest):
                continue
            found += [ManifestEntry.from_args(status=ManifestEntryStatus.DELETED, snapshot_id=self._snapshot_id,
                                              sequence_number=e.sequence_number,
                                              file_sequence_number=e.file_sequence_number, data_file=e.data_file)
                      for e in manifest.fetch_manifest_entry(self._io, discard_deleted=True)
                      if e.data_file in self._deleted_data_files]
        missing = self._deleted_data_files - {e.data_file for e in found}
        if missing:
            raise ValidationException(f"Missing required files to delete: {', '.join(sorted(f.file_path for f in missing))}")
        return found

    def _existing_manifests(self):
        """The branch head's manifests, those listing a removed file rewritten without it (in a
        manifest of their own content)."""
        kept = []
        head = self._transaction.table_metadata.snapshot_by_name(name=self._target_branch)
        may_hold = KeyDefaultDict(self._build_manifest_evaluator)   # by partition: most manifests are not read
        for manifest in head.manifests(io=self._io) if head else []:
            if manifest.added_files_count == 0 and manifest.existing_files_count == 0:
                continue   # only files an earlier commit removed: a delete manifest's are never merged away
            if not may_hold[manifest.partition_spec_id](manifest):
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            left = [e for e in entries if e.data_file not in self._deleted_data_files]
            if len(left) == len(entries):
                kept.append(manifest)
            elif left:
                with self._writer(self.spec(manifest.partition_spec_id), manifest.content) as writer:
                    for e in left:
                        writer.add_entry(ManifestEntry.from_args(
                            status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id,
                            sequence_number=e.sequence_number, file_sequence_number=e.file_sequence_number,
                            data_file=e.data_file))
                kept.append(writer.to_manifest_file())
        return kept


def _manifest_content(data_file) -> ManifestContent:
    return ManifestContent.DATA if data_file.content == DataFileContent.DATA else ManifestContent.DELETES


def overwrite(tx, branch: str, properties: dict[str, str]) -> MergingOverwrite:
    operation = Operation.OVERWRITE if tx.table_metadata.snapshot_by_name(branch) else Operation.APPEND
    return MergingOverwrite(operation=operation, transaction=tx, io=tx._table.io, branch=branch,
                            snapshot_properties=properties)


def data_files(pending: Pending, written: list[WrittenFile]) -> list:
    """The DataFiles of the written files (one footer read each, in parallel: a GET each on S3),
    checked to sit in the bucket they were written for."""
    metadata = pending.tx.table_metadata  # type: ignore[attr-defined]
    plan = adoption.metrics_plan(metadata) if any(f.adopted for f in written) else None

    def data_file(f: WrittenFile):
        if f.adopted:
            return adoption.data_file(pending.io, metadata, f.uri, plan)
        return parquet_file_to_data_file(pending.io, metadata, f.uri)
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(data_file, written))
    for f, df in zip(written, out):
        if df.partition is None or df.partition[0] != f.bucket:   # a file without the column: partition None
            raise CommitError(f"{f.uri}: partition {df.partition} is not bucket {f.bucket}")
    return out


def commit(pending: Pending, written: list[WrittenFile], touched: set[int], properties: dict[str, str],
           deletes: dict[int, DataFile | None] | None = None, dropped: list[DataFile] | None = None) -> float:
    """Swap the touched buckets' files for the written ones on main and on the tombstone branch and
    record `properties`, in one catalog commit; a bucket in `deletes` (a delta merge: its position
    delete file, None if it replaced no row) keeps its files on main but those `dropped`, the
    written ones and the delete file added beside them.
    Returns the seconds it took (footers read, manifests written, catalog swapped)."""
    started = time.monotonic()
    tx = pending.tx
    deletes = deletes or {}
    new = data_files(pending, written)
    with overwrite(tx, "main", properties) as ow:
        for b in sorted(touched - set(deletes)):
            for df in pending.main.get(b, []):
                ow.delete_data_file(df)
        for f, df in zip(written, new):
            if not f.tombstone:
                ow.append_data_file(df)
        for df in deletes.values():
            if df is not None:
                ow.append_data_file(df)
        for df in dropped or []:
            ow.delete_data_file(df)
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
