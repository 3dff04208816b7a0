"""What the engine needs from a source database, and the SQL both families share.

Chunk SELECTs are the only reads of user tables: one bounded statement each, in primary-key
order, in its own READ COMMITTED transaction (autocommit), so they never hold locks across
statements (invariant 5). Identifiers are quoted by the dialect; values are always bound (for a
native read, by the Python driver's own interpolation, the same text it sends).
"""
from __future__ import annotations

import abc
import copy
import logging
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from ..errors import DBLogError, TransientError
from ..model.events import ChangeEvent, ColumnRename, RepairNeed, SourceNote
from ..model.schema import WHOLE_TABLE, Column, TableSchema
from ..model.schema_changes import diff
from ..model.staged_format import POSITION, rows_table
from .native import NativeReads, NativeUnfit

WATERMARK_SCHEMA = "dblog"
WATERMARK_TABLE = f"{WATERMARK_SCHEMA}.watermarks"
# A watermark row's id is "<deployment>:<slot>": every deployment on a server writes into the one
# watermark table, and its capture stages only the rows of its own deployment.
DEPLOYMENT_SEPARATOR = ":"

log = logging.getLogger("dblog.source")


def no_baseline(table: str) -> TableSchema | None:
    return None


def split_watermark_id(row_id: str) -> tuple[str | None, str]:
    """(deployment, slot) of a watermark row's id (`Source.watermark_id`); deployment None for
    an untagged row."""
    tag, sep, slot = row_id.partition(DEPLOYMENT_SEPARATOR)
    return (tag, slot) if sep else (None, tag)


class SourceError(DBLogError, RuntimeError):
    """A source is misconfigured or refused; the message names the problem and the fix."""


class SourceUnavailable(SourceError, TransientError):
    """The server is down or dropped the connection (a restart, a failover): worth retrying."""


class HistoryLost(SourceError):
    """The log at the checkpoint is gone: the stream has a gap only a full dump can repair."""


class UnknownTable(SourceError):
    pass


class NoPrimaryKey(SourceError):
    pass


class UnreadableEvent(SourceError):
    """A log event the capture cannot interpret correctly: it stops before staging it."""


@dataclass
class Transaction:
    """A committed source transaction: its events, and where to resume after it.

    A transaction of more than `capture.piece_rows` events comes as pieces (`complete` False,
    no resume point) as the log is read, then the rest with its commit: the capture stages a
    piece at once but moves its checkpoint only past a complete transaction, so its memory does
    not grow with the transaction and no reader takes a piece before the commit is staged. The
    part with the commit holds at least the transaction's last event: its position is the one
    the checkpoint moves to. An empty piece says a transaction is being read (a streamed one,
    spooled) with nothing to stage yet. A source may hand events already in the staged row format
    (`staged`, per table: a streamed PostgreSQL transaction's spooled pieces, `sources.spool`)."""
    events: list[ChangeEvent]
    resume: dict[str, Any] | None   # source-specific checkpoint for resuming after this txn (None: a piece)
    commit_ts: datetime | None = None
    # Rows the events do not describe in full (repairs), and columns renamed (`ColumnRename`).
    repairs: list[SourceNote] = field(default_factory=list)
    complete: bool = True
    staged: dict[str, pa.Table] = field(default_factory=dict)   # table -> rows (`staged_format.log_table`)

    @classmethod
    def piece(cls, events: list[ChangeEvent], staged: dict[str, pa.Table] | None = None) -> Transaction:
        """Events of a transaction whose commit has not been read yet."""
        return cls(events, None, complete=False, staged=staged or {})

    @property
    def rows(self) -> int:
        return len(self.events) + sum(t.num_rows for t in self.staged.values())

    def last_position(self) -> str | None:
        """The position of its last event (staged rows are in log order per table)."""
        last = [*(e.position for e in self.events[-1:]),
                *(t[POSITION][-1].as_py() for t in self.staged.values() if t.num_rows)]
        return max(last) if last else None


