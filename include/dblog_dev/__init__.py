"""The local development deployment that `make up` starts, shared by the tests, the benchmarks,
the scripts and `make airflow`: its ports, password, connections and directory (`local`), the
sample tables (`sample`) and the write workload (`workload`).

Not part of the engine: `dblog` reaches it only when DBLOG_LOCAL=1 asks for the local services.
"""
