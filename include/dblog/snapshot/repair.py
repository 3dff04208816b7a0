"""Repairs: rows the change log did not describe in full are re-read from the source.

Who asks: the capture, for a MySQL rows event with a partial image (a session's
binlog_row_image MINIMAL / NOBLOB) or a statement-logged write (binlog_format STATEMENT in a
session: its rows never reach the log); the merge, for a row whose values the log left out
(PostgreSQL's unchanged TOAST values) where nothing older proves them. Requests are ZooKeeper
sequential nodes (`state.repairs_path`), written before the capture's checkpoint moves past
the event, so a crash repeats a request rather than losing it.

Who repairs: the `Repairer` thread of the capture's leader turns requests into dumps (a
key-list dump, or a full dump of the table for a statement-logged write) and runs them with
the same watermark algorithm as any dump, so a repair never overwrites a newer change. A
repair a previous leader left unfinished is resumed. Until a repair's chunks are merged,
`waiting` (shown by `dblog status` and the DBLog page) lists the keys it covers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..coordination import repair_requests, unlogged, watermark_index
from ..coordination import store as paths
from ..coordination.checkpoint import checkpoint_position
from ..coordination.repair_requests import REQUEST_KEYS, TABLE_ABOVE
from ..coordination.store import StateStore
from ..model.events import RepairNeed
from ..model.rules import may_restore
from ..model.schema import encode_key, normalize_key
from ..model.staged_format import ChunkFile
from ..sources.base import NoPrimaryKey, Source, SourceError, SourceUnavailable, UnknownTable
from ..stagedlog.staged_log import StagedLog
from .dump import CANCELLED, DONE, create_dump, dump_status, run_dump
from .dump_spec import DumpError, DumpSpec

if TYPE_CHECKING:
    from ..warehouse.tables import Warehouse

log = logging.getLogger("dblog.repair")
PREFIX = "repair-"   # the ids of repair dumps
POLL_S = 5.0         # how often the repairer looks for requests the merge made
# A landed repair's registration is kept this long for `dblog status` and the page, then dropped:
# a client that keeps writing partial images makes a repair every few seconds.
KEEP_LANDED_S = 600.0


@dataclass(frozen=True)
class RepairRequest:
    node: str
    table: str
    reason: str
    position: str | None
    keys: list | None        # JSON key values; None: the whole table
    requested_at: float
    # "keys": re-read these keys; "table": a full dump, then "gone"; "gone": once the warehouse
    # has merged past `position`, re-read the keys it has and the source no longer has.
    kind: str = "keys"


def coalesce(needs: Iterable[RepairNeed]) -> list[RepairNeed]:
    """One need per table and kind: a client writing partial images all the time makes one
    request per flush, not one per rows event. A whole-table need keeps the newest position
    (its deleted-rows repair must wait for the merge to pass all of them)."""
    keyed: dict[str, RepairNeed] = {}
    whole: dict[str, RepairNeed] = {}
    for n in needs:
        if n.keys is None:
            prior = whole.get(n.table)
            if prior is None or (n.position or "") > (prior.position or ""):
                whole[n.table] = n
        else:
            prior = keyed.get(n.table)
            keys = n.keys if prior is None else tuple(dict.fromkeys((prior.keys or ()) + (n.keys or ())))
            keyed[n.table] = RepairNeed(n.table, (prior or n).reason, (prior or n).position, keys)
    return [*keyed.values(), *whole.values()]


def plan(need: RepairNeed) -> str:
    """What the repair of `need` does, as the capture's log says it."""
    if need.keys is not None:
        return f"a repair dump re-reads {len(need.keys)} key(s)"
    return ("a repair dump re-reads every row of the table after it, then the keys the warehouse still has and "
            "the source no longer has (rows it deleted) are removed once the merge has passed it")


def _chunk_name(path: str) -> tuple[str, int]:
    name = ChunkFile.parse(path)
    return name.dump_id, name.number


def pending(store: StateStore, source: str) -> list[RepairRequest]:
    out = []
    for node in store.children(paths.repairs_path(source)):
        value = store.get(f"{paths.repairs_path(source)}/{node}")
        if value is not None:
            out.append(RepairRequest(node, value["table"], value["reason"], value.get("position"),
                                     value.get("keys"), value.get("requested_at", 0.0),
                                     value.get("kind") or ("keys" if value.get("keys") is not None else "table")))
    return out