class Dialect:
    quote_char = '"'

    def quote(self, identifier: str) -> str:
        q = self.quote_char
        return q + identifier.replace(q, q + q) + q

    def table(self, name: str) -> str:
        schema, _, table = name.partition(".")
        return f"{self.quote(schema)}.{self.quote(table)}"

    def chunk_query(self, schema: TableSchema, after_key: tuple | None, limit: int | None,
                    upto_key: tuple | None = None, cols: str | None = None) -> tuple[str, list]:
        """Rows with after_key < key <= upto_key in key order, at most `limit` (None: all of them;
        a split whose upper key bounds it). Keyset pagination from the key index (`key_bound`).
        `cols`: another select list (a native read's)."""
        cols = cols or self.select_list(schema)
        where, params = self._key_range(schema, after_key, upto_key)
        keys = ", ".join(self.quote(c) for c in schema.key)
        order = f" ORDER BY {keys}" if keys else ""   # (a table with no key: only a LIMIT 0 check reads it so)
        if limit is None:
            return f"SELECT {cols} FROM {self.table(schema.name)}{where}{order}", params
        return f"SELECT {cols} FROM {self.table(schema.name)}{where}{order} LIMIT %s", [*params, int(limit)]

    def boundary_query(self, schema: TableSchema, after_key: tuple | None, upto_key: tuple | None,
                       rows: int) -> tuple[str, list]:
        """The key `rows` rows past after_key (at most upto_key): only key columns, so the key
        index answers it without reading the rows."""
        keys = ", ".join(self.quote(c) for c in schema.key)
        where, params = self._key_range(schema, after_key, upto_key)
        return (f"SELECT {keys} FROM {self.table(schema.name)}{where} ORDER BY {keys} LIMIT 1 OFFSET %s",
                [*params, int(rows) - 1])

    def _key_range(self, schema: TableSchema, after_key: tuple | None,
                   upto_key: tuple | None) -> tuple[str, list[Any]]:
        bounds = [self.key_bound(schema.key, op, key) for op, key in ((">", after_key), ("<=", upto_key))
                  if key is not None]
        where = " AND ".join(sql for sql, _ in bounds)
        return (f" WHERE {where}" if bounds else ""), [v for _, params in bounds for v in params]

    def key_bound(self, columns: tuple[str, ...], op: str, key: tuple) -> tuple[str, list[Any]]:
        """`(columns) op key` in key order (op: > or <=), in a form the key index serves as a
        range: a row-value comparison, which PostgreSQL scans from the bound."""
        cols = ", ".join(self.quote(c) for c in columns)
        marks = ", ".join(["%s"] * len(columns))
        return (f"({cols}) {op} ({marks})" if len(columns) > 1 else f"{cols} {op} %s"), list(key)

    def last_key_query(self, schema: TableSchema) -> str:
        keys = ", ".join(self.quote(c) for c in schema.key)
        desc = ", ".join(f"{self.quote(c)} DESC" for c in schema.key)
        return f"SELECT {keys} FROM {self.table(schema.name)} ORDER BY {desc} LIMIT 1"

    def select_list(self, schema: TableSchema) -> str:
        """The columns a chunk read selects, in schema order."""
        return ", ".join(self.quote(c) for c in schema.column_names)

    def native_select_list(self, schema: TableSchema) -> str | None:
        """The columns a native chunk read selects (`sources.native`), in schema order; None when
        one would not read as the Python driver reads it. Columns read through an expression are
        aliased apart, so ORDER BY a key column still sorts by the column itself (a DECIMAL key
        would otherwise page in the order of its text)."""
        out = []
        for i, c in enumerate(schema.columns):
            q = self.quote(c.name)
            how = self.native_column(q, c)
            if how is None:
                return None
            out.append(q if how == q else f"{how} AS {self.quote(f'_dblog_native_{i}')}")
        return ", ".join(out)

    def native_column(self, quoted: str, column: Column) -> str | None:
        """How a native read selects `column` (`quoted`): the column itself, an expression of it
        the native driver reads exactly, or None when it reads no such type exactly."""
        return None

    def keys_query(self, schema: TableSchema, keys: Sequence[tuple]) -> tuple[str, list]:
        cols = self.select_list(schema)
        key_cols = ", ".join(self.quote(c) for c in schema.key)
        one = "(" + ", ".join(["%s"] * len(schema.key)) + ")"
        sql = (f"SELECT {cols} FROM {self.table(schema.name)} WHERE ({key_cols}) IN "
               f"({', '.join([one] * len(keys))}) ORDER BY {key_cols}")
        return sql, [v for k in keys for v in k]


