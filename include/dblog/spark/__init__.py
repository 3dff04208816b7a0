"""How dblog runs Spark: the session every job uses, and the Python data sources that read staged
Parquet and Iceberg snapshots without extra jars."""