def repair_dumps(store: StateStore, source: str) -> list[str]:
    return [d for d in store.children(paths.dumps_path(source)) if d.startswith(PREFIX)]


def landed(status: dict) -> bool:
    """A repair dump has landed once it is done and the merge took every chunk it staged (or it
    was cancelled)."""
    if status["state"] == CANCELLED:
        return True
    if status["state"] != DONE:
        return False
    for table, progress in status["tables"].items():
        merged = status["merged"].get(table) or {}
        if (progress or {}).get("chunks", 0) > merged.get("chunks", 0):
            return False
    return True


def waiting(store: StateStore, source: str) -> dict[str, dict]:
    """Per table, what still waits for a repair to land: queued requests and repair dumps not
    merged yet. `keys` counts keys (None: the whole table), `sample` shows a few."""
    out: dict[str, dict] = {}

    def entry(table: str) -> dict:
        return out.setdefault(table, {"keys": 0, "whole_table": False, "sample": [], "reasons": [], "dumps": []})

    for r in pending(store, source):
        e = entry(r.table)
        _add(e, r.keys, r.reason if r.kind != "gone" else f"removal of the rows it deleted, once merged: {r.reason}")
    for dump_id in repair_dumps(store, source):
        status = dump_status(store, source, dump_id)
        if landed(status):
            continue
        scope = store.get(paths.dump_path(source, dump_id)) or {}
        for table in scope.get("tables", []):
            e = entry(table)
            _add(e, scope.get("keys"), scope.get("reason") or "")
            e["dumps"].append({"id": dump_id, "state": status["state"]})
    return out


def not_landed(entry: dict) -> str:
    """A `waiting` entry as one phrase: what a table waits for before it is in sync."""
    scope = "every row" if entry.get("whole_table") else f"{entry.get('keys', 0)} key(s)"
    return f"a repair of {scope} has not landed ({'; '.join(entry.get('reasons') or [])[:160]})"


def key_id(key: tuple) -> str:
    """A key's identity across the forms it travels in (typed tuple, JSON list)."""
    return json.dumps(json.loads(encode_key(key)) if isinstance(key, tuple) else key, sort_keys=True)


def covered(store: StateStore, source: str, table: str) -> tuple[bool, set[str]]:
    """What repairs not landed yet will re-read of `table`: (the whole table?, key ids)."""
    whole, keys = False, set[str]()
    lists = [r.keys for r in pending(store, source) if r.table == table]
    for dump_id in repair_dumps(store, source):
        scope = store.get(paths.dump_path(source, dump_id)) or {}
        if table in scope.get("tables", []) and not landed(dump_status(store, source, dump_id)):
            lists.append(scope.get("keys"))
    for k in lists:
        if k is None:
            whole = True
        else:
            keys.update(key_id(x) for x in k)
    return whole, keys


def _add(entry: dict, keys: list | None, reason: str) -> None:
    if keys is None:
        entry["whole_table"] = True
    else:
        entry["keys"] += len(keys)
        entry["sample"] = (entry["sample"] + keys)[:10]
    if reason and reason not in entry["reasons"]:
        entry["reasons"].append(reason)


class _Stopped(Exception):
    pass


STUCK_AFTER_S = 60.0     # a repair registered without its progress (a crash inside create_dump)
LAND_AFTER_S = 3600.0    # a done repair counts as landed this long after it finished, even if a merge under-counted it
GONE_PARTS = 10          # key lists of removed rows turned into dumps per round (a TRUNCATE of a big table)


