"""The Spark merge: the staged log and ready chunks become the warehouse tables, by the same rules
as `dblog.model.rules`, for the spark_jobs/ entry points."""
