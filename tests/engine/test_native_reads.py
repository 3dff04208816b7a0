"""A dump's chunk decoded natively (connectorx, ADBC) holds exactly the Python driver's values,
column type by column type; a table or a chunk the native reader cannot read exactly is read by
the Python driver, and the log says so. The Python driver's values are the ones
`test_type_fidelity.py` holds to the capture's."""
from __future__ import annotations

import json
import logging

import pytest

from dblog.model.staged_format import last_key

from kinds_table import HOSTILE, KINDS
from kinds_table import rows as kinds_rows

# Every column type the native readers take, with extremes, hostile text and NULLs.
NATIVE = {
    "mariadb": ("CREATE TABLE {ns}.native (k VARCHAR(40), n INT, i INT, ui INT UNSIGNED, big BIGINT UNSIGNED, "
                "ti TINYINT, d DECIMAL(38,18), d2 DECIMAL(12,2), dt DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL, "
                "f DOUBLE, dd DATE, s VARCHAR(100), t TEXT, c CHAR(5), yr YEAR, b VARBINARY(20), "
                "PRIMARY KEY (k, n)) DEFAULT CHARSET=utf8mb4"),
    "postgres": ("CREATE TABLE {ns}.native (k VARCHAR(40), n INT, i INT, si SMALLINT, big BIGINT, d NUMERIC(38,18), "
                 "d2 NUMERIC(12,2), dt TIMESTAMP(6), ts TIMESTAMPTZ, f DOUBLE PRECISION, dd DATE, s VARCHAR(100), "
                 "t TEXT, c CHAR(5), bo BOOLEAN, b BYTEA, PRIMARY KEY (k, n))"),
}
KEYS = ["'; DROP TABLE native; --", 'quote"d', "back\\slash", "ünï/cödé 🦆", "semi;colon /* c */"]


def _rows(kind: str) -> list[tuple]:
    text = HOSTILE if kind == "mariadb" else HOSTILE.replace("\x00", "")
    if kind == "mariadb":
        one = (-2147483648, 4294967295, 18446744073709551615, -128, "12345678901234567890.123456789012345678",
               "1234567890.12", "2024-02-29 23:59:59.123456", "1000-01-01 00:00:00", "2024-02-29 23:59:59.654321",
               1.5e-300, "0001-01-01", text, text, "ab", 2024, b"\x00\xff'")
        two = (0, 0, 0, 127, "-0.000000000000000001", "-0.01", "9999-12-31 23:59:59.999999", "2000-01-01",
               "1970-01-01 00:00:01", -0.0, "9999-12-31", "", "", "", 1901, b"")
    else:
        one = (-2147483648, -32768, -9223372036854775808, "12345678901234567890.123456789012345678",
               "1234567890.12", "2024-02-29 23:59:59.123456", "2024-02-29 23:59:59.654321+02", 1.5e-300,
               "0001-01-01", text, text, "ab", True, b"\x00\xff'")
        two = (0, 0, 9223372036854775807, "-0.000000000000000001", "-0.01", "9999-12-31 23:59:59.999999",
               "1970-01-01 00:00:00+00", -0.0, "9999-12-31", "", "", "", False, b"")
    nulls = (None,) * len(one)
    return [(k, n, *values) for k in KEYS for n, values in enumerate((one, two, nulls))]


def _create(src, create: str, insert_rows: list[tuple], name: str, session: str | None = None) -> None:
    src.sql(create.format(ns=src.namespace))
    conn = src.admin()
    try:
        cur = conn.cursor()
        if session:
            cur.execute(session)
        marks = ", ".join(["%s"] * len(insert_rows[0]))
        cur.executemany(f"INSERT INTO {src.table(name)} VALUES ({marks})", insert_rows)
        conn.commit()
    finally:
        conn.close()


def _both(source, schema, after=None, limit=None, upto=None):
    native = source.select_chunk_table(schema, after, limit, upto)
    python = source.select_chunk_table(schema, after, limit, upto, native_reads=False)
    return native, python


@pytest.mark.both_sources   # (each source's own capture, reader or setup: the subject)
def test_a_native_chunk_read_holds_the_python_drivers_values_for_every_column_type_it_takes(src, caplog):
    _create(src, NATIVE[src.kind], _rows(src.kind), "native")
    source = src.source()
    schema = source.table_schema(src.table("native"))
    try:
        with caplog.at_level(logging.INFO, logger="dblog.source"):
            native, python = _both(source, schema)
            assert native.num_rows == len(KEYS) * 3
            assert native.equals(python, check_metadata=True), [
                (f.name, a.to_pylist(), b.to_pylist()) for f, a, b in zip(native.schema, native.columns,
                                                                          python.columns) if not a.equals(b)]
            # Hostile key values bound a chunk as they bound the Python driver's (interpolated by it).
            for after, upto in [((KEYS[0], 2), (KEYS[3], 1)), ((KEYS[2], 0), None), (None, (KEYS[1], 2))]:
                native, python = _both(source, schema, after, 4, upto)
                assert native.num_rows > 0 and native.equals(python, check_metadata=True)
        assert "read by the Python driver" not in caplog.text  # every chunk above was read natively
    finally:
        source.close()


