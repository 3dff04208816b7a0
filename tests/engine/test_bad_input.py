"""Bad input writes nothing, and an environment that refuses (staging, a busy slot) says so by name.

Every case here once either left something behind (a checkpoint, a replication slot, a dump
registered as running for ever) or ended in a Python traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dblog.coordination import store as paths
from dblog.coordination.checkpoint import checkpoint_path

from conftest import PORTS, wait_for


def registered(env) -> tuple[bool, list[str]]:
    """Whether the source has a capture checkpoint, and its registered dumps."""
    store = env.store()
    try:
        return store.get(checkpoint_path(env.source_id)) is not None, store.children(paths.dumps_path(env.source_id))
    finally:
        store.stop()


def slot_exists(env) -> bool:
    return bool(env.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", params=[f"dblog_{env.tag}"]))


def status_of(env, dump_id: str) -> dict:
    from dblog.snapshot.dump import dump_status
    store = env.store()
    try:
        return dump_status(store, env.source_id, dump_id)
    finally:
        store.stop()


def refused(result, *phrases: str) -> None:
    """An input error: exit 2, the message names the problem, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for p in phrases:
        assert p in result.stderr, (p, result.stderr)


@pytest.mark.parametrize("args, message", [
    (["--table", "nosuch"], "does not exist"),
    (["--table", "accounts", "--keys", "[null]"], "null is not a key value"),
    (["--table", "accounts", "--keys", "@/nonexistent/keys.json"], "cannot read /nonexistent/keys.json"),
    (["--table", "information_schema.tables"], "outside"),
    (["--table", "accounts", "--delay", "NaN"], "must be a finite number"),
])
def test_bad_input_on_a_source_seen_for_the_first_time_creates_no_checkpoint_and_no_slot(src, args, message):
    src.workload(rows=20).create()
    refused(src.dblog("dump", "--source", src.source_id, *args), message)
    assert registered(src) == (False, [])
    if src.kind == "postgres":
        assert not slot_exists(src)


def test_a_valid_first_dump_still_sets_up_the_checkpoint_before_its_chunks(src):
    src.workload(rows=20).create()
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", check=True)
    checkpoint, dumps = registered(src)
    assert checkpoint and len(dumps) == 1
    if src.kind == "postgres":
        assert slot_exists(src)