def unique_keys(rows: Iterable[tuple[str, str, str]]) -> list[tuple[str, list[str]]]:
    """From (index, column, nullable 'YES'/'NO') rows in index and column order: the unique indexes
    that can serve as a key (every column NOT NULL: NULLs are never equal), fewest columns first,
    then by name."""
    indexes: dict[str, list[tuple[str, str]]] = {}
    for index, column, nullable in rows:
        indexes.setdefault(index, []).append((column, nullable))
    usable = sorted((len(cols), index) for index, cols in indexes.items()
                    if all(column and nullable == "NO" for column, nullable in cols))
    return [(index, [c for c, _ in indexes[index]]) for _, index in usable]


class Source(abc.ABC):
    """A captured database: its catalog, watermark writes, chunk reads and change stream."""

    kind: str
    dialect: Dialect
    namespace: str  # the database (MySQL) or schema (PostgreSQL) whose tables are captured

    def __init__(self, name: str):
        self.name = name
        self._conn: Any = None  # the driver's connection (mysqlclient or psycopg2)
        self._lock = threading.Lock()
        self._schemas: dict[str, TableSchema] = {}
        self._known: dict[str, frozenset[str]] = {}  # table -> its columns, excluded ones included
        # The schema a table was last staged with, when this process has not read it yet (the
        # capture sets it to the staged log's): a change made while the capture was down is found.
        self.baseline: Callable[[str], TableSchema | None] = no_baseline
        # Columns (personal data, say) that never reach the staged log: "schema.table" -> names.
        self.exclude: dict[str, frozenset[str]] = {}
        self.key_columns: dict[str, tuple[str, ...]] = {}   # table -> the columns a user named as its key
        self._keyless: set[str] = set()   # tables seen without any key (`schema_for_event`)
        # Which deployment's watermarks this source writes and stages (config.deployment_id);
        # None: untagged, as before deployments were told apart (a source built by hand).
        self.deployment: str | None = None
        self._foreign: set[str] = set()  # other deployments whose watermarks were seen (logged once)
        self._native: NativeReads | None = None  # the dump's native chunk reader, made at its first chunk
        self._told: set[tuple[str, bool]] = set()  # (table, a chunk's fallback): native fallbacks logged once
        self.fallbacks = 0  # chunks the native reader gave up on, read by the Python driver instead

    def clone(self) -> Source:
        """The same source on a connection of its own, so another thread's reads never wait on
        this one's (the capture's repairs)."""
        other = copy.copy(self)
        other._conn, other._lock, other._schemas, other._known = None, threading.Lock(), {}, {}
        other._keyless = set()
        other._native, other._told, other.fallbacks = None, set(), 0
        return other

    def __getstate__(self) -> dict:
        """A source travels to Spark executors (a dump's split reads) without its connection,
        lock and caches: each process connects for itself."""
        state = dict(self.__dict__)
        state.update(_conn=None, _lock=None, _schemas={}, _known={}, _keyless=set(), _native=None, _told=set(),
                     fallbacks=0,
                     baseline=no_baseline)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # One SQL connection per source object, shared by the capture's reading and staging threads.
    _disconnects: tuple[type[BaseException], ...] = ()  # driver errors after which it is replaced

    @abc.abstractmethod
    def connect(self):
        """A new autocommit DB-API connection (READ COMMITTED, UTC)."""

    def _usable(self, conn) -> bool:
        return True

    def transient(self, exc: BaseException) -> bool:
        """Whether `exc` only says the server is (for now) unreachable: retry, don't fail."""
        return isinstance(exc, SourceUnavailable) or (
            isinstance(exc, self._disconnects) and self._lost_connection(exc))

    def _lost_connection(self, exc: BaseException) -> bool:
        return False

    def _run(self, sql: str, params=None, fetch: bool = True):
        """Run one autocommitted statement on the source's SQL connection: its rows, or (`fetch`
        False) the rows it affected."""
        with self._lock:
            conn = self._connection()
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, params)
                    return list(cur.fetchall()) if fetch else cur.rowcount
            except self._disconnects:
                self._conn = None  # reconnect on the next statement
                raise

    def _connection(self):
        """The SQL connection, opened again if the server dropped it (the caller holds `_lock`)."""
        if self._conn is None or not self._usable(self._conn):
            self._conn = self.connect()
        return self._conn

    @property
    @abc.abstractmethod
    def user(self) -> str:
        """The capture user, for messages that tell what to grant."""

    # catalog -----------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """Captured tables, "schema.table" (the watermark table lives in another namespace)."""
        rows = self._run("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                         "AND table_type = 'BASE TABLE' ORDER BY table_name", [self.namespace])
        return [f"{self.namespace}.{r[0]}" for r in rows]

    @abc.abstractmethod
    def _catalog_columns(self, schema_name: str, name: str) -> list[Column]:
        """The table's columns in order, with their Arrow types; empty if not visible."""

    @abc.abstractmethod
    def _catalog_key(self, schema_name: str, name: str) -> list[str]:
        """The primary key's columns in key order; empty if none."""

    def table_schema(self, table: str, refresh: bool = False) -> TableSchema:
        """Columns and primary key (cached; `refresh` after DDL); UnknownTable / NoPrimaryKey with the fix."""
        if not refresh and table in self._schemas:
            return self._schemas[table]
        schema_name, _, name = table.partition(".")
        if not name:
            schema_name, name = self.namespace, table
        columns = self._catalog_columns(schema_name, name)
        if not columns:
            raise UnknownTable(f"{self.name}: table {schema_name}.{name} does not exist, or user {self.user} "
                               f"may not read it. Known tables: {', '.join(self.tables()) or 'none'}.")
        try:
            key, key_from = self._key(schema_name, name, columns)
        except NoPrimaryKey:
            self._keyless.add(f"{schema_name}.{name}")
            raise
        self._keyless.discard(f"{schema_name}.{name}")
        excluded = self.exclude.get(f"{schema_name}.{name}", frozenset())
        if excluded & set(key):
            raise SourceError(f"{self.name}: cannot exclude key column(s) {', '.join(sorted(excluded & set(key)))} "
                              f"of {schema_name}.{name}: rows are matched by their key. Fix the exclude list.")
        # Excluded columns are left out of the schema, so no SELECT, segment or chunk carries them.
        columns = [c for c in columns if c.name not in excluded]
        schema = TableSchema(f"{schema_name}.{name}", tuple(columns), tuple(key), key_from)
        self._schemas[schema.name] = schema
        self._known[schema.name] = schema.column_set | excluded
        return schema

    def keyless_schema(self, table: str) -> TableSchema:
        """A table with no key at all (`table_schema` raises NoPrimaryKey for it): its columns and
        an empty key. Whole-table snapshots keep it in sync (`stagedlog.whole_tables`)."""
        schema_name, _, name = table.partition(".")
        if not name:
            schema_name, name = self.namespace, table
        excluded = self.exclude.get(f"{schema_name}.{name}", frozenset())
        columns = [c for c in self._catalog_columns(schema_name, name) if c.name not in excluded]
        if not columns:
            raise UnknownTable(f"{self.name}: table {schema_name}.{name} does not exist, or user {self.user} "
                               f"may not read it. Known tables: {', '.join(self.tables()) or 'none'}.")
        return TableSchema(f"{schema_name}.{name}", tuple(columns), (), WHOLE_TABLE)

    def whole_table(self, schema: TableSchema, batch_rows: int) -> Generator[pa.Table, None, None]:
        """Every row of the table in one statement, so in one consistent snapshot of it, in
        batches of staged rows. On a connection of its own: the streaming cursor holds it to the end."""
        conn = self.connect()
        try:
            cur = self._streaming_cursor(conn)
            cur.execute(f"SELECT {self.dialect.select_list(schema)} FROM {self.dialect.table(schema.name)}")
            while rows := cur.fetchmany(batch_rows):
                yield rows_table(schema, [], list(rows))
        finally:   # (the caller closes the generator early on a cancel, or on an error: see TableDump._whole)
            conn.close()

    def _streaming_cursor(self, conn):
        """A cursor that fetches rows as they are asked for, not the whole result at once."""
        return conn.cursor()

    def _key(self, schema_name: str, name: str, columns: list[Column]) -> tuple[list[str], str]:
        """The columns rows are matched by, and where they come from: the connection's
        `key_columns` for the table, else its primary key, else its first NOT NULL unique index."""
        table = f"{schema_name}.{name}"
        chosen = self.key_columns.get(table)
        if chosen:
            unknown = [c for c in chosen if c not in {col.name for col in columns}]
            if unknown:
                raise SourceError(f"{self.name}: key_columns names {', '.join(unknown)}, which {table} does not have "
                                  f"(its columns: {', '.join(c.name for c in columns)}). Fix the connection's key_columns.")
            return list(chosen), "key_columns"
        key = self._catalog_key(schema_name, name)
        if key:
            return key, "primary key"
        excluded = self.exclude.get(table, frozenset())
        candidates = [(i, cols) for i, cols in self._catalog_unique_keys(schema_name, name) if not excluded & set(cols)]
        # The key the table has now, while it can serve: another index added later must not move it.
        had = self._schemas.get(table) or self.baseline(table)
        if candidates:
            index, cols = ([c for c in candidates if had is not None and tuple(c[1]) == had.key] or candidates)[0]
            return cols, f"unique index {index}"
        raise NoPrimaryKey(f"{self.name}: table {table} has no primary key and no unique index on NOT NULL columns; "
                           "watermark chunks need a key. Add one, or name the columns that identify a row in the "
                           f"connection's key_columns (key_columns={name}.COLUMN), or leave the table out of the dump.")

    def _catalog_unique_keys(self, schema_name: str, name: str) -> list[tuple[str, list[str]]]:
        """The unique indexes that can serve as the table's key, best first (`unique_keys`): (name,
        columns in index order)."""
        return []

    def schema_for_event(self, table: str, names) -> TableSchema | None:
        """The table's schema for a log event with these columns; re-read after a column was added.
        None for a table without any key: its changes are not staged (no row can be matched by
        them; whole-table snapshots keep it in sync), said once per table until DDL gives it one."""
        if table in self._keyless:
            return None
        try:
            schema = self.table_schema(table)
        except NoPrimaryKey as exc:
            log.warning("%s. Its changes are not staged: whole-table snapshots (`dblog dump`) keep it in sync", exc)
            return None
        except UnknownTable:
            return self._gone(table, names)
        if not self._known[schema.name].issuperset(names):
            schema = self.table_schema(table, refresh=True)
        return schema

    def _gone(self, table: str, names) -> TableSchema | None:
        """The schema for events of a table the catalog no longer has (dropped or renamed since
        they were written: the capture is behind): the one the staged log has, if it holds their
        columns; else they are left out, said once."""
        staged = self.baseline(table)
        if staged is not None and staged.column_set.issuperset(names):
            self._schemas[table], self._known[table] = staged, staged.column_set
            log.warning("%s: %s is gone from the source; its changes read before it went are staged with the schema "
                        "the staged log has for it", self.name, table)
            return staged
        self._keyless.add(table)   # (left out as a table without a key is, until DDL names it again)
        log.warning("%s: %s is gone from the source and nothing of it is staged: its changes read before it went "
                    "are left out", self.name, table)
        return None

    def schema_changed(self, table: str, position: str | None, before: TableSchema | None = None,
                       readded: frozenset[str] = frozenset(), ddl: bool = False,
                       renamed: tuple[tuple[str, str], ...] = (), seen: Sequence[str] | None = None) -> list[SourceNote]:
        """After DDL (or a new Relation): the table read again from the catalog and compared with
        the schema it had (`before`, else this process's, else the staged log's). The change is
        logged; a change that rewrote existing rows without row events needs a whole-table repair;
        a renamed column is recorded at `position` for the merge to rename (without a position, a
        dump window's finding, its rows are re-read instead). `ddl`: DDL named the table (not only
        its first sight in this process); `readded`, `renamed`: what its statement says; `seen`:
        the columns the log itself names at `position` (PostgreSQL's Relation message), where a
        catalog already past later DDL shows: a rename is then re-read, not placed there."""
        before = before or self._schemas.get(table) or self.baseline(table)
        was_keyless = table in self._keyless
        try:
            after = self.table_schema(table, refresh=True)
        except UnknownTable:
            self._schemas.pop(table, None)
            return []
        except NoPrimaryKey as exc:
            if not was_keyless:
                log.warning("%s. It is read whole from now on (whole-table snapshots)", exc)
            # Its changes are not staged: a change of its shape, or the loss of its key, reaches the
            # warehouse when it is read whole again.
            lost = before is not None and bool(before.key)
            return [RepairNeed(table, "it lost its key: it is read whole" if lost else
                               "a table with no key changed shape: it is read whole", position)] if lost or ddl else []
        if was_keyless:   # its changes were not staged until now: the table is read whole, whatever the setting
            log.info("%s: %s has a key now (%s): its rows are read whole", self.name, table, ", ".join(after.key))
            return [RepairNeed(table, f"given a key ({', '.join(after.key)}): its changes were not staged before",
                               position)]
        change = diff(before, after, readded, renamed) if before is not None else None
        if change is None or not change.any:
            return []
        why = change.rewrites_rows(not_null_fills=self.kind == "mysql")
        placed = position is not None and (seen is None or set(seen) == after.column_set)
        if not placed:   # (a dump window, or a catalog ahead of the log, cannot say where the rename happened)
            why += [f"column {old} renamed {new}, not placed in the log" for old, new in change.renamed]
        log.info("%s: the schema of %s changed at %s (%s)%s", self.name, table, position or "a dump window",
                 change.describe(),
                 "; its rows are re-read: " + "; ".join(why) if why else "")
        found: list[SourceNote] = [RepairNeed(table, "schema change: " + "; ".join(why), position)] \
            if why else []
        return found + [ColumnRename(table, old, new, position) for old, new in change.renamed if placed and position]

    def new_tables(self, tables: Iterable[str], position: str, why: str) -> list[RepairNeed]:
        """Tables new to the capture (created, renamed): dumped whole unless DBLOG_AUTO_DUMP_NEW_TABLES is off."""
        from ..settings import settings
        tables = list(tables)
        if settings().capture.auto_dump_new_tables == "off":
            for t in tables:
                log.warning("%s: %s is %s; DBLOG_AUTO_DUMP_NEW_TABLES is off, so its rows not in the log reach "
                            "the warehouse only by a dump (dblog dump --source %s --table %s)", self.name, t, why,
                            self.name, t)
            return []
        for t in tables:
            self.schema_for_event(t, ())   # one with no key is said once: its dump reads it whole
        return [RepairNeed(t, f"{why} (DBLOG_AUTO_DUMP_NEW_TABLES)", position) for t in tables]

    # set-up and checks ---------------------------------------------------------------------------
    @abc.abstractmethod
    def preflight(self, create: bool = True, first_use: bool = True) -> list[str]:
        """Fail closed (SourceError) on a misconfigured source; returns notes of what was created.

        With `first_use` False (a checkpoint exists), the stream's history must still be there:
        a missing replication slot is lost history (HistoryLost), never silently recreated.
        """

    def needs_administrator(self, gaps: list[tuple[str, list[str]]], where: str) -> SourceError:
        """The error for what the capture user may not do itself: each problem, then the exact
        statements an administrator runs (`where`: as whom, in which database), in order."""
        statements = list(dict.fromkeys(s for _, fix in gaps for s in fix))
        return SourceError(
            f"{self.name}: user {self.user} cannot capture {self.namespace} yet: "
            + "; ".join(problem for problem, _ in gaps) + f".\nFix: an administrator runs, {where}:\n"
            + "\n".join(f"    {s}" for s in statements)
            + "\nthen `dblog setup` again (`dblog setup --print-sql` prints the whole set-up).")

    def setup_sql(self) -> list[str]:
        """The whole least-privilege set-up an administrator runs before `dblog setup`, as SQL
        lines (`--` comments say where and in which order); reads the server, changes nothing."""
        raise NotImplementedError

    # watermarks and chunks ------------------------------------------------------------------------
    @abc.abstractmethod
    def write_watermark(self, slot: str, value: str) -> int:
        """One single-row autocommitted write of `value` to the watermark table (row
        `watermark_id(slot)`); returns the rows `rows_written` counts for it."""

    def watermark_id(self, slot: str) -> str:
        return slot if self.deployment is None else f"{self.deployment}{DEPLOYMENT_SEPARATOR}{slot}"

    def own_watermarks(self, events: list[ChangeEvent]) -> list[ChangeEvent]:
        """`events` without the watermark rows another deployment wrote (its capture stages them).

        Untagged rows (written before deployments were told apart) are kept: a stranger's
        watermark costs one staged row, while dropping one of ours would stall a dump for ever."""
        if self.deployment is None or not any(e.table == WATERMARK_TABLE for e in events):
            return events
        kept = []
        for e in events:
            row = (e.after if e.after is not None else e.before) or {}
            tag, _ = split_watermark_id(str(row.get("id") or ""))
            if e.table != WATERMARK_TABLE or tag is None or tag == self.deployment:
                kept.append(e)
            elif tag not in self._foreign:
                self._foreign.add(tag)
                log.info("%s: skipping the watermarks of deployment %s (this is deployment %s; set "
                         "DBLOG_DEPLOYMENT or the ZooKeeper chroot alike wherever one deployment runs)",
                         self.name, tag, self.deployment)
        return kept

    def fetch(self, sql: str, params: list) -> list[tuple]:
        """Run one autocommitted READ COMMITTED SELECT."""
        return self._run(sql, params)

    def select_chunk(self, schema: TableSchema, after_key: tuple | None, limit: int | None,
                     upto_key: tuple | None = None) -> list[tuple]:
        """Rows as tuples in schema column order."""
        return self.fetch(*self.dialect.chunk_query(schema, after_key, limit, upto_key))

    def select_chunk_table(self, schema: TableSchema, after_key: tuple | None, limit: int | None,
                           upto_key: tuple | None = None, native_reads: bool = True) -> pa.Table:
        """A chunk's rows in the staged column types: decoded by the native reader where it reads
        every column exactly (`sources.native`), else built from the Python driver's tuples."""
        native = self._native_reads() if native_reads else None
        cols = self.dialect.native_select_list(schema) if native is not None else None
        if native is not None and cols is not None:
            sql, params = self.dialect.chunk_query(schema, after_key, limit, upto_key, cols)
            try:
                return native.read(schema, self._interpolate(sql, params))
            except NativeUnfit as exc:
                self.fallbacks += 1
                if (schema.name, True) not in self._told:
                    self._told.add((schema.name, True))
                    log.warning("%s: a chunk of %s is read by the Python driver, not the native reader: %s "
                                "(its values stay exact; only slower)", self.name, schema.name, exc)
        elif native is not None and (schema.name, False) not in self._told:
            self._told.add((schema.name, False))
            log.info("%s: %s has a column the native reader does not read exactly: its chunks are read by "
                     "the Python driver", self.name, schema.name)
        return rows_table(schema, [], self.select_chunk(schema, after_key, limit, upto_key))

    def _native_reads(self) -> NativeReads | None:
        """This source's native chunk reader (None: it has none)."""
        return None

    def _interpolate(self, sql: str, params: list) -> str:
        """`sql` with its values in, escaped by the Python driver as it does for every statement.
        Its connection is checked first (a ping on MySQL): a server that is down then fails the
        read at once, transient, where connectorx's pool would wait 30 s before giving up."""
        with self._lock:
            with self._connection().cursor() as cur:
                text = cur.mogrify(sql, params)
        return text.decode() if isinstance(text, bytes) else text

    def key_after(self, schema: TableSchema, after_key: tuple | None, rows: int,
                  upto_key: tuple | None = None) -> tuple | None:
        """The key `rows` rows past after_key (at most upto_key), a split boundary; None when
        fewer rows are left."""
        found = self.fetch(*self.dialect.boundary_query(schema, after_key, upto_key, rows))
        return tuple(found[0]) if found else None

    def check_readable(self, schema: TableSchema) -> None:
        """A LIMIT 0 read: fail before a dump starts if the capture user may not SELECT the table."""
        try:
            self.fetch(*self.dialect.chunk_query(schema, None, 0))
        except Exception as exc:  # each driver has its own permission error class
            if self.transient(exc):  # the server went away, not a missing grant
                raise SourceUnavailable(f"{self.name}: lost the connection while checking {schema.name} "
                                        f"({str(exc).strip()}); retry once the server is back") from exc
            raise SourceError(f"{self.name}: cannot read {schema.name} ({str(exc).strip()}). Fix: GRANT SELECT "
                              f"ON {schema.name} TO the capture user.") from exc

    def last_key(self, schema: TableSchema) -> tuple | None:
        """The table's highest key now: a dump stops there, later inserts reach it through the log."""
        rows = self.fetch(self.dialect.last_key_query(schema), [])
        return tuple(rows[0]) if rows else None

    def keys(self, schema: TableSchema, page: int = 10_000) -> Iterator[tuple]:
        """Every key of the table, in key order, read in bounded pages (keyset pagination)."""
        key_only = TableSchema(schema.name, tuple(schema.column(c) for c in schema.key), schema.key)
        after = None
        while True:
            rows = self.select_chunk(key_only, after, page)
            yield from (tuple(r) for r in rows)
            if len(rows) < page:
                return
            after = tuple(rows[-1])

    def select_keys(self, schema: TableSchema, keys: Sequence[tuple]) -> list[tuple]:
        return self.fetch(*self.dialect.keys_query(schema, keys))

    def estimate_rows(self, schema: TableSchema) -> int | None:
        """The table's row count from the catalog's statistics (no scan: a dump's progress bar
        needs a denominator, not an exact one). None when the source cannot tell."""
        return None

    # change stream -------------------------------------------------------------------------------
    @abc.abstractmethod
    def stream(self, resume: dict | None, idle_timeout: float) -> Iterator[Transaction | None]:
        """Committed transactions from `resume` on; None when idle for `idle_timeout` seconds."""

    @abc.abstractmethod
    def acknowledge(self, resume: dict) -> None:
        """The stream is durable up to `resume`: the source may free older log."""

    # acknowledge_idle, reset_stream and close are optional hooks, empty on purpose and so not
    # abstract (hence noqa: B027): a source with nothing to free, recreate or close keeps them.
    def acknowledge_idle(self) -> None:  # noqa: B027
        """Every transaction the stream yielded is durable and none is open: the source may free
        all log it has sent (a server shutting down waits for this)."""

    def spooling(self) -> bool:
        """Whether the stream is inside a transaction it holds back until its commit (PostgreSQL's
        streamed transactions): a capture slice ending now would leave it to be read again."""
        return False

    @abc.abstractmethod
    def start_point(self) -> dict | None:
        """Where a capture without a checkpoint starts: the current end of the log."""

    def reset_stream(self) -> None:  # noqa: B027
        """Recreate whatever the stream needs after lost history (PostgreSQL: the slot)."""

    @abc.abstractmethod
    def head(self) -> dict:
        """The source's current end of log, for lag reporting."""

    # How late `rows_written` may show a write (its reports' interval): a window grows only once
    # the count has stood still that long.
    ROWS_WRITTEN_DELAY_S = 0.0

    def rows_written(self) -> int | None:
        """The server's running count of rows inserted, updated and deleted (`snapshot.window_growth`
        grows a dump's windows while it does not move); None where the source keeps none."""
        return None

    def close(self) -> None:  # noqa: B027
        """Release what the source holds open (connections)."""
