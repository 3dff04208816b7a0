"""A table with every column kind a user has, and rows that test each (hostile strings, extremes,
NULLs): `tests/engine/test_type_fidelity.py`, `tests/spark/test_first_load.py`."""

KINDS = {
    "mariadb": ("CREATE TABLE {ns}.kinds (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(38,18), dt DATETIME(6), "
                "ts TIMESTAMP(6) NULL, tm TIME(6), b VARBINARY(20), bt BIT(10), e ENUM('a','b','x y'), "
                "s SET('r','q','p'), j JSON, txt TEXT, f DOUBLE, yr YEAR, dd DATE, ti TINYINT, nul INT NULL) "
                "DEFAULT CHARSET=utf8mb4",
                "INSERT INTO {ns}.kinds VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"),
    "postgres": ("CREATE TABLE {ns}.kinds (id BIGINT PRIMARY KEY, d NUMERIC(38,18), dt TIMESTAMP(6), "
                 "ts TIMESTAMPTZ, tm TIME(6), b BYTEA, bt BIT VARYING(10), e TEXT, s TEXT[], j JSONB, txt TEXT, "
                 "f DOUBLE PRECISION, yr SMALLINT, dd DATE, ti SMALLINT, nul INT, ch CHAR(5), ip INET, "
                 "iv INTERVAL, r TSTZRANGE, tz TIMETZ)",
                 "INSERT INTO {ns}.kinds VALUES (%s, %s, %s, %s, %s, %s, %s::bit varying, %s, %s, %s, %s, %s, %s, "
                 "%s, %s, %s, %s, %s, %s, %s, %s)"),
}
HOSTILE = "it's \"quoted\"; -- DROP TABLE x; \\ back\tslash\n é 中文 🦆 \x01"


def rows(kind: str) -> list[tuple]:
    big = 18446744073709551615 if kind == "mariadb" else 9223372036854775807
    bits = b"\x02\xaa" if kind == "mariadb" else "1010101010"
    sets = "p,r" if kind == "mariadb" else ["p", "r"]  # MariaDB: r,p in the definition's order
    zone = "" if kind == "mariadb" else "+00"  # the session of both is UTC
    one = (1, "12345678901234567890.123456789012345678", "2024-02-29 23:59:59.123456",
           f"2024-02-29 23:59:59.654321{zone}", "-12:34:56.000001" if kind == "mariadb" else "12:34:56.000001",
           b"\x00\xff\x10'", bits, "x y", sets, '{"a": [1, 2.5, null], "b": "\\u00e9", "c": {"d": true}}',
           HOSTILE, 1.5e-300, 2024, "0001-01-01", -128, None)
    two = (big, "-0.000000000000000001", "1970-01-01 00:00:00.000001", f"2038-01-19 03:14:07.999999{zone}",
           "00:00:00", b"", bits, "a", "" if kind == "mariadb" else [], "[]", "", -0.0, 1901, "9999-12-31", 127, 7)
    nulls = (2,) + (None,) * 15
    if kind == "postgres":  # padded chars, an address without its mask, an interval, a range, a zoned time
        one += ("ab", "192.168.1.5", "1 day 02:03:04.5", "[2024-01-01 00:00:00+00,2024-02-01 00:00:00+00)",
                "12:34:56.000001+02")
        two += ("", "::1", "-3 mons", "empty", "00:00:00+00")
        nulls += (None,) * 5
    return [one, two, nulls]
