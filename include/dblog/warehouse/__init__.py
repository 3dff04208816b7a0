"""The warehouse: one Parquet table per source table, in immutable versions (`layout`), and the
comparison of a warehouse table with its source (`verify`). Spark writes it (`dblog.spark.job`)."""
