"""The capture's own reader of MariaDB rows events (`dblog.sources.binlog_rows`) gives exactly the
values mysql-replication gives for the same events, type by type and edge by edge, and leaves to
the library every event it does not read itself."""
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from dblog.sources.base import SourceError, UnreadableEvent
from dblog.sources.binlog_rows import fast_rows

COLUMNS = (
    "id BIGINT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, "
    "mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bu BIGINT UNSIGNED, "
    "f FLOAT, d DOUBLE, d0 DECIMAL(10,0), d2 DECIMAL(12,2), d5 DECIMAL(5,5), dw DECIMAL(65,30), d19 DECIMAL(19,9), "
    "v VARCHAR(10), vl VARCHAR(300), c CHAR(4), l1 VARCHAR(8) CHARACTER SET latin1, vb VARBINARY(8), "
    "bn BINARY(3), tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lb LONGBLOB, "
    "dd DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts1 TIMESTAMP(1) NULL, "
    "ts6 TIMESTAMP(6) NULL, yr YEAR")

EDGES = [
    (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, 18446744073709551615,
     1.1, -0.0, -9999999999, "-1234567890.12", "0.00001", "-" + "9" * 35 + "." + "9" * 30, "-0.000000001",
     "", "x" * 300, "ab", "é€?", b"\x00\xff", b"a\x00b", "", "é 中文 🦆", "m" * 70000, b"\x00" * 70000,
     "0000-00-00", "0000-00-00 00:00:00", "1000-01-01 00:00:00.001", "9999-12-31 23:59:59.999999",
     "1970-01-01 00:00:01", "2038-01-19 03:14:07.9", "2024-02-29 12:00:00.000001", 1901),
    (2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 0,
     -3.4e38, 1.5e-300, 0, "0.00", "-0.99999", "1." + "0" * 29 + "1", "123456789.123456789",
     "éééééééééé", "", "abcd", "ÿ", b"", b"\xff\xff\xff", "t", "", "", b"",
     "2024-02-29", "2024-02-29 23:59:59", "2024-02-29 23:59:59.100", "0001-01-01 00:00:00.000000",
     "0000-00-00 00:00:00", "1970-01-01 00:00:01.5", "2001-09-09 01:46:40.123456", 2155),
    (3,) + (None,) * 34,
]


def _strict(rows: list[dict]) -> list:
    """Rows with each value as its type and repr: 1 == 1.0 == True and Decimal('1.0') == Decimal('1.00')."""
    return [{image: {k: (type(v).__name__, repr(v)) for k, v in values.items()}
             for image, values in row.items() if image.endswith("values")} for row in rows]


def _events(src, start: dict, ns: str):
    reader = BinLogStreamReader(connection_settings=src.settings, server_id=src.server_id, resume_stream=True,
                                log_file=start["log_file"], log_pos=start["log_pos"], blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                only_schemas=[ns], is_mariadb=False)
    try:
        for ev in reader:
            fast = fast_rows(ev)   # before the library's read: it must not consume the event
            yield ev.table, fast, ev.rows
    finally:
        reader.close()


def test_rows_events_read_by_the_capture_give_exactly_the_libraries_values_and_the_rest_is_left_to_it(mariadb):
    ns = mariadb.namespace
    source = mariadb.source()
    start = source.head()
    marks = ", ".join(["%s"] * len(EDGES[0]))
    conn = mariadb.admin()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")   # zero dates, as old applications write
        cur.execute(f"CREATE TABLE {ns}.typed ({COLUMNS}) DEFAULT CHARSET=utf8mb4")
        cur.execute(f"CREATE TABLE {ns}.timed (id INT PRIMARY KEY, tm TIME(6), e ENUM('a', 'b'))")
        cur.executemany(f"INSERT INTO {ns}.typed VALUES ({marks})", EDGES)
        cur.execute(f"UPDATE {ns}.typed SET d2 = -d2, v = CONCAT(v, 'z'), dd = NULL, yr = 2000")
        cur.execute(f"DELETE FROM {ns}.typed WHERE id = 2")
        cur.execute(f"INSERT INTO {ns}.timed VALUES (1, '-01:02:03.5', 'b')")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute(f"UPDATE {ns}.typed SET i = 5 WHERE id = 1")
        conn.commit()
    finally:
        conn.close()
        source.close()
    read = list(_events(source, start, ns))
    typed = [(fast, rows) for table, fast, rows in read if table == "typed"]
    assert sum(len(rows) for _, rows in typed[:-1]) == 3 + 3 + 1 and len(typed[-1][1]) == 1
    for fast, rows in typed[:-1]:   # big values split a statement's rows over several events
        assert fast is not None, "a full image of plain types was left to the library"
        got, want = _strict(fast), _strict(rows)
        differs = [(column, value, want[i][image][column]) for i, row in enumerate(got)
                   for image, values in row.items() for column, value in values.items()
                   if value != want[i][image][column]]
        assert not differs and got == want, f"(column, ours, the library's): {differs}"
    assert typed[-1][0] is None, "a MINIMAL image was read by the fast reader"
    assert [fast for table, fast, _ in read if table == "timed"] == [None]


def test_a_compressed_binlog_is_refused_at_set_up_and_a_compressed_event_stops_the_capture_before_its_changes(mariadb):
    """mysql-replication skips event kinds it does not know, compressed rows among them: the
    capture must stop there rather than lose the changes without a word."""
    ns = mariadb.namespace
    source = mariadb.source()
    mariadb.sql(f"CREATE TABLE {ns}.t (id INT PRIMARY KEY, v TEXT)")
    start = {k: v for k, v in source.head().items() if k != "position"}
    try:
        mariadb.sql("SET GLOBAL log_bin_compress = ON")
        with pytest.raises(SourceError, match="log_bin_compress is ON.*SET GLOBAL log_bin_compress=OFF"):
            source.preflight()
        mariadb.sql(f"INSERT INTO {ns}.t VALUES (1, REPEAT('x', 2000))")   # past log_bin_compress_min_len
    finally:
        mariadb.sql("SET GLOBAL log_bin_compress = OFF")
    idle = 0
    with pytest.raises(UnreadableEvent, match="compressed MariaDB rows.*capture stopped before skipping"):
        for txn in source.stream(start, idle_timeout=0.2):
            idle += txn is None
            assert idle < 10, "the log went idle past the compressed insert without a word"
            assert txn is None or not txn.events, "an event of the compressed transaction was staged"
    source.close()