class Repairer:
    """Runs one source's repairs on a thread while its capture leads, on its own connection."""

    def __init__(self, store: StateStore, source: Source, staged: StagedLog, chunk_size: int | None = None,
                 warehouse: Warehouse | None = None):
        self.store, self.source, self.staged, self.chunk_size = store, source, staged, chunk_size
        # A statement-logged DELETE or a TRUNCATE leaves rows in the warehouse that a full dump
        # cannot remove (it reads only rows that exist): their keys are found there and re-read.
        self.warehouse = warehouse
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: float | None = None   # as the leader's thread (`start`)
        self.error: BaseException | None = None

    def start(self) -> None:
        # On ZooKeeper's clock, as the dump nodes' creation times are: leaders may be other hosts.
        self.store.put(paths.repairer_path(self.source.name), {"started_at": time.time()})
        self._started_at = self.store.modified(paths.repairer_path(self.source.name))
        self.source = self.source.clone()  # the capture's catalog reads never wait behind a chunk
        self._thread = threading.Thread(target=self._run, name=f"dblog-repair-{self.source.name}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current chunk; an unfinished repair dump is resumed by the next leader."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self.source.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except _Stopped:
                return
            except Exception as exc:  # noqa: BLE001 - the capture must go on; the next round retries
                self.error = exc
                log.error("%s: repair failed (%s); retrying in %.0f s", self.source.name, exc, POLL_S)
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _check_stop(self, *_) -> None:
        if self._stop.is_set():
            raise _Stopped()

    def run_once(self) -> list[str]:
        """Resume unfinished repair dumps, then turn queued requests into dumps, table by table.
        A table whose repair fails keeps its requests for the next round. Returns the dumps run."""
        ran = []
        for dump_id in repair_dumps(self.store, self.source.name):
            self._check_stop()
            try:
                ran += self._tend(dump_id)
            except _Stopped:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad repair must not hold up the others
                log.error("%s: repair dump %s: %s", self.source.name, dump_id, exc)
        by_table: dict[str, list[RepairRequest]] = {}
        for r in pending(self.store, self.source.name):
            by_table.setdefault(r.table, []).append(r)
        for table, requests in by_table.items():
            self._check_stop()
            try:
                ran += self._repair(table, requests)
            except _Stopped:
                raise
            except Exception as exc:  # noqa: BLE001 - kept queued: the next round retries
                expected = isinstance(exc, (SourceError, DumpError, ConnectionError, TimeoutError))
                log.error("%s: cannot repair %s yet (%s); retrying in %.0f s", self.source.name, table, exc, POLL_S,
                          exc_info=None if expected else exc)   # a bug shows its traceback
        return ran

    def _tend(self, dump_id: str) -> list[str]:
        """A repair dump left by an earlier round or leader: resume, re-request or drop it."""
        status = dump_status(self.store, self.source.name, dump_id)
        age = time.time() - (status["created_at"] or 0)
        finished = max([(p or {}).get("finished_at") or 0 for p in status["tables"].values()], default=0)
        if landed(status) or (status["state"] == DONE and time.time() - finished > LAND_AFTER_S):
            if age > KEEP_LANDED_S:
                self.store.delete(paths.dump_path(self.source.name, dump_id), recursive=True)
            return []
        if any(p is None for p in status["tables"].values()):
            # Registered, never given its progress: ask again, drop it. A dump registered before
            # this leader's repairer started was left by a previous leader (only the leader makes
            # them), so it need not wait out STUCK_AFTER_S: a kill -9 must not hold a repair a minute.
            # Both times are ZooKeeper's (node creation, the start mark): leaders may be other hosts.
            created = self.store.created(paths.dump_path(self.source.name, dump_id))
            orphan = self._started_at is not None and created is not None and created < self._started_at
            if age > STUCK_AFTER_S or orphan:
                scope = self.store.get(paths.dump_path(self.source.name, dump_id)) or {}
                for table in scope.get("tables", []):
                    repair_requests.append(self.store, self.source.name, table, scope.get("reason") or "repair",
                                           None, scope.get("keys"),
                                           "keys" if scope.get("keys") is not None else "table")
                self.store.delete(paths.dump_path(self.source.name, dump_id), recursive=True)
            return []
        if status["state"] in (DONE, CANCELLED):
            return []
        if status["failed"] or any(p.get("status") == "pending" for p in status["tables"].values()):
            try:
                return [self._run_dump(dump_id, resumed=True)]
            except DumpError as exc:  # its old worker still holds the lease: the next round
                log.info("%s: %s", self.source.name, exc)
            except (_Stopped, SourceUnavailable):
                raise
            except Exception:
                if not self._drop_if_gone(dump_id, list(status["tables"])):
                    raise
        return []

    def _drop_if_gone(self, dump_id: str, tables: list[str]) -> bool:
        """Drop a failing repair dump whose table is gone from the source (dropped, or renamed:
        the new name is dumped by a repair of its own); whether it was dropped."""
        gone = []
        for table in tables:
            try:
                self.source.table_schema(table, refresh=True)
            except UnknownTable:
                gone.append(table)
        if not gone:
            return False
        log.warning("%s: %s no longer exists; repair dump %s is dropped", self.source.name, ", ".join(gone), dump_id)
        self.store.delete(paths.dump_path(self.source.name, dump_id), recursive=True)
        return True

    def _repair(self, table: str, requests: list[RepairRequest]) -> list[str]:
        """Dumps for one table's requests; the requests are deleted once their dumps exist (a
        crash in between repeats a repair, it never loses one: dump ids derive from the request,
        so a repeat finds its dump instead of making another)."""
        reasons = "; ".join(dict.fromkeys(r.reason for r in requests))
        key_requests = [r for r in requests if r.kind == "keys"]
        keys = list({json.dumps(k): k for r in key_requests for k in r.keys or ()}.values())
        tables = [r for r in requests if r.kind == "table"]
        gone = [r for r in requests if r.kind == "gone"]
        whole = bool(tables) or len(keys) > TABLE_ABOVE
        todo: list[tuple[str, list | None, str]] = []
        handled = key_requests + tables
        if handled:
            # Named after the newest request it takes: a repeat of this round (a crash before the
            # requests were deleted) finds its dump, and a later request never maps onto a dump
            # registered before it (one that may already have read past the keys it touched).
            last = max(handled, key=lambda r: r.node).node
            if whole:
                todo.append((f"{last}-t", None, reasons))
            else:
                todo += [(f"{last}-{i}", part, reasons) for i, part in enumerate(repair_requests.parts(keys, REQUEST_KEYS))]
        if gone:
            # The newest the merge has passed: one removal serves every write up to it. Under a
            # steady stream of such writes the newest keeps moving, and waiting for it would hold
            # every removal until the writes stop.
            by_position = sorted(gone, key=lambda r: r.position or "")
            at = self._newest_merged(table, by_position)
            if at is not None:  # else the merge has not passed the first write yet
                found = self._gone_keys(table)
                parts = repair_requests.parts(found, REQUEST_KEYS)
                why = f"{len(found)} warehouse key(s) the source no longer has, after: {at.reason}"
                # Named by content: a later round (the next parts) or a repeat finds its own dump.
                todo += [(f"{at.node}-g{hashlib.sha1(json.dumps(part).encode()).hexdigest()[:10]}", part, why)
                         for part in parts[:GONE_PARTS]]
                if len(parts) <= GONE_PARTS:  # else the next round takes the next parts (these are covered then)
                    handled += [r for r in gone if (r.position or "") <= (at.position or "")]
        dump_ids = []
        for name, part, why in todo:
            dump_id = self._create(table, name, part, why)
            if dump_id is None:  # the table is gone, or can never be repaired (said in the log)
                return self._drop(requests)
            dump_ids.append(dump_id)
        if tables:  # then find what it deleted, once the merge has passed it
            newest = max(tables, key=lambda r: r.position or "")
            repair_requests.append(self.store, self.source.name, table, newest.reason,
                                   newest.position or self._checkpoint(), None, "gone")
        self._drop(handled)
        out = []
        for dump_id in dump_ids:
            self._check_stop()
            out.append(self._run_dump(dump_id))
        return out

    def _drop(self, requests: list[RepairRequest]) -> list[str]:
        for r in requests:
            self.store.delete(f"{paths.repairs_path(self.source.name)}/{r.node}")
        return []

    def _checkpoint(self) -> str | None:
        return checkpoint_position(self.store, self.source.name)

    def _gone_keys(self, table: str) -> list:
        """Keys the warehouse has and the source does not (JSON values), not already being
        repaired. Asked once the warehouse holds everything that could put such a row back
        (`_newest_merged`)."""
        if self.warehouse is None:
            log.warning("%s: no warehouse configured for the capture: rows of %s that a statement-logged write "
                        "or TRUNCATE deleted stay in the warehouse until `dblog verify` finds them",
                        self.source.name, table)
            return []
        state = self.warehouse.state(self.source.name, table)
        if state is None:
            return []  # nothing merged: no row to remove
        try:
            schema = self.source.table_schema(table, refresh=True)
        except (UnknownTable, NoPrimaryKey):   # (a table with no key: its whole re-read replaces every row)
            return []
        present = {key_id(normalize_key(k, schema)) for k in self.source.keys(schema)}
        _, covered_keys = covered(self.store, self.source.name, table)
        gone = [k for k in (normalize_key(tuple(k), schema) for k in self.warehouse.keys(self.source.name, table))
                if key_id(k) not in present and key_id(k) not in covered_keys]
        return [json.loads(encode_key(k)) for k in gone]

    def _newest_merged(self, table: str, by_position: list[RepairRequest]) -> RepairRequest | None:
        """The newest of the removal requests (oldest first) whose write the warehouse has passed
        (`_merged_before`, which holds for every earlier position once it holds for one). Without
        a warehouse there is nothing to wait for (`_gone_keys` says what that leaves undone)."""
        if self.warehouse is None:
            return by_position[-1]
        lo, hi, best = 0, len(by_position) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._merged_before(table, by_position[mid].position):
                best, lo = by_position[mid], mid + 1
            else:
                hi = mid - 1
        return best

    def _merged_before(self, table: str, position: str | None) -> bool:
        """Whether the warehouse holds everything staged that could still put back a row a write
        at `position` removed: the log's events before it, and every chunk whose window closed
        before it (HW before it: it may hold the row). A window still open at the write (its HW
        after it, or never written: a killed dump) holds the write and is dropped whole by the
        merge (`rules.blind_window`); one opened after it read after it. Waits for the capture to
        pass `position` first: every HW before it is indexed by then."""
        source = self.source.name
        if position is None:
            return True
        if (self._checkpoint() or "") < position:
            return False
        state = self.warehouse.state(source, table) if self.warehouse is not None else None
        done_upto = state.log_upto if state is not None else None
        if (done_upto or "") < position and self.staged.segments(source, table, high=position, after=done_upto):
            return False  # staged changes before the write are not merged yet
        pending = [p for p in self.staged.chunk_files(source, table)
                   if state is None or not state.chunk_merged(*_chunk_name(p))]
        metas = [i.meta for i in self.staged.chunk_infos(pending) if i.meta is not None]
        at = watermark_index.positions(self.store, self.staged, source, {i for m in metas for i in (m.lw, m.hw)})
        blind = unlogged.intervals(self.store, source, table) if metas else []
        early = [m for m in metas if may_restore(at.get(m.lw), at.get(m.hw), position, blind)]
        if early:
            log.info("%s: the removal of %s's deleted rows waits for %d chunk(s) read before %s to be merged",
                     source, table, len(early), position)
        return not early

    def _create(self, table: str, name: str, keys: list | None, reasons: str) -> str | None:
        """Register repair dump `repair-{name}` (or find it, registered by an earlier try); None
        when it can never be created (a dropped table, no primary key any more: said loudly).
        A transient error raises: the requests stay queued."""
        dump_id = f"{PREFIX}{name}"
        if self.store.get(paths.dump_path(self.source.name, dump_id)) is not None:
            return dump_id
        spec = DumpSpec(tables=[table], keys=keys, chunk_size=self.chunk_size, dump_id=dump_id, reason=reasons)
        try:
            create_dump(self.store, self.source, spec)
        except UnknownTable:
            log.warning("%s: %s no longer exists; its repair is dropped (%s)", self.source.name, table, reasons)
            return None
        except SourceUnavailable:
            raise
        except NoPrimaryKey:   # no key to name its rows by: a table without any is read whole
            if keys is None:
                raise
            return self._create(table, name, None, f"{reasons}; it has no key, so it is read whole")
        except (DumpError, SourceError) as exc:
            log.error("%s: %s cannot be repaired (%s): %s. Its rows may differ from the source: fix the table, "
                      "then run a full dump of it", self.source.name, table, reasons, exc)
            return None
        what = "every row" if keys is None else f"{len(keys)} key(s)"
        log.warning("%s: repair dump %s re-reads %s of %s: %s", self.source.name, dump_id, what, table, reasons)
        return dump_id

    def _run_dump(self, dump_id: str, resumed: bool = False) -> str:
        if resumed:
            log.info("%s: resuming repair dump %s", self.source.name, dump_id)
        run_dump(self.store, self.source, self.staged, dump_id, on_chunk=self._check_stop)
        log.info("%s: repair dump %s staged; the next merge applies it", self.source.name, dump_id)
        return dump_id