@pytest.mark.parametrize("table, keys, message", [
    ("accounts", "[99999999999999999999999]", "99999999999999999999999 is out of range for column id (b"),
    ("accounts", "[-99999999999999999999999]", "is out of range for column id"),
    ("order_lines", "[[3000000000, 1]]", "3000000000 is out of range for column order_id"),
    ("accounts", "[null]", "null is not a key value: column id"),
    ("order_lines", "[[1, null]]", "null is not a key value: column line_no"),
    ("accounts", "[NaN]", "nan is not a key value for column id: give a finite number"),
    ("accounts", "[Infinity]", "inf is not a key value for column id"),
])
def test_a_key_the_column_cannot_hold_is_refused_at_validation_and_registers_nothing(src, table, keys, message):
    src.workload(rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    result = src.dblog("dump", "--source", src.source_id, "--table", table, "--keys", keys)
    refused(result, f"malformed key list for t_{src.tag}.{table}", message)
    assert registered(src)[1] == []
    assert not (src.staging / src.source_id / "chunks").exists()


def test_the_largest_key_a_bigint_column_holds_is_accepted_and_staged_as_absent(src):
    src.workload(rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    out = src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--keys", f"[{2 ** 63 - 1}, 1]",
                    check=True)
    assert json.loads(out.stdout)["state"] == "done"


def test_a_missing_keys_file_is_an_input_error_that_registers_nothing(src, tmp_path):
    src.workload(rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    missing = tmp_path / "keys.json"
    refused(src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--keys", f"@{missing}"),
            f"--keys @{missing}: cannot read {missing} (No such file or directory)")
    refused(src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--keys", f"@{tmp_path}"),
            "cannot read")  # a directory
    assert registered(src)[1] == []


def unprivileged(args: list[str]) -> list[str]:
    """As root, drop the capabilities that bypass file permissions, so a chmod binds (as for any user)."""
    if os.geteuid() != 0:
        return args
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *args]


def test_a_read_only_staging_directory_fails_by_name_and_a_rerun_resumes_the_dump(src):
    src.workload(rows=300).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    src.staging.mkdir(parents=True, exist_ok=True)
    src.staging.chmod(0o555)
    try:
        result = subprocess.run(unprivileged([sys.executable, "-m", "dblog.cli", "dump", "--source", src.source_id,
                                              "--table", "accounts", "--chunk-size", "50"]),
                                env=src.env, capture_output=True, text=True, timeout=120)
    finally:
        src.staging.chmod(0o755)
    refused(result, "cannot write the staged log at", "Permission denied", "Fix: make", "writable")
    dump_id = registered(src)[1][0]
    assert f"dblog dump run {dump_id}" in result.stderr
    # The dump is not left "running" with no worker: it reports the table failed, for a re-run.
    status = status_of(src, dump_id)
    assert status["state"] == "failed" and status["failed"] == [src.table("accounts")], status
    rerun = src.dblog("dump", "run", dump_id, "--source", src.source_id, check=True)
    final = json.loads(rerun.stdout)
    assert final["state"] == "done" and final["tables"][src.table("accounts")]["rows"] == 300, final


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs for the staged log (mounting needs CAP_SYS_ADMIN, as root in the dev container)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    # No skip: a machine that cannot run this test must say so, not pass it silently.
    assert made.returncode == 0, (f"cannot mount a 2 MB tmpfs for the full-disk test ({made.stderr.decode().strip()}); "
                                  "it needs root (CAP_SYS_ADMIN), as on the development machine")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_staging_disk_that_fills_mid_dump_fails_by_name_and_a_rerun_resumes_after_space_is_freed(mariadb, small_disk):
    src = mariadb
    src.staging = small_disk
    src.workload(rows=2000).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # leave room for a few chunks only
        f.write(b"\0" * (2 * 1024 * 1024 - 96 * 1024))
    result = src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "100")
    refused(result, "cannot write the staged log at", "No space left on device")
    dump_id = registered(src)[1][0]
    status = status_of(src, dump_id)
    progress = status["tables"][src.table("accounts")]
    assert status["state"] == "failed" and 0 < progress["chunks"] < 20, status  # it failed mid-dump
    assert not list(small_disk.rglob(".tmp-*")), "a half-written file was left behind"
    filler.unlink()
    final = json.loads(src.dblog("dump", "run", dump_id, "--source", src.source_id, check=True).stdout)
    assert final["state"] == "done" and final["tables"][src.table("accounts")]["rows"] == 2000, final


def test_a_replication_slot_held_by_another_consumer_stops_the_capture_naming_the_holder(postgres):
    src = postgres
    src.workload(rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    slot = f"dblog_{src.tag}"
    holder = subprocess.Popen(["pg_recvlogical", "-d", f"dbname=shop host=127.0.0.1 port={PORTS['POSTGRES']} "
                               "user=postgres", f"--slot={slot}", "--start", "-o", "proto_version=1",
                               "-o", "publication_names=dblog", "-f", os.devnull])
    try:
        pid = wait_for(lambda: src.sql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                                       params=[slot])[0][0], 30, what="pg_recvlogical to hold the slot")
        result = src.dblog("capture", "--source", src.source_id, "--duration", "5", timeout=120)
    finally:
        holder.terminate()
        holder.wait(30)
    refused(result, f"replication slot {slot} is in use by another consumer (pid {pid}",
            f"pg_terminate_backend({pid})", "?slot=NAME")


