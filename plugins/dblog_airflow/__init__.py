"""Airflow adapters for the `dblog` engine (include/dblog), in the provider layout.

hooks/      Airflow connections -> engine clients (Source, StateStore, StagedLog, Warehouse)
operators/  thin tasks: each `execute()` calls one engine function
triggers/   deferred waits (the capture passing a sync watermark), run by the triggerer
params.py   the DAGs' params (one factory per param) and the checks of a run's conf
groups.py   the task groups several DAGs share (dump a source's tables, then wait for capture)

Nothing here touches a database, ZooKeeper or the file system at import or in `__init__`.
"""
