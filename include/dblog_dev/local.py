"""The services `make up` starts (scripts/services.sh): MariaDB, PostgreSQL and ZooKeeper on
127.0.0.1, their data and the capture user's password under `.local/`.

Ports come from DBLOG_MARIADB_PORT / DBLOG_POSTGRES_PORT / DBLOG_ZK_PORT (CI moves them); the
defaults here are the only ones Python reads, and must match services.sh's shell defaults. The
admin users' hosts from DBLOG_MARIADB_HOST / DBLOG_POSTGRES_HOST (docker compose loads the sample
from a container, where the services are `mariadb` and `postgres`; libpq reads PGPASSWORD).
"""
from __future__ import annotations

import json
import os

# Only the engine's lowest module: `dblog.connections` imports this one when DBLOG_LOCAL=1 asks.
from dblog.settings import ConfigError

HOST = "127.0.0.1"
DEFAULT_PORTS = {"MARIADB": 3307, "POSTGRES": 5433, "ZK": 2182, "S3": 8334}
CHROOT = "/dblog"
# The connection id the engine reads ZooKeeper's URI from (`dblog.connections.ZOOKEEPER_CONN`).
ZOOKEEPER_CONN = "dblog_zookeeper"
# The sample sources and the service behind each (the keys of `admin_uri`).
SOURCES = {"dblog_mariadb": "mariadb", "dblog_postgres": "postgres"}
CONNECTION_IDS = (*SOURCES, ZOOKEEPER_CONN)
# Superusers that load sample tables and make test schemas; the capture itself runs as `dblog`.
_ADMIN = {"mariadb": "mysql://root@{host}:{MARIADB}/mysql", "postgres": "postgres://postgres@{host}:{POSTGRES}/shop"}


def ports() -> dict[str, int]:
    """{"MARIADB", "POSTGRES", "ZK", "S3"} -> port, as DBLOG_<NAME>_PORT sets it."""
    return {name: int(os.environ.get(f"DBLOG_{name}_PORT", default)) for name, default in DEFAULT_PORTS.items()}


def local_dir() -> str:
    return os.environ.get("DBLOG_LOCAL_DIR") or os.path.abspath(os.path.join(os.getcwd(), ".local"))


def password() -> str:
    """The local capture user's password: DBLOG_PASSWORD, or the one `make up` generated."""
    if os.environ.get("DBLOG_PASSWORD"):
        return os.environ["DBLOG_PASSWORD"]
    path = os.path.join(local_dir(), "secrets", "dblog-password")
    try:
        with open(path) as f:
            return f.readline().strip()
    except FileNotFoundError:
        raise ConfigError(f"no password for the local capture user: {path} is missing. Run `make up` "
                          "(it generates one) or set DBLOG_PASSWORD.") from None


def connections() -> dict[str, str]:
    """Connection URIs of the local services, for the ids in CONNECTION_IDS."""
    p, pw = ports(), password()
    return {
        "dblog_mariadb": f"mysql://dblog:{pw}@{HOST}:{p['MARIADB']}/shop",
        "dblog_postgres": f"postgres://dblog:{pw}@{HOST}:{p['POSTGRES']}/shop?schema=public",
        ZOOKEEPER_CONN: f"zookeeper://{HOST}:{p['ZK']}{CHROOT}",
    }


def zookeeper_hosts() -> str:
    return f"{HOST}:{ports()['ZK']}"


def admin_uri(service: str) -> str:
    """A superuser's URI on the local `mariadb` or `postgres`."""
    if service not in _ADMIN:
        raise ConfigError(f"no local service {service!r}; use one of {', '.join(_ADMIN)}")
    host = os.environ.get(f"DBLOG_{service.upper()}_HOST", HOST)
    return _ADMIN[service].format(host=host, **ports())


def postgres_database(name: str) -> str:
    """A database of its own on the local PostgreSQL (made unless it exists), as a SQLAlchemy URI: an
    Iceberg catalog, an Airflow deployment's metadata."""
    from .workload import connect
    _, conn = connect(admin_uri("postgres"))
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if not cur.fetchone():
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return f"postgresql+psycopg2://{admin_uri('postgres').split('://', 1)[1].rsplit('/', 1)[0]}/{name}"


def exported(text: str) -> dict[str, str]:
    """The variables of `export NAME=VALUE` lines, as a shell would read them (`cluster.sh env`)."""
    import shlex
    pairs = (shlex.split(line)[1].split("=", 1) for line in text.splitlines() if line.startswith("export "))
    return {name: value for name, value in pairs}


# -- the S3 server (SeaweedFS) that `scripts/services.sh start seaweedfs` runs ---------------------
S3_ICEBERG_OFFSET = 3   # the Iceberg REST catalog's port past the S3 port (services.sh: -s3.port.iceberg)


def s3_port() -> int:
    return ports()["S3"]


def s3_env() -> dict[str, str]:
    """What a process needs to use the local S3 server: endpoint, region and credentials."""
    path = os.path.join(local_dir(), "secrets", "s3")
    try:
        with open(path) as f:
            key, secret = (f.readline().strip() for _ in range(2))
    except FileNotFoundError:
        raise ConfigError(f"no credentials for the local S3 server: {path} is missing. Run "
                          "`scripts/services.sh start seaweedfs` (it generates them)") from None
    return {"DBLOG_S3_ENDPOINT": f"http://{HOST}:{s3_port()}", "DBLOG_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}


def s3_rest_catalog(bucket: str) -> dict[str, str]:
    """The settings that put the warehouse in SeaweedFS's Iceberg REST catalog (services.sh runs it on
    the S3 port + 3), in the table bucket `bucket`, made here through the S3 Tables API as AWS's
    is: requests signed with SigV4 for `s3tables`, the bucket's URI as the catalog's warehouse."""
    import boto3
    env = s3_env()
    client = boto3.client("s3tables", endpoint_url=env["DBLOG_S3_ENDPOINT"], region_name=env["DBLOG_S3_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    if bucket not in {b["name"] for b in client.list_table_buckets().get("tableBuckets", [])}:   # (none: no key)
        client.create_table_bucket(name=bucket)
    properties = {"warehouse": f"s3://{bucket}/", "rest.sigv4-enabled": "true", "rest.signing-name": "s3tables",
                  "rest.signing-region": env["DBLOG_S3_REGION"]}
    return {**env, "DBLOG_WAREHOUSE": f"s3://{bucket}/", "DBLOG_ICEBERG_CATALOG": f"http://{HOST}:{s3_port() + S3_ICEBERG_OFFSET}",
            "DBLOG_ICEBERG_CATALOG_PROPERTIES": json.dumps(properties)}


def s3_probe() -> None:
    """Raise unless an object can be written and read back (services.sh's readiness check)."""
    os.environ.update(s3_env())
    from dblog.storage import filesystem
    fs, base = filesystem("s3://dblog-ready/probe")
    with fs.open_output_stream(f"{base}/ok") as out:
        out.write(b"1")
    with fs.open_input_stream(f"{base}/ok") as f:
        assert f.read() == b"1"