def test_a_table_keyed_by_a_decimal_pages_in_the_key_s_own_order_not_its_text_s(src, caplog):
    # The native read selects a DECIMAL as its text: ordered by that text, 10 would follow 1.
    key = "BIGINT UNSIGNED" if src.kind == "mariadb" else "NUMERIC(20,0)"
    _create(src, f"CREATE TABLE {{ns}}.dec (k {key} PRIMARY KEY, d DECIMAL(12,2))",
            [(k, f"{k}.5") for k in range(1, 101)], "dec")
    source = src.source()
    schema = source.table_schema(src.table("dec"))
    seen, after = [], None
    try:
        with caplog.at_level(logging.INFO, logger="dblog.source"):
            while True:
                native, python = _both(source, schema, after, 15)
                assert native.equals(python, check_metadata=True)
                if not native.num_rows:
                    break
                seen += [int(k) for k in native.column("k").to_pylist()]
                after = last_key(schema, native)
        assert seen == list(range(1, 101)) and "read by the Python driver" not in caplog.text
    finally:
        source.close()


def test_a_table_with_a_column_the_native_reader_cannot_read_exactly_is_read_by_the_python_driver(src, caplog):
    create, _ = KINDS[src.kind]
    _create(src, create, kinds_rows(src.kind), "kinds")
    source = src.source()
    schema = source.table_schema(src.table("kinds"))
    try:
        with caplog.at_level(logging.INFO, logger="dblog.source"):
            native, python = _both(source, schema)
        assert native.equals(python, check_metadata=True) and native.num_rows == 3
        assert f"{src.table('kinds')} has a column the native reader does not read exactly" in caplog.text
    finally:
        source.close()


def _odd(src) -> str:
    """A table whose second row the native reader cannot give exactly: a zero DATETIME (legacy SQL
    modes) or an infinite timestamp. The Python drivers give NULL and datetime.max; the native ones
    would give a panic and a wrapped-around instant."""
    if src.kind == "mariadb":
        create = "CREATE TABLE {ns}.odd (id INT PRIMARY KEY, dt DATETIME, dd DATE)"
        rows, session = [(1, "2024-01-01 00:00:00", "2024-01-01"), (2, "0000-00-00 00:00:00", "0000-00-00")], \
            "SET SESSION sql_mode = ''"
    else:
        create = "CREATE TABLE {ns}.odd (id INT PRIMARY KEY, dt TIMESTAMP, dd DATE)"
        rows, session = [(1, "2024-01-01 00:00:00", "2024-01-01"), (2, "infinity", "-infinity")], None
    _create(src, create, rows, "odd", session)
    return src.table("odd")


def test_a_value_the_native_reader_cannot_give_exactly_sends_its_chunk_to_the_python_driver(src, caplog):
    table = _odd(src)
    source = src.source()
    schema = source.table_schema(table)
    try:
        with caplog.at_level(logging.INFO, logger="dblog.source"):
            first, first_python = _both(source, schema, None, 1)
            assert first.equals(first_python) and "read by the Python driver" not in caplog.text
            odd, odd_python = _both(source, schema, (1,), 1)
        assert odd.equals(odd_python, check_metadata=True) and odd.num_rows == 1
        assert f"a chunk of {table} is read by the Python driver, not the native reader" in caplog.text
        assert source.fallbacks == 1
    finally:
        source.close()


@pytest.mark.parametrize("reader", ["threads", "spark"])
def test_a_dump_counts_the_chunks_the_native_reader_gave_up_on_in_its_progress(src, reader):
    table = _odd(src)
    src.start_capture()
    dump = src.dblog("dump", "start", "odd", "--source", src.source_id, "--table", table, "--chunk-size", "1",
                     "--parallelism", "2", check=True, env={"DBLOG_DUMP_READER": reader})
    assert ("read on Spark executors" in dump.stderr) == (reader == "spark"), dump.stderr[-2000:]
    progress = json.loads(dump.stdout)["tables"][table]
    assert (progress["status"], progress["rows"], progress["fallback_chunks"]) == ("done", 2, 1), progress
    status = src.dblog("status", "--source", src.source_id, check=True).stdout
    assert "2 rows/2 chunks (1 read by the Python driver: the native reader gave up on them)" in status, status


def test_a_native_connection_the_server_ended_costs_one_chunk_read_by_the_python_driver(postgres, caplog):
    src = postgres
    _create(src, NATIVE[src.kind], _rows(src.kind), "native")
    source = src.source()
    schema = source.table_schema(src.table("native"))
    try:
        first, _ = _both(source, schema)
        pid = source._native.fetch("SELECT pg_backend_pid() AS pid").column("pid")[0].as_py()
        src.sql("SELECT pg_terminate_backend(%s)", params=[pid])
        with caplog.at_level(logging.INFO, logger="dblog.source"):
            again, python = _both(source, schema)
            assert again.equals(python) and again.equals(first)
            assert "is read by the Python driver, not the native reader" in caplog.text
            caplog.clear()
            source._told.clear()  # so a fallback would be logged again
            third, _ = _both(source, schema)
        assert third.equals(first) and "read by the Python driver" not in caplog.text  # natively, reconnected
    finally:
        source.close()
