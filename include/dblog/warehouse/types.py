"""The warehouse table's schema: Spark column types <-> Iceberg types, metadata columns, evolution.

Every field is optional (Spark's output is nullable, and a required Iceberg field would refuse a
nullable file column); the key lives in the table property `dblog.key`. JSON stays text (Iceberg
v2 has no JSON type). Field ids always come from the table's metadata, never computed here
(the catalog renumbers a new table's ids).
"""
from __future__ import annotations

import re

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from ..errors import WarehouseError
from ..model.schema_changes import widens
from .columns import BUCKET, DELETED, META, META_TYPES, MISSING  # noqa: F401  (their home)

_SIMPLE: dict[str, IcebergType] = {
    "bigint": LongType(), "int": IntegerType(), "smallint": IntegerType(), "tinyint": IntegerType(),
    "double": DoubleType(), "float": FloatType(), "boolean": BooleanType(), "string": StringType(),
    "binary": BinaryType(), "date": DateType(), "timestamp": TimestamptzType(), "timestamp_ntz": TimestampType(),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def iceberg_type(spark_type: str, next_id=None) -> IcebergType:
    """The Iceberg type of a Spark type string (`simpleString()`); `next_id` numbers a list's element."""
    if spark_type in _SIMPLE:
        return _SIMPLE[spark_type]
    found = _DECIMAL.fullmatch(spark_type)
    if found:
        return DecimalType(int(found.group(1)), int(found.group(2)))
    if spark_type == "array<string>":
        return ListType(element_id=next_id() if next_id else 1, element_type=StringType(), element_required=False)
    raise WarehouseError(f"Spark type {spark_type} has no Iceberg type in dblog's warehouse")


def spark_type(t: IcebergType) -> str:
    """The Spark type string the merge uses for an Iceberg type."""
    for name, candidate in _SIMPLE.items():
        if candidate == t:
            return name
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, ListType) and t.element_type == StringType():
        return "array<string>"
    raise WarehouseError(f"Iceberg type {t} is not one dblog writes")


def schema(columns: list[tuple[str, str]], soft_deletes: bool = False) -> Schema:
    """A new table's schema: the data columns, then the metadata columns and the bucket."""
    every = [*columns, *zip(META, META_TYPES), *([(DELETED, "boolean")] if soft_deletes else []), (BUCKET, "int")]
    nested = iter(range(len(every) + 1, 2 * len(every) + 2))   # a list's element id follows the top level
    return Schema(*[NestedField(i, name, iceberg_type(t, lambda: next(nested)), required=False)
                    for i, (name, t) in enumerate(every, 1)])


def data_columns(table_schema: Schema) -> list[tuple[str, str]]:
    """(name, Spark type) of the table's data columns, in table order."""
    hidden = set(META) | {BUCKET, DELETED}
    return [(f.name, spark_type(f.field_type)) for f in table_schema.fields if f.name not in hidden]


def needs_evolution(table_schema: Schema, columns: list[tuple[str, str]]) -> bool:
    have = {name: iceberg_type(t) for name, t in data_columns(table_schema)}
    return have != {name: iceberg_type(t) for name, t in columns}


def converted(have: dict[str, str], columns: list[tuple[str, str]]) -> dict[str, str]:
    """The columns of `have` (name -> Spark type) whose type in `columns` Iceberg cannot promote
    theirs to (a new field replaces each: no reader may take an old value for the new type)."""
    return {n: t for n, t in columns if n in have and t != have[n] and not widens(have[n], t)}


def evolve(tx, table_schema: Schema, columns: list[tuple[str, str]], renamed: dict[str, str] | None = None) -> None:
    """Stage on the transaction `tx` the table's data columns becoming `columns` (the merge
    decided them): `renamed` ones (old -> new name) renamed first, keeping their field ids and so
    their values; new ones added, gone ones dropped, a type Iceberg can promote (int -> long,
    float -> double, a decimal's precision) widened in place, any other type change a new field
    of the same name (so no reader takes the old values for the new type: files are read by id)."""
    if renamed:
        with tx.update_schema() as update:
            for old, new in renamed.items():
                update.rename_column((old,), new)
        table_schema = tx.table_metadata.schema()
    have = dict(data_columns(table_schema))
    wanted = dict(columns)
    replaced = list(converted(have, columns))
    with tx.update_schema() as update:
        for name in [n for n in have if n not in wanted] + replaced:
            update.delete_column((name,))   # a tuple: a name with a dot is one column
        for name, t in columns:
            if name not in have:
                update.add_column((name,), iceberg_type(t))
            elif name not in replaced and t != have[name]:
                update.update_column((name,), iceberg_type(t))
    if replaced:   # a second update: one cannot drop and add the same name
        with tx.update_schema() as update:
            for name in replaced:
                update.add_column((name,), iceberg_type(wanted[name]))