def test_a_non_finite_delay_or_chunk_size_is_refused_and_never_reaches_zookeeper(src):
    src.workload(rows=50).create()
    for value in ("NaN", "inf", "-inf"):
        refused(src.dblog("dump", "--source", src.source_id, "--table", "accounts", f"--delay={value}"),
                "delay between chunks must be a finite number")
    assert registered(src)[1] == []
    dump_id = src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--create-only",
                        check=True).stdout.strip()
    for value in ("NaN", "inf"):
        refused(src.dblog("dump", "throttle", dump_id, "--source", src.source_id, "--delay", value),
                "must be a finite number")
    store = src.store()
    try:
        raw = store.zk.get(paths.control_path(src.source_id, dump_id))[0].decode()
    finally:
        store.stop()
    assert json.loads(raw)["delay_s"] == 0.0 and "NaN" not in raw and "Infinity" not in raw


def _outside_tables(src) -> list[str]:
    """A readable table with a primary key in another database / schema, and system catalogs."""
    other = f"{src.namespace}_other"
    if src.kind == "mariadb":
        src.sql(f"CREATE DATABASE {other}", f"CREATE TABLE {other}.t (id INT PRIMARY KEY)",
                f"GRANT SELECT ON {other}.* TO 'dblog'@'127.0.0.1'")
        return [f"{other}.t", "information_schema.tables", "mysql.user"]
    src.sql(f"CREATE SCHEMA {other}", f"CREATE TABLE {other}.t (id INT PRIMARY KEY)",
            f"GRANT USAGE ON SCHEMA {other} TO dblog", f"GRANT SELECT ON {other}.t TO dblog")
    return [f"{other}.t", "pg_catalog.pg_class", "information_schema.tables"]


def test_a_table_outside_the_captured_namespace_is_refused_naming_the_namespace(src):
    src.workload(rows=20).create()
    outside = _outside_tables(src)
    try:
        kind = "database" if src.kind == "mariadb" else "schema"
        for table in outside:
            refused(src.dblog("dump", "--source", src.source_id, "--table", table),
                    f"{table} is outside {kind} {src.namespace}, the one {src.source_id} captures")
        assert registered(src) == (False, [])
    finally:
        drop = "DATABASE" if src.kind == "mariadb" else "SCHEMA"
        src.sql(f"DROP {drop} IF EXISTS {src.namespace}_other" + ("" if src.kind == "mariadb" else " CASCADE"))


def test_dump_all_dumps_a_table_without_any_key_whole_and_status_says_so(src):
    src.workload(rows=40).create()
    src.sql(f"CREATE TABLE {src.namespace}.no_pk (a INT, b TEXT)", f"INSERT INTO {src.namespace}.no_pk VALUES (1, 'x')")
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    result = src.dblog("dump", "--source", src.source_id, "--all", "--chunk-size", "25")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    no_pk = src.table("no_pk")
    assert out["state"] == "done" and set(out["tables"]) == {src.table("accounts"), src.table("order_lines"), no_pk}
    assert out["skipped"] == []
    status = src.dblog("status", "--source", src.source_id, check=True).stdout
    assert f"{no_pk} has no key at all: each dump replaces its warehouse table whole" in status, status


def test_dump_all_leaves_out_excluded_tables_and_refuses_an_exclude_that_matches_none(src):
    src.workload(rows=40).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    out = json.loads(src.dblog("dump", "--source", src.source_id, "--all", "--exclude", "order_lines",
                               check=True).stdout)
    assert list(out["tables"]) == [src.table("accounts")]
    assert out["skipped"] == [{"table": src.table("order_lines"), "reason": "excluded"}]
    refused(src.dblog("dump", "--source", src.source_id, "--all", "--exclude", "order_line"),
            f"the exclude list names {src.table('order_line')}, which {src.source_id} does not have")
    refused(src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--exclude", "order_lines"),
            "--exclude goes with --all")


