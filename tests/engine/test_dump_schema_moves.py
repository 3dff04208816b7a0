"""A dump window whose table's column changes type between its schema read and its SELECT (a
conversion landing mid-window) is read again with the new columns, instead of failing the dump
on a value that no longer fits. The whole path under writes and merges:
tests/spark/test_schema_churn.py."""
from dblog.coordination.checkpoint import ensure_checkpoint
from dblog.snapshot.dump import create_dump, run_dump
from dblog.snapshot.dump_spec import DumpSpec


def test_a_column_converted_between_a_windows_schema_read_and_its_select_has_the_window_read_again(src):
    table = src.table("moving")
    src.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, qty INT)")
    src.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 31)))
    convert = f"ALTER TABLE {table} MODIFY qty VARCHAR(20)" if src.kind == "mariadb" else \
        f"ALTER TABLE {table} ALTER COLUMN qty TYPE VARCHAR(20)"
    source, staged = src.source(), src.staged()
    read = source.select_chunk_table
    moved = []

    def select_after_a_conversion(schema, *args):
        if not moved:   # the window's schema says INT; the rows it selects hold text
            src.sql(convert, f"UPDATE {table} SET qty = 'q' WHERE id > 10")
            moved.append(schema)
        return read(schema, *args)
    source.select_chunk_table = select_after_a_conversion
    with src.store() as store:
        ensure_checkpoint(store, source)
        dump_id = create_dump(store, source, DumpSpec(tables=[table], chunk_size=20))
        progress = run_dump(store, source, staged, dump_id)[0]
    assert progress.status == "done" and progress.rows >= 30
    assert moved and moved[0].column("qty").source_type.startswith("int")
    chunks = [staged.read_chunk(p) for p in staged.chunk_files(src.source_id, table, dump_id)]
    values = {r["id"]: r["qty"] for c in chunks for r in c.select(["id", "qty"]).to_pylist()}
    assert values[11] == "q" and values[30] == "q" and values[1] == "1"   # read with the new column's type
    source.close()
