"""Warehouse tables as Apache Iceberg tables (format v2), on local disk or an object store.

catalog.py            the catalog from settings, identifiers, locations, table properties
types.py              Spark <-> Iceberg types, metadata columns, schema evolution
merged_state.py       what a snapshot records as merged (`dblog.*` summary properties)
tables.py             Warehouse: load, read, state, begin a merge's transaction, drop
files.py              executor side: Parquet data files with Iceberg field ids, on any storage
commit.py             one merge = one commit (main + tombstone branch + schema + state)
table_maintenance.py  snapshot expiry, orphan sweep, bucket compaction
readers.py            DuckDB reads of the tables (Spark's: `dblog.spark.data_sources.spark_table`)
"""
