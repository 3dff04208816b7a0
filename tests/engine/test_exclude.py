"""Excluded columns (personal data) never reach the staged log, from the stream or from dumps."""
from dblog.operations.verify import compare

from conftest import checkpoint, parquet_column_names, settle


def test_excluded_columns_appear_in_no_staged_file_and_the_rest_converges(src):
    src.query = "exclude=accounts.note,accounts.data"
    w = src.workload(seed=30, rows=200)
    w.create()
    src.start_capture()
    w.run(seconds=1)
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "40", check=True)
    settle(src)
    names = parquet_column_names(src.staging)
    assert {"id", "name", "balance"} <= names and not {"note", "data"} & names
    assert compare(src.source(), src.staged(), src.table("accounts"), checkpoint(src)).equal


def test_excluding_a_key_column_is_refused_with_the_fix(mariadb):
    mariadb.query = "exclude=order_lines.line_no"
    mariadb.workload(rows=20).create()
    result = mariadb.dblog("dump", "--source", mariadb.source_id, "--table", "order_lines")
    assert result.returncode == 2
    assert "cannot exclude key column(s) line_no" in result.stderr


def test_a_malformed_exclude_list_is_refused(mariadb):
    mariadb.query = "exclude=justacolumn"
    result = mariadb.dblog("status", "--source", mariadb.source_id)
    assert result.returncode == 2 and "is not table.column" in result.stderr
