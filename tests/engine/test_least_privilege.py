"""The capture users have only what capture needs, and the local services listen on loopback only."""
from __future__ import annotations

from conftest import PORTS


def test_the_mariadb_capture_user_has_replication_reads_and_its_watermark_database_only(mariadb):
    grants = " ".join(g[0] for g in mariadb.sql("SHOW GRANTS FOR 'dblog'@'127.0.0.1'"))
    assert "GRANT REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR ON *.*" in grants
    assert "ALL PRIVILEGES ON `dblog`.*" in grants
    for power in ("SUPER", "GRANT OPTION", "FILE", "CREATE USER", "ALL PRIVILEGES ON *.*", "RELOAD", "SHUTDOWN"):
        assert power not in grants, power
    denied = mariadb.sql("SELECT COUNT(*) FROM information_schema.user_privileges WHERE grantee LIKE "
                         "'''dblog''@%%' AND privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'DROP')")
    assert denied[0][0] == 0


def test_the_postgres_capture_role_is_not_a_superuser_and_cannot_write_captured_tables(postgres):
    postgres.workload(seed=71, rows=10).create()
    role = postgres.sql("SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication FROM pg_roles "
                        "WHERE rolname = 'dblog'")[0]
    assert role == (False, False, False, True)
    table = postgres.table("accounts")
    can = postgres.sql(f"SELECT has_table_privilege('dblog', '{table}', 'SELECT'), "
                       f"has_table_privilege('dblog', '{table}', 'INSERT'), "
                       f"has_table_privilege('dblog', '{table}', 'UPDATE'), "
                       f"has_table_privilege('dblog', '{table}', 'DELETE')")[0]
    assert can == (True, False, False, False)


def _listening(port: int) -> set[str]:
    """Local addresses listening on TCP `port` (from /proc/net/tcp and tcp6)."""
    out = set()
    for path, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in open(path).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                out.add(address)
    return out


def test_local_services_listen_on_loopback_only(services):
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::1, ::ffff:127.0.0.1
    for name, port in PORTS.items():
        addresses = _listening(int(port))
        assert addresses and addresses <= loopback, (name, port, addresses)
