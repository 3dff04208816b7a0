"""What a dump may be asked: its spec, and the one rule for each of its settings, checked before
anything is written (the CLI, the DAGs' start tasks, the DBLog page and a repair all ask here).

Bad input raises `DumpError` (or the source's own error) naming the problem and the fix; a dump
of every table leaves out, with the reason, the tables it cannot dump.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import DBLogError
from ..model.schema import TableSchema, decode_key, normalize_key
from ..settings import DUMP_ID, settings
from ..sources.base import WATERMARK_TABLE, NoPrimaryKey, Source, SourceError, SourceUnavailable


class DumpError(DBLogError, ValueError):
    """Bad dump input or state; the message names the problem and the fix."""


@dataclass
class DumpSpec:
    tables: list[str] = field(default_factory=list)   # empty: every table of the source
    keys: list | None = None                          # JSON key values, for one table (repair)
    chunk_size: int | None = None                     # rows per split; None: the setting's default
    delay_s: float = 0.0
    parallelism: int | None = None                    # splits read at once per window; None: the setting's
    dump_id: str | None = None
    reason: str | None = None                         # why it runs, when the product started it (a repair)
    exclude: list[str] = field(default_factory=list)  # with every table: tables to leave out
    # Who asked (an Airflow run's source group): a second registration with the same request and id
    # is the same dump, so a start task retried after its worker died resumes instead of failing.
    request: str | None = None

    def __post_init__(self) -> None:
        if self.chunk_size is None:
            self.chunk_size = settings().dump.chunk_size
        if self.parallelism is None:
            self.parallelism = settings().dump.parallelism


@dataclass(frozen=True)
class Skipped:
    """A table a dump of every table leaves out, and why (the dump's scope keeps the list)."""
    table: str
    reason: str


@dataclass
class DumpPlan:
    """What `validate` accepted: the tables to dump, the typed key list, the tables left out."""
    schemas: list[TableSchema]
    keys: list[tuple] | None = None
    skipped: list[Skipped] = field(default_factory=list)


def check_chunk_size(value) -> None:
    """The one rule for a chunk size (the CLI, the DAGs' start tasks, the DBLog page)."""
    check_finite(value, "chunk size")
    most = settings().dump.max_chunk_size
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise DumpError(f"chunk size must be a whole number from 1 to {most:,}, got {value!r}")


def check_finite(value, what: str) -> None:
    """NaN and infinity are not numbers a user means (and NaN is not JSON, so it must never reach
    ZooKeeper): refuse them by name, before any range check (NaN fails every comparison)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise DumpError(f"{what} must be a finite number, got {value!r}")


def check_parallelism(value) -> None:
    """The one rule for how many splits a window reads at once (each on its own connection)."""
    check_finite(value, "parallelism")
    most = settings().dump.max_parallelism
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise DumpError(f"parallelism (splits read at once per window, each on its own connection) must be a "
                        f"whole number from 1 to {most} (DBLOG_MAX_PARALLELISM), got {value!r}")


def check_delay(value) -> None:
    """The one rule for the delay between chunks."""
    check_finite(value, "delay between chunks")
    most = settings().dump.max_delay_seconds
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= most:
        raise DumpError(f"delay between chunks must be 0 to {most} seconds, got {value!r}")


def validate(source: Source, spec: DumpSpec) -> DumpPlan:
    """Check everything before anything is written; DumpError / SourceError say what to fix.

    A dump of every table leaves out (`DumpPlan.skipped`) the tables it cannot dump (one it may not
    read) and those in `spec.exclude`; named tables must all be dumpable. A table with no key at
    all is dumped whole, except by a key list."""
    check_chunk_size(spec.chunk_size)
    check_parallelism(spec.parallelism)
    check_delay(spec.delay_s)
    _check_options(spec)
    named = _tables_named(source, spec)
    skipped: list[Skipped] = []
    if spec.tables:
        schemas = _named_schemas(source, named, spec.keys is not None)
    else:
        schemas, skipped = _dumpable_schemas(source, named, spec.exclude, spec.keys is not None)
    keys = None if spec.keys is None else _key_list(spec.keys, schemas)
    return DumpPlan(schemas, keys, skipped)


def _check_options(spec: DumpSpec) -> None:
    if spec.dump_id is not None and not DUMP_ID.match(spec.dump_id):
        raise DumpError(f"dump id {spec.dump_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if spec.exclude and spec.tables:
        raise DumpError("an exclude list goes with a dump of every table (--all); with --table, name only "
                        "the tables to dump")


def _tables_named(source: Source, spec: DumpSpec) -> list[str]:
    """The qualified names the dump covers before exclusions: the named tables, or every table."""
    names = spec.tables or source.tables()
    if not names:
        raise DumpError(f"{source.name} has no tables to dump")
    named = [qualified(source, t) for t in names]
    if WATERMARK_TABLE in named:
        raise DumpError(f"{WATERMARK_TABLE} is the watermark table; it is not dumped")
    _check_captured(source, named)
    return named


def _named_schemas(source: Source, tables: list[str], keyed: bool) -> list[TableSchema]:
    """Tables named by the user must all be dumpable: any that is not fails the dump."""
    schemas = [_schema(source, t, keyed) for t in tables]  # UnknownTable / NoPrimaryKey
    for s in schemas:
        source.check_readable(s)
    return schemas


def _schema(source: Source, table: str, keyed: bool) -> TableSchema:
    """The table's schema; one with no key at all is dumped whole (`stagedlog.whole_tables`),
    unless the dump needs a key (a key list: NoPrimaryKey says what to do)."""
    try:
        return source.table_schema(table)
    except NoPrimaryKey:
        if keyed:
            raise
        return source.keyless_schema(table)


def _dumpable_schemas(source: Source, tables: list[str], exclude: list[str],
                      keyed: bool) -> tuple[list[TableSchema], list[Skipped]]:
    """Every table but the excluded and the undumpable, which are skipped with the reason."""
    excluded = {qualified(source, t) for t in exclude}
    # A name in another database / schema addresses another source (a run over every source
    # shares one list); one in ours that matches no table is a typo that would dump it anyway.
    unknown = sorted(t for t in excluded - set(tables) if t.partition(".")[0] == source.namespace)
    if unknown:
        raise DumpError(f"the exclude list names {', '.join(unknown)}, which {source.name} does not have; "
                        f"its tables are {', '.join(tables)}")
    schemas: list[TableSchema] = []
    skipped: list[Skipped] = []
    for t in tables:
        if t in excluded:
            skipped.append(Skipped(t, "excluded"))
            continue
        try:
            schema = _schema(source, t, keyed)
            source.check_readable(schema)
        except SourceUnavailable:
            raise  # the server, not the table: nothing can be dumped now
        except SourceError as exc:  # not readable, dropped since listed
            skipped.append(Skipped(t, str(exc)))
            continue
        schemas.append(schema)
    if not schemas:
        raise DumpError(f"no table of {source.name} can be dumped: "
                        + "; ".join(f"{s.table}: {s.reason}" for s in skipped))
    return schemas, skipped


def _key_list(keys: list, schemas: list[TableSchema]) -> list[tuple]:
    """A repair's key list: for one table, bounded, each key decoded and normalized, deduplicated."""
    if len(schemas) != 1:
        raise DumpError("a key list needs exactly one table (--table)")
    if not isinstance(keys, list) or not keys:
        raise DumpError("the key list must be a non-empty JSON array, e.g. [1, 2] or [[1, \"a\"], [2, \"b\"]]")
    most = settings().dump.max_keys
    if len(keys) > most:
        raise DumpError(f"the key list has {len(keys)} keys; at most {most} per dump (DBLOG_MAX_KEYS)")
    try:
        return sorted({normalize_key(decode_key(k, schemas[0]), schemas[0]) for k in keys})
    except (ValueError, TypeError) as exc:
        raise DumpError(f"malformed key list for {schemas[0].name}: {exc}") from None


def qualified(source: Source, table: str) -> str:
    """`table` as schema.table, a bare name in the source's namespace; an empty name (or an empty
    part of one) is refused naming the forms a name takes."""
    name = table.strip()
    if not name or name.startswith(".") or name.endswith("."):
        raise DumpError(f"the table name {table!r} is empty: name a table as schema.table, or as table in the "
                        f"source's namespace ({source.namespace})")
    return name if "." in name else f"{source.namespace}.{name}"


def _check_captured(source: Source, tables: list[str]) -> None:
    """Only the captured database / schema: another's later changes never reach the staged log,
    so its snapshot would go stale without a word."""
    outside = [t for t in tables if t.partition(".")[0] != source.namespace]
    if outside:
        kind = "database" if source.kind == "mysql" else "schema"
        raise DumpError(f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside {kind} "
                        f"{source.namespace}, the one {source.name} captures: its later changes would never "
                        f"be captured and the dumped copy would silently go stale. Dump tables of "
                        f"{source.namespace} (`--table T` or `{source.namespace}.T`), or configure a source "
                        f"for that {kind}.")
