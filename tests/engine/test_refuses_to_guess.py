"""Without DBLOG_LOCAL, a connection or root left unset stops dblog before it touches anything,
saying what to set; it never falls back to the local services or to a directory under the
working directory (which would capture the wrong database, or stage where no merge reads)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

UNSET = ("DBLOG_LOCAL", "DBLOG_STAGING", "DBLOG_WAREHOUSE", "DBLOG_SOURCES")


def dblog(env: dict, cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dblog.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def outside_local(env: dict, keep: tuple[str, ...] = ()) -> dict:
    """`env` without the local fallback and without every connection and root but `keep`."""
    return {k: v for k, v in env.items()
            if k in keep or not (k in UNSET or k.startswith("AIRFLOW_CONN_"))}


@pytest.mark.parametrize("args", [("capture", "--init"), ("capture",), ("dump", "--all"), ("sync",), ("merge",),
                                  ("export", "--table", "accounts")])
def test_a_source_without_a_connection_is_refused_by_name_and_nothing_is_written(services, tmp_path, args):
    env = outside_local(os.environ)
    result = dblog(env, tmp_path, *args, "--source", "dblog_mariadb")
    assert result.returncode == 2, result.stderr
    assert ("dblog: error: no connection 'dblog_mariadb': set AIRFLOW_CONN_DBLOG_MARIADB to a URI such as "
            "mysql://user:password@host:3306/db") in result.stderr
    assert "DBLOG_LOCAL=1 uses the local `make up` services instead" in result.stderr
    assert list(tmp_path.iterdir()) == [], "something was written under the working directory"


def test_a_missing_zookeeper_connection_is_refused_before_any_checkpoint_is_set(mariadb, tmp_path):
    from dblog.coordination.checkpoint import checkpoint_path
    mariadb.workload(rows=20).create()
    env = outside_local(mariadb.env, keep=(f"AIRFLOW_CONN_{mariadb.source_id.upper()}", "DBLOG_STAGING"))
    result = dblog(env, tmp_path, "capture", "--init", "--source", mariadb.source_id)
    assert result.returncode == 2
    assert "no connection 'dblog_zookeeper': set AIRFLOW_CONN_DBLOG_ZOOKEEPER" in result.stderr
    assert "DBLOG_LOCAL=1" in result.stderr
    # The fallback would have set the checkpoint in the local ZooKeeper's default chroot.
    from dblog.coordination.store import StateStore
    from dblog_dev import local
    with StateStore(local.zookeeper_hosts(), local.CHROOT, timeout=3) as store:
        assert store.get(checkpoint_path(mariadb.source_id)) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, variable", [(("capture",), "DBLOG_STAGING"), (("dump", "--all"), "DBLOG_STAGING"),
                                            (("merge",), "DBLOG_STAGING")])
def test_a_missing_root_is_refused_by_name_before_zookeeper_or_the_source_is_touched(mariadb, tmp_path, args,
                                                                                    variable):
    mariadb.workload(rows=20).create()
    env = outside_local(mariadb.env, keep=(f"AIRFLOW_CONN_{mariadb.source_id.upper()}", "AIRFLOW_CONN_DBLOG_ZOOKEEPER"))
    result = dblog(env, tmp_path, *args, "--source", mariadb.source_id)
    assert result.returncode == 2
    assert f"dblog: error: {variable} is not set: set it to the " in result.stderr
    assert f"DBLOG_LOCAL=1 uses .local/{variable.split('_')[1].lower()} of the local `make up` deployment" in \
        result.stderr
    with mariadb.store() as store:
        assert store.children("/") == [], "state was written to ZooKeeper"
    assert list(tmp_path.iterdir()) == []
