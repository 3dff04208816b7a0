"""Stand-ins for `dblog maintain` of the staged log: a warehouse that says what it merged, and a
state store in memory (tests without ZooKeeper, or whose warehouse a merge has not written)."""
from __future__ import annotations

from dblog.model.staged_format import ChunkFile
from dblog.stagedlog.staged_log import StagedLog
from dblog.warehouse.merged_state import TableState, to_ranges


class MergedWarehouse:
    """Says every table merged up to `upto` and every chunk staged when it was made (or `chunks`)."""

    def __init__(self, upto: str | None, chunks: dict[str, set[tuple[str, int]]] | None = None,
                 missing: frozenset[str] = frozenset()):
        self.upto, self.chunks, self.missing = upto, chunks or {}, missing

    @classmethod
    def of_everything(cls, staged: StagedLog, source: str, upto: str | None) -> MergedWarehouse:
        merged: dict[str, set[tuple[str, int]]] = {}
        for f in staged.inventory(source):
            if f.dump_id is not None:
                merged.setdefault(f.table, set()).add((f.dump_id, ChunkFile.parse(f.path).number))
        return cls(upto, merged)

    def state(self, source: str, table: str, files: bool = False) -> TableState | None:
        if table in self.missing:
            return None
        by_dump: dict[str, set[int]] = {}
        for dump_id, number in self.chunks.get(table, set()):
            by_dump.setdefault(dump_id, set()).add(number)
        return TableState(source, table, ["id"], [], log_upto=self.upto,
                          chunks={d: to_ranges(n) for d, n in by_dump.items()})


class MemoryStore:
    """The StateStore calls the staged log's maintenance makes, over a dict of nodes."""

    def __init__(self, nodes: dict | None = None, holders: dict | None = None):
        self.nodes, self.holders, self.leases = nodes or {}, holders or {}, []

    def get(self, path):
        return self.nodes.get(path)

    def get_many(self, paths):
        return {p: self.get(p) for p in paths}

    def children(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def lock_holders(self, path):
        return self.holders.get(path, [])

    def modified(self, path):
        return 0.0 if path in self.nodes else None

    def delete(self, path, recursive=False):
        for p in [p for p in self.nodes if p == path or p.startswith(path + "/")]:
            del self.nodes[p]

    def lease(self, path, owner, timeout):
        store = self
        store.leases.append(path)

        class Lease:
            def release(self):
                store.leases.remove(path)
        return Lease()
