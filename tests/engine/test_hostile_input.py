"""Hostile table names and key values (quotes, semicolons, comments, slashes, unicode) are quoted
or bound, never spliced into SQL: they are captured, dumped and repaired like any other."""
from __future__ import annotations

import json

from conftest import checkpoint, settle

HOSTILE = "o'rder \"lines\"; -- ✓/x"
KEYS = ["'; DROP TABLE accounts; --", 'quote"d', "back\\slash", "ünï/cödé", "semi;colon /* c */", "plain"]


def _quoted(src, name: str) -> str:
    q = "`" if src.kind == "mariadb" else '"'
    return f"{src.namespace}.{q}{name.replace(q, q + q)}{q}"


def _create_hostile_table(src) -> str:
    table = _quoted(src, HOSTILE)
    src.sql(f"CREATE TABLE {table} (k VARCHAR(64) PRIMARY KEY, v INT)")
    conn = src.admin()
    conn.cursor().executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(k, i) for i, k in enumerate(KEYS)])
    conn.commit()
    conn.close()
    return table


def test_hostile_table_names_and_key_values_are_captured_dumped_and_repaired_safely(src):
    from dblog.operations.verify import compare
    src.workload(seed=61, rows=50).create()
    table = _create_hostile_table(src)
    src.start_capture()
    out = src.dblog("dump", "--source", src.source_id, "--table", HOSTILE, "--chunk-size", "2")
    assert out.returncode == 0, out.stderr
    src.sql(f"UPDATE {table} SET v = 99 WHERE k = %s", params=[KEYS[1]])
    src.sql(f"DELETE FROM {table} WHERE k = %s", params=[KEYS[0]])
    repair = src.dblog("dump", "--source", src.source_id, "--table", HOSTILE, "--keys", json.dumps(KEYS[:4]))
    assert repair.returncode == 0, repair.stderr
    settle(src)
    diff = compare(src.source(), src.staged(), src.table(HOSTILE), checkpoint(src))
    assert diff.equal and diff.source_rows == len(KEYS) - 1, diff
    assert src.sql(f"SELECT COUNT(*) FROM {src.table('accounts')}")[0][0] == 50


def test_sql_in_a_table_name_is_an_unknown_table_and_nothing_runs(src):
    src.workload(seed=62, rows=20).create()
    src.dblog("capture", "--init", "--source", src.source_id, check=True)
    out = src.dblog("dump", "--source", src.source_id, "--table", "accounts; DROP TABLE accounts; --")
    assert out.returncode == 2 and "does not exist" in out.stderr, out.stderr
    assert src.sql(f"SELECT COUNT(*) FROM {src.table('accounts')}")[0][0] == 20


def test_a_hostile_table_name_reaches_the_warehouse_intact(mariadb, spark, warehouse):
    from dblog.merge.job import merge_source

    from conftest import assert_warehouse_equals_source
    table = _create_hostile_table(mariadb)
    mariadb.start_capture()
    mariadb.dblog("dump", "--source", mariadb.source_id, "--table", HOSTILE, check=True)
    mariadb.sql(f"DELETE FROM {table} WHERE k = %s", params=[KEYS[2]])
    settle(mariadb)
    with mariadb.store() as store:
        merge_source(spark, store, mariadb.staged(), warehouse, mariadb.source_id)
    assert warehouse.tables(mariadb.source_id) == [mariadb.table(HOSTILE)]
    assert_warehouse_equals_source(mariadb, warehouse, [HOSTILE])


def test_the_source_password_appears_in_no_output_and_no_staged_file(src):
    from urllib.parse import urlsplit
    password = urlsplit(src.uri).password
    src.workload(seed=63, rows=100).create()
    capture = src.start_capture()
    outputs = [src.dblog("-v", "dump", "--source", src.source_id, "--all", "--chunk-size", "30"),
               src.dblog("-v", "status", "--source", src.source_id, "--json"),
               src.dblog("dump", "--source", src.source_id, "--table", "nope")]
    settle(src)
    capture.terminate()
    captured = capture.communicate(timeout=30)
    text = "".join(o.stdout + o.stderr for o in outputs) + "".join(captured)
    assert "staged" in text and password not in text
    files = [p for p in src.staging.rglob("*") if p.is_file()]
    assert files and not any(password.encode() in p.read_bytes() for p in files)
