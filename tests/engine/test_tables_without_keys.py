"""A table without any key: its changes are not staged (no row could be matched by them), said
where the user looks, and the capture goes on with every other table."""
from conftest import settle


def test_a_write_to_a_table_without_a_key_is_not_staged_and_the_capture_goes_on(src):
    capture = src.start_capture()
    settle(src)
    keyless, keyed = src.table("nokey"), src.table("keyed")
    src.sql(f"CREATE TABLE {keyless} (a INT, b TEXT)", f"INSERT INTO {keyless} VALUES (1, 'x')",
            f"CREATE TABLE {keyed} (id INT PRIMARY KEY)", f"INSERT INTO {keyed} VALUES (1)")
    settle(src)
    staged = src.staged()
    assert staged.read_log(src.source_id, keyed).num_rows == 1
    assert not staged.segments(src.source_id, keyless)
    capture.terminate()
    capture.wait()
    log = capture.stderr.read()
    assert f"table {keyless} has no primary key and no unique index on NOT NULL columns" in log
    assert "Its changes are not staged" in log
