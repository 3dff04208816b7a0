"""The engine's rules on Spark DataFrames, for the spark_jobs/ entry points."""
