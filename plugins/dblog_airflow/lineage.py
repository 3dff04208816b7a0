"""What dblog's tasks read and write, as OpenLineage datasets for Airflow's OpenLineage provider.

The dump, merge and maintenance operators return `lineage(...)` from
`get_openlineage_facets_on_complete`; the provider sends it to the transport `[openlineage]
transport` names (Marquez, DataHub, OpenMetadata, a file, the console) and sends nothing without
one. Names follow OpenLineage's naming conventions, so the source side meets what other
integrations report for the same database:

- a source table: namespace `mysql://host:port` with name `database.table`, or
  `postgres://host:port` with name `database.schema.table`;
- a warehouse table: its Iceberg location (namespace `file` or `s3://bucket`, name the path), with
  a symlink to its catalog name (`iceberg://<catalog>`, `<source>.<schema.table>`) and its columns
  as the schema facet; a change table likewise.

Only host, port and database names leave the connection: never a user or a password.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from dblog.settings import settings


def source_dataset(source_uri: str, table: str, columns: list[tuple[str, str]] | None = None):
    """The source table `schema.table` of the source connection `source_uri`."""
    from openlineage.client.event_v2 import Dataset
    parts = urlsplit(source_uri)
    mysql = parts.scheme.startswith(("mysql", "mariadb"))
    scheme, port = ("mysql", 3306) if mysql else ("postgres", 5432)
    database = parts.path.lstrip("/").split("/")[0]
    name = table if mysql else f"{database}.{table}"
    return Dataset(f"{scheme}://{parts.hostname}:{parts.port or port}", name, facets=_schema(columns))


def warehouse_dataset(t, source: str, table: str, changes: bool = False):
    """A loaded warehouse table (or its change table, `changes`) of `source`."""
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    from dblog.warehouse import catalog as C
    from dblog.warehouse import types as T
    location = urlsplit(t.metadata.location.rstrip("/"))
    namespace, name = ("file", location.path) if location.scheme in ("file", "") else \
        (f"{location.scheme}://{location.netloc}", location.path.lstrip("/"))
    catalog_name = f"{C.changes_namespace(source) if changes else source}.{table}"
    symlink = Identifier(f"iceberg://{settings().warehouse.catalog_name}", catalog_name, "TABLE")
    columns = [(f.name, T.spark_type(f.field_type)) for f in t.schema().fields]
    return Dataset(namespace, name, facets={**_schema(columns), "symlinks": SymlinksDatasetFacet(identifiers=[symlink])})


def _schema(columns: list[tuple[str, str]] | None) -> dict:
    if not columns:
        return {}
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
    return {"schema": SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in columns])}


def lineage(inputs: list, outputs: list):
    """The provider's record of one task run (None when the provider is not installed)."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    return OperatorLineage(inputs=inputs, outputs=outputs)


def warehouse_lineage(warehouse, tables: list[tuple[str, str]], uris: dict[str, str], rewritten: bool = False):
    """A task that turned source tables into warehouse tables: `tables` (source id, table), each
    with its change table when it has one, the sources' connection URIs in `uris`. `rewritten`:
    the task read and rewrote the warehouse tables themselves (maintenance). Tables not in the
    warehouse yet are left out."""
    from dblog.warehouse import change_tables
    inputs, outputs = [], []
    for source, table in tables:
        t = warehouse.load(source, table)
        if t is None:
            continue
        landed = [warehouse_dataset(t, source, table)]
        changes = change_tables.load(warehouse, source, table)
        if changes is not None:
            landed.append(warehouse_dataset(changes, source, table, changes=True))
        inputs += landed if rewritten else [source_dataset(uris[source], table)]
        outputs += landed
    return lineage(inputs, outputs)


def dump_lineage(source, warehouse, source_uri: str, table: str):
    """A dump of `table` from the engine's `source`: the source table, with its columns as the
    source declares them, into its warehouse table (when it has one yet: a first dump's table
    appears with its merge, which reports it)."""
    from dblog.sources.base import NoPrimaryKey
    try:
        schema = source.table_schema(table)
    except NoPrimaryKey:   # read whole
        schema = source.keyless_schema(table)
    read = source_dataset(source_uri, table, [(c.name, c.source_type) for c in schema.columns])
    t = warehouse.load(source.name, table)
    return lineage([read], [warehouse_dataset(t, source.name, table)] if t is not None else [])
