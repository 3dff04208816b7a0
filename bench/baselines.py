"""What a data engineer would use instead, each copying `NS.t` into a Parquet directory.

- plain: one streamed `SELECT *`, batches written with pyarrow: the floor any tool pays.
- spark_jdbc: Spark's own parallel JDBC read (key-range partitions), written as Parquet. Drivers
  from Debian's libmariadb-java / libpostgresql-jdbc-java (installed by `make install`).
- dlt: dlt's `sql_database` source (pyarrow backend, its fastest) into its filesystem
  destination as Parquet.
All read as the capture user, with the same password, over the same loopback.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bigtable import TABLE, key_range  # noqa: E402
from common import PORTS  # noqa: E402

JARS = {"mysql": "/usr/share/java/mariadb-java-client.jar", "postgres": "/usr/share/java/postgresql.jar"}
BATCH = 50_000


def _password() -> str:
    from dblog_dev.local import password
    return password()


def plain(kind: str, ns: str, out: str) -> int:
    from dblog_dev.workload import connect
    if kind == "mysql":
        import pymysql.cursors
        _, conn = connect(f"mysql://dblog:{_password()}@127.0.0.1:{PORTS['MARIADB']}/{ns}")
        cur = conn.cursor(pymysql.cursors.SSCursor)
    else:
        _, conn = connect(f"postgres://dblog:{_password()}@127.0.0.1:{PORTS['POSTGRES']}/shop")
        cur = conn.cursor(name="plain")
        cur.itersize = BATCH
    cur.execute(f"SELECT * FROM {ns}.{TABLE}")
    os.makedirs(out, exist_ok=True)
    n, writer, schema = 0, None, None
    while rows := cur.fetchmany(BATCH):
        names = [d[0] for d in cur.description]  # a server-side cursor knows them once it fetched
        table = pa.table([pa.array(col) for col in zip(*rows)], names=names)
        if writer is None:  # inferred from the first batch; decimals widened, as values may grow
            schema = pa.schema([pa.field(f.name, pa.decimal128(38, f.type.scale)) if pa.types.is_decimal(f.type)
                                else f for f in table.schema])
            writer = pq.ParquetWriter(f"{out}/part-0.parquet", schema, compression="zstd")
        writer.write_table(table.cast(schema))
        n += len(rows)
    if writer:
        writer.close()
    conn.close()
    return n


def spark_session():
    from dblog.spark.session import session
    return session("dblog-bench", os.environ.get("DBLOG_SPARK_MASTER", "local[2]"),
                   {"spark.ui.enabled": "false", "spark.driver.memory": "6g",
                    "spark.jars": ",".join(JARS.values())})


def jdbc(kind: str, ns: str) -> tuple[str, dict]:
    """The JDBC URL and properties of a bench source."""
    if kind == "mysql":
        # The jdbc:mysql scheme selects Spark's MySQL dialect (backquoted names); the MariaDB
        # driver takes it with permitMysqlScheme.
        url = f"jdbc:mysql://127.0.0.1:{PORTS['MARIADB']}/{ns}?permitMysqlScheme"
        driver = "org.mariadb.jdbc.Driver"
    else:
        url, driver = f"jdbc:postgresql://127.0.0.1:{PORTS['POSTGRES']}/shop", "org.postgresql.Driver"
    return url, {"user": "dblog", "password": _password(), "driver": driver, "fetchsize": "10000"}


def spark_jdbc(spark, kind: str, ns: str, out: str, partitions: int | None = None) -> int:
    lo, hi = key_range(kind, ns)
    url, props = jdbc(kind, ns)
    partitions = partitions or int(os.environ.get("DBLOG_BENCH_JDBC_PARTITIONS", str(2 * (os.cpu_count() or 2))))
    df = spark.read.jdbc(url, f"{ns}.{TABLE}", column="id", lowerBound=lo, upperBound=hi + 1,
                         numPartitions=partitions, properties=props)
    df.write.mode("overwrite").parquet(out)
    return spark.read.parquet(out).count()


def dlt_parquet(kind: str, ns: str, out: str) -> tuple[int, str]:
    """dlt in its own process, as a user's pipeline runs: importing dlt next to Airflow (the
    tests, the DAG processor) would configure Airflow from dlt's side. Returns the rows loaded
    and the directory of the table's Parquet files."""
    out = os.path.abspath(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, __file__, "dlt", kind, ns, out], env=env, check=True)
    directory = f"{out}/data/bench/{TABLE}"
    return pq.ParquetDataset(directory).read(columns=["id"]).num_rows, directory


def _dlt_pipeline(kind: str, ns: str, out: str) -> None:
    os.environ["RUNTIME__DLTHUB_TELEMETRY"] = "false"  # no network here, and none wanted
    import dlt
    from dlt.sources.sql_database import sql_table
    if kind == "mysql":
        url, schema = f"mysql+pymysql://dblog:{_password()}@127.0.0.1:{PORTS['MARIADB']}/{ns}", None
    else:
        url, schema = f"postgresql+psycopg2://dblog:{_password()}@127.0.0.1:{PORTS['POSTGRES']}/shop", ns
    pipeline = dlt.pipeline(pipeline_name=f"bench_{kind}", pipelines_dir=f"{out}/.pipelines",
                            destination=dlt.destinations.filesystem(bucket_url=f"file://{out}/data"),
                            dataset_name="bench")
    resource = sql_table(credentials=url, schema=schema, table=TABLE, backend="pyarrow", chunk_size=BATCH)
    pipeline.run(resource, loader_file_format="parquet", write_disposition="replace")


if __name__ == "__main__":  # python bench/baselines.py dlt KIND NAMESPACE OUT
    _dlt_pipeline(*sys.argv[2:5])
