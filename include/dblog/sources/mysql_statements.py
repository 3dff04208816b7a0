"""What a statement in MariaDB's binlog did, read from its text.

Two kinds matter to the capture: a write logged as SQL (binlog_format STATEMENT or MIXED in a
session, LOAD DATA, TRUNCATE), whose rows the log lacks (`statement_writes`), and DDL, whose
effect on tables is read from the statement, not from the catalog, which may already be past
later DDL when the capture is behind (`read_ddl`). Names resolve as the server resolves them:
qualified, or in the session's default database.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_SCHEMA_DDL = re.compile(r"^(ALTER|CREATE|DROP|RENAME)\b", re.I)
_DDL_OR_TRUNCATE = re.compile(r"^(ALTER|CREATE|DROP|RENAME|TRUNCATE)\b", re.I)
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?"
# A table created, or replaced: CREATE [OR REPLACE] TABLE [IF NOT EXISTS] name (not TEMPORARY:
# a temporary table never reaches a row-based binlog).
_CREATED = re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_NAME})", re.I)
_DROPPED = re.compile(r"^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?", re.I)
# A table renamed (RENAME TABLE a TO b; ALTER TABLE a RENAME [TO|AS] b), not a column, index or
# key; (?=\S) makes \s+ take all the blanks, so the look-ahead sees the next word.
_TABLE_RENAME = re.compile(r"\bRENAME\s+(?=\S)(?!(?:COLUMN|INDEX|KEY)\b)", re.I)
# ALTER TABLE ... DROP [COLUMN] [IF EXISTS] name: a column of that name still there was added again.
_DROPPED_COLUMN = re.compile(r"\bDROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(?=\S)"
                             r"(?!(?:INDEX|KEY|PRIMARY|FOREIGN|CONSTRAINT|PARTITION|CHECK|SYSTEM|PERIOD|IF)\b)"
                             r"(`(?:[^`]|``)+`|[\w$]+)", re.I)
# ALTER TABLE ... RENAME COLUMN [IF EXISTS] old TO new, CHANGE [COLUMN] [IF EXISTS] old new type: a rename
# (the rows keep their values under the new name; CHANGE with the same name only retypes).
_COLUMN = r"(`(?:[^`]|``)+`|[\w$]+)"
_RENAMED_COLUMN = re.compile(rf"\bRENAME\s+COLUMN\s+(?:IF\s+EXISTS\s+)?{_COLUMN}\s+TO\s+{_COLUMN}", re.I)
_CHANGED_COLUMN = re.compile(rf"\bCHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_COLUMN}\s+{_COLUMN}", re.I)
_PARTITION_WRITE = re.compile(r"\b(?:DROP|TRUNCATE|EXCHANGE)\s+PARTITION\b", re.I)


_CONTROL = re.compile(r"^(BEGIN|COMMIT|ROLLBACK|XA|SAVEPOINT|RELEASE|START\s+TRANSACTION)\b", re.I)
_DDL = re.compile(r"^(ALTER|CREATE|DROP|RENAME|GRANT|REVOKE|FLUSH|ANALYZE|OPTIMIZE|REPAIR|CHECK|SET|USE)\b", re.I)


def commits_by_itself(query: str) -> bool:
    """DDL and TRUNCATE commit by themselves: no XID event follows them."""
    return bool(_DDL_OR_TRUNCATE.match(query))


def statement_writes(query: str, default_schema: str, database: str, tables: list[str]) -> list[str]:
    """The captured tables a logged statement (comments stripped) may have written. Anything
    but transaction control and DDL that reaches the binlog as SQL text wrote something (SELECTs
    are not logged; `SELECT f()` and `CALL` are when they write). What it names counts; a write
    into the captured database that names no captured table (a stored function, a view) counts
    for every table: a needless repair dump is harmless, a missed write is not."""
    if not query or _CONTROL.match(query) or _DDL.match(query):  # TRUNCATE is not in _DDL: it deletes rows
        return []
    named = statement_tables(query, default_schema, database, tables)
    if named:
        return named
    # Names another database's table: its write, not ours (`INSERT INTO other.t`, `TRUNCATE other.t`).
    qualified = {m.group(1) or m.group(2) for m in re.finditer(
        r"\b(?:INTO|UPDATE|FROM|JOIN|TABLE|TRUNCATE)\s+(?:`((?:[^`]|``)+)`|([A-Za-z_$][\w$]*))\s*\.\s*[`A-Za-z_$]", query, re.I)}
    if any(q.lower() != database.lower() for q in qualified):
        return []
    touches = default_schema.lower() == database.lower() or qualified
    return list(tables) if touches else []


def strip_sql_comments(query: str) -> str:
    return re.sub(r"/\*.*?\*/|--[^\n]*|#[^\n]*", " ", query, flags=re.S)


def statement_tables(query: str, default_schema: str, database: str, tables: list[str]) -> list[str]:
    """The tables of `database` a DML statement names (qualified, or unqualified with `database`
    as the session's default). Conservative: a table the statement only reads counts too, since
    telling targets from sources needs a full SQL parser, and a needless repair dump is harmless."""
    named = re.findall(r"(?:`((?:[^`]|``)+)`|(\w+))\s*\.\s*(?:`((?:[^`]|``)+)`|(\w+))|`((?:[^`]|``)+)`|(\w+)", query)
    found = []
    for q1, q2, t1, t2, b, w in named:
        if q1 or q2:
            schema_name, name = (q1 or q2).replace("``", "`"), (t1 or t2).replace("``", "`")
        else:
            schema_name, name = default_schema, (b or w).replace("``", "`")
        # Case-insensitively: with lower_case_table_names a statement may spell names either way.
        match = next((t for t in tables if t.lower() == name.lower()), None)
        if schema_name.lower() == database.lower() and match is not None and match not in found:
            found.append(match)
    return found


@dataclass(frozen=True)
class Ddl:
    """The tables (qualified names among those given) a DDL statement touched, and how."""
    named: frozenset[str] = frozenset()       # every given table the statement names
    created: frozenset[str] = frozenset()     # CREATE [OR REPLACE] TABLE: the one it made
    replaced: frozenset[str] = frozenset()    # dropped, or created anew: another table from now on
    renamed: frozenset[str] = frozenset()     # named in a table rename (either side)
    readded: frozenset[str] = field(default_factory=frozenset)   # columns DROPped (and maybe added again)
    renamed_columns: tuple[tuple[str, str], ...] = ()   # (old, new), in statement order
    partition_write: bool = False             # DROP / TRUNCATE / EXCHANGE PARTITION: rows without row events


def read_ddl(query: str, default_schema: str, database: str, tables: set[str]) -> Ddl | None:
    """What the DDL statement `query` (comments stripped) did to `tables` ("database.table"
    names); None when it is no schema DDL."""
    if not _SCHEMA_DDL.match(query):
        return None
    bare = [t.partition(".")[2] for t in tables]

    def named(text: str) -> frozenset[str]:
        return frozenset(f"{database}.{t}" for t in statement_tables(text, default_schema, database, bare))

    created, dropped = _CREATED.match(query), _DROPPED.match(query)
    if created:
        made = named(created.group(1))
        return Ddl(named=named(query), created=made, replaced=made)
    if dropped:
        gone = named(query[dropped.end():])
        return Ddl(named=gone, replaced=gone)
    touched = named(query)
    return Ddl(named=touched, renamed=touched if _TABLE_RENAME.search(query) else frozenset(),
               readded=frozenset(map(_unquote, _DROPPED_COLUMN.findall(query))),
               renamed_columns=_renamed_columns(query),
               partition_write=bool(_PARTITION_WRITE.search(query)))


def _unquote(name: str) -> str:
    return name.strip("`").replace("``", "`") if name.startswith("`") else name


def _renamed_columns(query: str) -> tuple[tuple[str, str], ...]:
    found = sorted([(m.start(), m.groups()) for m in _RENAMED_COLUMN.finditer(query)] +
                   [(m.start(), m.groups()) for m in _CHANGED_COLUMN.finditer(query)])
    pairs = ((_unquote(old), _unquote(new)) for _, (old, new) in found)
    return tuple((old, new) for old, new in pairs if old != new)