def test_dump_all_with_no_dumpable_table_is_an_error_that_registers_nothing(src):
    src.sql(f"CREATE TABLE {src.namespace}.no_pk (a INT, b TEXT)", f"CREATE TABLE {src.namespace}.k (id INT PRIMARY KEY)")
    result = src.dblog("dump", "--source", src.source_id, "--all", "--exclude", "k", "--exclude", "no_pk")
    refused(result, f"no table of {src.source_id} can be dumped", f"{src.table('k')}: excluded",
            f"{src.table('no_pk')}: excluded")
    assert registered(src) == (False, [])


def test_dump_export_and_verify_use_the_one_configured_source_and_otherwise_ask_which(mariadb, tmp_path):
    src = mariadb
    src.workload(rows=20).create()
    out = src.dblog("dump", "--table", "accounts", check=True)  # DBLOG_SOURCES lists only this source
    assert json.loads(out.stdout)["source"] == src.source_id
    # No capture ran, so nothing is staged; the message shows which source export chose.
    refused(src.dblog("export", "--table", "accounts"), f"no staged log for {src.table('accounts')} on {src.source_id}")
    two = {"DBLOG_SOURCES": f"{src.source_id},other_src", "DBLOG_WAREHOUSE": str(tmp_path / "warehouse")}
    for command in (["dump", "--table", "accounts"], ["dump", "pause", "x"], ["export", "--table", "accounts"]):
        refused(src.dblog(*command, env=two), f"`dblog {command[0]}` needs --source ID: the configured sources "
                                              f"(DBLOG_SOURCES) are {src.source_id}, other_src")
    # verify without --source covers every configured source (it used to check dblog_mariadb).
    one = src.dblog("verify", env={"DBLOG_WAREHOUSE": str(tmp_path / "warehouse")})
    refused(one, f"{src.source_id} has no warehouse tables yet")
    assert "dblog_mariadb" not in one.stderr
    both = src.dblog("verify", env={**two, "AIRFLOW_CONN_OTHER_SRC": src.uri})
    refused(both, f"{src.source_id} has no warehouse tables yet", "other_src has no warehouse tables yet")


def test_a_staging_root_the_capture_cannot_write_stops_it_by_name_with_the_fix(src, tmp_path):
    src.workload(rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    src.sql(f"UPDATE {src.table('accounts')} SET name = 'x' WHERE id = 1")
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # a file where the staging directory should be: refused even to root
    result = src.dblog("capture", "--source", src.source_id, "--duration", "5",
                       env={"DBLOG_STAGING": str(blocker / "staging")}, timeout=120)
    refused(result, "cannot write the staged log at", str(blocker / "staging"), "Fix: make")


def test_a_merge_of_an_unknown_table_is_refused_naming_the_known_ones_before_anything_starts(mariadb):
    mariadb.workload(seed=64, rows=10).create()
    mariadb.dblog("capture", "--init", "--source", mariadb.source_id, check=True)
    out = mariadb.dblog("merge", "--source", mariadb.source_id, "--table", "x; DROP")
    refused(out, f"no table {mariadb.namespace}.x; DROP", "known tables:", mariadb.table("accounts"))
    assert "snapshot" not in out.stdout, out.stdout
    store = mariadb.store()
    try:   # no merge lock node, no catalog entry: nothing written
        assert store.children(f"/{mariadb.source_id}/merge") == []
    finally:
        store.stop()


def test_cli_input_of_the_wrong_shape_is_named_with_the_shape_it_takes(mariadb):
    mariadb.workload(seed=65, rows=10).create()
    sid = mariadb.source_id
    refused(mariadb.dblog("dump", "--source", sid, "--table", ""), "the table name '' is empty", "schema.table")
    refused(mariadb.dblog("dump", "pause", "../capture", "--source", sid), "'../capture' is not a dump id",
            "letters, digits")
    refused(mariadb.dblog("export", "--source", sid, "--table", "accounts", "--from", "garbage"),
            "--from 'garbage' is not a position")
    assert registered(mariadb) == (False, [])
