"""The capture users have only what capture needs, and the local services listen on loopback only."""
from __future__ import annotations

import pytest

from conftest import LOOPBACK, PORTS, listening, wait_for
from test_convergence import assert_converged


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


def _fresh_capture_user(src) -> tuple[str, list[str]]:
    """A capture user with no privilege at all (its connection URI), and how to drop it again."""
    user = f"dblog_lp_{src.tag}"
    if src.kind == "mariadb":
        src.sql(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'lp'")
        return (f"mysql://{user}:lp@127.0.0.1:{PORTS['MARIADB']}/{src.namespace}",
                [f"DROP USER IF EXISTS '{user}'@'127.0.0.1'"])
    src.sql(f"CREATE ROLE {user} LOGIN PASSWORD 'lp'")
    return (f"postgres://{user}:lp@127.0.0.1:{PORTS['POSTGRES']}/shop?schema={src.namespace}&slot=dblog_{src.tag}"
            f"&publication={user}", [f"DROP PUBLICATION IF EXISTS {user}", f"DROP OWNED BY {user}", f"DROP ROLE {user}"])


@pytest.mark.both_sources   # (each source's own capture, reader or setup: the subject)
def test_a_fresh_capture_user_set_up_in_the_readme_order_dumps_and_captures(src):
    """The order docs/sources.md gives: `dblog setup` as the new user prints the exact least-privilege statements
    (no traceback, never FOR ALL TABLES), an administrator runs them, then setup passes and the
    user dumps, captures and syncs."""
    src.workload(seed=41, rows=60).create()
    uri, drop = _fresh_capture_user(src)
    user = f"dblog_lp_{src.tag}"
    env = {f"AIRFLOW_CONN_{src.source_id.upper()}": uri}
    try:
        printed = src.dblog("setup", "--print-sql", env=env)
        assert printed.returncode == 0, printed.stderr
        refused = src.dblog("setup", env=env)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert "FOR ALL TABLES" not in printed.stdout + refused.stderr
        statements = [line.strip() for line in refused.stderr.splitlines() if line.startswith("    ")]
        if src.kind == "mariadb":
            account = f"'{user}'@'127.0.0.1'"
            expected = [f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {account};",
                        f"GRANT SELECT ON `{src.namespace}`.* TO {account};",
                        f"GRANT SELECT, INSERT, UPDATE ON `dblog`.`watermarks` TO {account};"]
        else:
            expected = [f"ALTER ROLE {user} REPLICATION;", f"GRANT USAGE ON SCHEMA {src.namespace} TO {user};",
                        f"GRANT SELECT, INSERT, UPDATE ON dblog.watermarks TO {user};",
                        f"CREATE PUBLICATION {user} FOR TABLES IN SCHEMA {src.namespace}, TABLE dblog.watermarks;"]
            assert "publication" in refused.stderr and "REPLICATION" in refused.stderr
        for statement in expected:
            assert any(s.startswith(statement) for s in statements), (statement, refused.stderr)
            assert statement in printed.stdout.replace("'localhost'", "'127.0.0.1'"), (statement, printed.stdout)
        src.sql(*statements)  # the administrator, exactly as printed

        ready = src.dblog("setup", env=env)
        assert ready.returncode == 0 and f"{src.source_id}: ready" in ready.stdout, ready.stderr
        src.dblog("capture", "--init", "--source", src.source_id, env=env, check=True)
        src.spawn("capture", "--source", src.source_id, env=env)
        dump = src.dblog("dump", "--source", src.source_id, "--all", "--chunk-size", "25", env=env)
        assert dump.returncode == 0, dump.stderr
        src.workload(seed=42, rows=60).run(seconds=30, max_ops=200)
        synced = src.dblog("sync", "--source", src.source_id, "--timeout", "120", env=env)
        assert synced.returncode == 0, synced.stderr
        assert_converged(src)
    finally:
        for proc in src.procs:
            proc.kill()
            proc.wait()
        if src.kind == "postgres":
            wait_for(lambda: not src.sql("SELECT 1 FROM pg_stat_activity WHERE usename = %s", params=[user]), 30,
                     what="the fresh role's connections to end")
        src.sql(*drop)


def test_local_services_listen_on_loopback_only(services):
    for name, port in PORTS.items():
        if name == "S3":  # started only by the object-storage tests, which check its ports
            continue
        addresses = listening(int(port))
        assert addresses and addresses <= LOOPBACK, (name, port, addresses)
