"""What a table's schema change did to the rows it already had: the one home of that rule.

A DDL statement can change existing rows' values without writing a row event: a column added
with a default (or NOT NULL, which MariaDB fills with the type's zero), a generated or identity
column, a renamed column (the log and the catalog show a dropped column and an added one, and
the rows keep their values under the new name), a type conversion (VARCHAR -> INT parses every
value), a narrowing or a NOT NULL that rewrites NULLs. The warehouse cannot see any of that in
the log, so such a change asks for the table to be re-read (a whole-table repair dump through
the watermark windows). A change that leaves every existing value as it was (a nullable column
without default, a dropped column, a widening, a new default) asks for nothing, and neither does
a rename the source names (MariaDB's statement, PostgreSQL's attnum): the warehouse renames its
field, keeping the values (`dblog.merge.column_renames`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .schema import Column, TableSchema, integer_range

_LENGTH = re.compile(r"\((\d+)\)")
_DECIMAL = re.compile(r"(?:decimal|numeric)\((\d+),\s*(\d+)\)")
# Text types without a length limit, by the catalogs' spelling (MySQL column_type, PostgreSQL data_type).
_UNBOUNDED_TEXT = ("text", "tinytext", "mediumtext", "longtext", "character varying", "varchar")
_TEXT = ("varchar", "char", "character", "character varying", *_UNBOUNDED_TEXT)
_PRECISION = re.compile(r"(datetime|timestamp|time)(?:\((\d)\))?")
_FLOAT = {"float": 1, "real": 1, "double": 2, "double precision": 2}


@dataclass(frozen=True)
class SchemaChange:
    """How `new` differs from `old`, column by column, and whether the existing rows changed."""
    table: str
    added: tuple[Column, ...] = ()
    dropped: tuple[Column, ...] = ()
    retyped: tuple[tuple[Column, Column], ...] = ()   # (before, after), same column (a renamed one's too)
    key_changed: bool = False
    renamed: tuple[tuple[str, str], ...] = ()   # (old name, new name)

    @property
    def any(self) -> bool:
        return bool(self.added or self.dropped or self.retyped or self.key_changed or self.renamed)

    def rewrites_rows(self, not_null_fills: bool = True) -> list[str]:
        """Why existing rows' values changed without row events (empty: they did not).
        `not_null_fills`: the server may turn NULLs into a value when a column becomes NOT NULL
        (MySQL outside strict mode; PostgreSQL refuses instead)."""
        why = [f"column {c.name} added {_filled(c)}" for c in self.added if _filled(c)]
        if self.added and self.dropped:
            why.append(f"column(s) {', '.join(c.name for c in self.dropped)} gone and "
                       f"{', '.join(c.name for c in self.added)} added (a rename keeps the rows' values, a column "
                       "added again under its name loses them)")
        why += [f"column {a.name} converted from {b.source_type} to {a.source_type}"
                for b, a in self.retyped if converts(b, a)]
        why += [f"column {a.name} made NOT NULL (NULLs may have become a value)"
                for b, a in self.retyped if not_null_fills and not converts(b, a) and b.nullable and a.nullable is False]
        if self.key_changed:
            why.append("primary key changed")
        return why

    def describe(self) -> str:
        parts = [f"+{c.name} {c.source_type}" for c in self.added] + [f"-{c.name}" for c in self.dropped]
        parts += [f"{old} renamed {new}" for old, new in self.renamed]
        parts += [f"{a.name} {b.source_type}->{a.source_type}" for b, a in self.retyped]
        return ", ".join(parts + (["key changed"] if self.key_changed else [])) or "no column change"


def diff(old: TableSchema, new: TableSchema, readded: frozenset[str] = frozenset(),
         renamed: tuple[tuple[str, str], ...] = ()) -> SchemaChange:
    """`readded`: columns the DDL dropped and added again under the same name; `renamed`: (old,
    new) names the DDL renamed (both from MariaDB's statement; on PostgreSQL the column's `ident`
    tells both)."""
    after = {c.name: c for c in new.columns}
    # A name the statement renamed away that the table still has, or renamed to that it had: taken
    # again by another column (`RENAME COLUMN a TO b, ADD a`, a swap), so neither keeps its values.
    names = {c.name for c in old.columns}
    readded = readded | {o for o, _ in renamed if o in after} | {w for _, w in renamed if w in names}
    before = {c.name: c for c in old.columns
              if c.name not in readded and (c.name not in after or not _other_column(c, after[c.name]))}
    moves = _renames(old, new, before, after, renamed)
    was = {n: before[o] for o, n in moves}   # a renamed column's before, under its new name
    now = {**{c: before[c] for c in before if c in after}, **was}
    return SchemaChange(
        new.name,
        added=tuple(c for c in new.columns if c.name not in now),
        dropped=tuple(c for c in old.columns if c.name not in before or (c.name not in after and
                                                                          c.name not in dict(moves))),
        retyped=tuple((now[c.name], c) for c in new.columns if c.name in now and _differs(now[c.name], c)),
        key_changed=[dict((n, o) for o, n in moves).get(k, k) for k in new.key] != list(old.key),
        renamed=tuple(moves))


def _renames(old: TableSchema, new: TableSchema, before: dict[str, Column], after: dict[str, Column],
             named: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Renames, as (old, new) names of columns in both schemas: a column gone under its old name
    whose ident (or the statement) says it is the new one, new under that name."""
    idents = {c.ident: c.name for c in old.columns if c.ident is not None and c.name in before}
    pairs = [(idents[c.ident], c.name) for c in new.columns if c.ident in idents] + \
        [(_named(o, before), _named(n, after)) for o, n in named]
    moves: list[tuple[str, str]] = []
    for o, n in pairs:
        if o and n and o != n and o not in after and n not in before and \
                all(o != a and n != b for a, b in moves):
            moves.append((o, n))
    return moves


def _named(name: str, columns: dict[str, Column]) -> str | None:
    """`name` as the catalog spells it (MariaDB's column names are case-insensitive)."""
    return name if name in columns else next((c for c in columns if c.lower() == name.lower()), None)


def _other_column(b: Column, a: Column) -> bool:
    return b.ident is not None and a.ident is not None and b.ident != a.ident


def _differs(b: Column, a: Column) -> bool:
    known = b.nullable is not None and a.nullable is not None
    return (b.source_type.lower(), b.arrow_type) != (a.source_type.lower(), a.arrow_type) or \
        (known and b.nullable != a.nullable)


def _filled(c: Column) -> str:
    """What the server put into existing rows for an added column ('' when NULL)."""
    if c.default is not None:
        return f"with default {c.default}"
    return "NOT NULL" if not c.nullable else ""


def converts(b: Column, a: Column) -> bool:
    """Whether the change from `b` to `a` changed stored values, or the warehouse cannot take the
    new type in place (its column is then replaced, and every row must be read again)."""
    return not keeps_values(b, a) or not widens(str(b.arrow_type), str(a.arrow_type))


_SIZES = {"tinyint": 8, "int8": 8, "smallint": 16, "int16": 16, "int": 32, "int32": 32, "bigint": 64, "int64": 64}
_FLOATS = {"float": 32, "double": 64}
_DECIMAL_TYPE = re.compile(r"decimal(?:128)?\((\d+),\s*(\d+)\)")


def widens(old: str, new: str) -> bool:
    """Whether a warehouse column of type `old` takes values of type `new` in place, as Iceberg's
    promotions allow: a wider integer, float to double, a decimal's precision up at the same scale.
    Types as Spark (`bigint`, `decimal(12,2)`) or Arrow (`int64`, `decimal128(12, 2)`) spell them."""
    if old == new:
        return True
    if old in _SIZES and new in _SIZES:
        return _SIZES[new] >= _SIZES[old]
    if old in _FLOATS and new in _FLOATS:
        return _FLOATS[new] >= _FLOATS[old]
    o, n = _DECIMAL_TYPE.fullmatch(old), _DECIMAL_TYPE.fullmatch(new)
    return bool(o and n and o.group(2) == n.group(2) and int(n.group(1)) >= int(o.group(1)))


def keeps_values(b: Column, a: Column) -> bool:
    """Whether every value column `b` can hold is read the same as column `a` (a widening)."""
    bt, at = b.source_type.lower(), a.source_type.lower()
    if bt == at:
        return True
    if bt.endswith(" unsigned") and at.endswith(" unsigned"):
        bt, at = bt.removesuffix(" unsigned"), at.removesuffix(" unsigned")
    bp, ap = _PRECISION.fullmatch(bt), _PRECISION.fullmatch(at)
    if bp and ap and bp.group(1) == ap.group(1):   # fractional seconds: more digits keep every value
        return int(ap.group(2) or 0) >= int(bp.group(2) or 0)
    if bt.startswith(("enum(", "set(")) and at.startswith(bt[:-1] + ","):   # members appended at the end
        return True
    br, ar = integer_range(bt), integer_range(at)
    if br is not None and ar is not None:
        return ar[0] <= br[0] and br[1] <= ar[1]
    bd, ad = _DECIMAL.fullmatch(bt), _DECIMAL.fullmatch(at)
    if bd and ad:
        return bd.group(2) == ad.group(2) and int(ad.group(1)) >= int(bd.group(1))
    if bt in _FLOAT and at in _FLOAT:
        return _FLOAT[at] >= _FLOAT[bt]
    return _text_widens(bt, at)


def _text_widens(bt: str, at: str) -> bool:
    b_name, a_name = _LENGTH.sub("", bt).strip(), _LENGTH.sub("", at).strip()
    if b_name not in _TEXT or a_name not in _TEXT:
        return False
    if (b_name, a_name) == ("character varying", "text"):   # PostgreSQL: both unbounded text
        return True
    if (b_name in ("char", "character")) != (a_name in ("char", "character")):
        return False   # CHAR pads or strips trailing spaces: not the same values
    if not _LENGTH.search(at):
        return a_name in _UNBOUNDED_TEXT and _TEXT_RANK.get(a_name, 3) >= _TEXT_RANK.get(b_name, 0)
    b_len = _LENGTH.search(bt)
    return b_len is not None and int(_LENGTH.search(at).group(1)) >= int(b_len.group(1))  # type: ignore[union-attr]


# MySQL's TEXT types hold 255 B, 64 KiB, 16 MiB, 4 GiB; a VARCHAR(n) at most 64 KiB.
_TEXT_RANK = {"varchar": 1, "char": 0, "tinytext": 0, "text": 1, "mediumtext": 2, "longtext": 3,
              "character varying": 3}
