"""The rules that keep bad input from writing anything: key values, finite numbers, which tables a
dump may take, where the staged log goes, which source a command means. No services."""
from __future__ import annotations

import pyarrow as pa
import pytest

from dblog.model.schema import WHOLE_TABLE, Column, TableSchema, decode_key
from dblog.model.staged_format import ChunkMeta, Op
from dblog.snapshot.dump import control_changes
from dblog.snapshot.dump_spec import DumpError, DumpSpec, check_chunk_size, check_delay, validate
from dblog.sources.base import NoPrimaryKey, SourceError, SourceUnavailable
from dblog.stagedlog.staged_log import StagedLog, StagingError


def one_key(source_type: str, arrow_type: pa.DataType) -> TableSchema:
    return TableSchema("app.t", (Column("id", source_type, arrow_type),), ("id",))


@pytest.mark.parametrize("source_type, arrow_type, value, message", [
    ("bigint", pa.int64(), 99999999999999999999999, "out of range for column id (bigint), which holds "
                                                    "-9223372036854775808 to 9223372036854775807"),
    ("bigint(20) unsigned", pa.decimal128(20, 0), -1, "-1 is out of range for column id (bigint(20) unsigned)"),
    ("bigint(20) unsigned", pa.decimal128(20, 0), 2 ** 64, "which holds 0 to 18446744073709551615"),
    ("int(11)", pa.int64(), 2 ** 31, "2147483648 is out of range for column id (int(11))"),
    ("integer", pa.int64(), -2 ** 31 - 1, "out of range for column id (integer)"),
    ("smallint", pa.int64(), 32768, "out of range"),
    ("tinyint(3) unsigned", pa.int64(), 256, "which holds 0 to 255"),
    ("decimal(5,2)", pa.decimal128(5, 2), 1000, "at most 3 digits before the decimal point"),
    ("decimal(5,2)", pa.decimal128(5, 2), "1.234", "more than 2 decimal places"),
    ("numeric", pa.decimal128(5, 2), "NaN", "NaN is not a key value for column id (numeric): give a finite number"),
    ("double precision", pa.float64(), float("inf"), "inf is not a key value for column id: give a finite number"),
    ("varchar(64)", pa.string(), float("nan"), "nan is not a key value"),  # never the text 'nan'
    ("varchar(64)", pa.string(), None, "null is not a key value: column id (varchar(64)) is part of the primary key"),
    ("bigint", pa.int64(), None, "never NULL"),
])
def test_a_key_value_its_column_cannot_hold_is_refused_naming_the_column_and_its_range(
        source_type, arrow_type, value, message):
    with pytest.raises(ValueError) as exc:
        decode_key([value], one_key(source_type, arrow_type))
    assert message in str(exc.value)


@pytest.mark.parametrize("source_type, arrow_type, value", [
    ("bigint", pa.int64(), 2 ** 63 - 1), ("bigint", pa.int64(), -2 ** 63),
    ("bigint(20) unsigned", pa.decimal128(20, 0), 2 ** 64 - 1), ("int", pa.int64(), -2 ** 31),
    ("oid", pa.int64(), 2 ** 32 - 1), ("decimal(5,2)", pa.decimal128(5, 2), "999.99"),
    ("decimal(5,2)", pa.decimal128(5, 2), "1.230"), ("varchar(64)", pa.string(), "NaN"),
])
def test_the_limits_of_each_key_type_are_accepted(source_type, arrow_type, value):
    assert len(decode_key([value], one_key(source_type, arrow_type))) == 1


@pytest.mark.parametrize("check, what", [(check_delay, "delay between chunks"), (check_chunk_size, "chunk size")])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_by_name_by_the_one_rule_for_each_number(check, what, value):
    with pytest.raises(DumpError, match=f"{what} must be a finite number, got {value!r}"):
        check(value)


@pytest.mark.parametrize("chunk_size, delay_s, message", [
    (None, float("nan"), "delay between chunks must be a finite number"),
    (None, -1, "delay between chunks must be 0 to 3600 seconds"),
    (0, None, "chunk size must be a whole number"),
    (float("inf"), None, "chunk size must be a finite number"),
])
def test_a_throttle_is_checked_where_it_is_built_before_any_state_is_reached(chunk_size, delay_s, message):
    """The CLI, the control DAG and the DBLog page all build a throttle with control_changes."""
    with pytest.raises(DumpError, match=message):
        control_changes("throttle", chunk_size, delay_s)
    assert control_changes("throttle", 500, 0.5) == {"chunk_size": 500, "delay_s": 0.5, "parallelism": None}


@pytest.mark.parametrize("value", [0, 17, 2.5, True, float("nan"), "4"])
def test_a_parallelism_outside_one_to_the_maximum_is_refused_by_name(value):
    with pytest.raises(DumpError, match="parallelism"):
        control_changes("throttle", parallelism=value)
    assert control_changes("throttle", parallelism=16)["parallelism"] == 16


class StubSource:
    """What `validate` asks of a source: its namespace, tables, schemas and a readability check."""
    name, kind, namespace = "s", "mysql", "app"

    def __init__(self, tables: dict):
        self._tables = tables  # name -> TableSchema, or the SourceError reading it raises

    def tables(self) -> list[str]:
        return list(self._tables)

    def table_schema(self, name: str) -> TableSchema:
        found = self._tables[name]
        if isinstance(found, Exception):
            raise found
        return found

    def keyless_schema(self, name: str) -> TableSchema:
        return TableSchema(name, (Column("a", "int", pa.int64()),), (), WHOLE_TABLE)

    def check_readable(self, schema: TableSchema) -> None:
        pass


def keyed(name: str) -> TableSchema:
    return TableSchema(name, (Column("id", "int", pa.int64()),), ("id",))


SOURCE = StubSource({"app.a": keyed("app.a"), "app.b": keyed("app.b"),
                     "app.no_pk": NoPrimaryKey("s: table app.no_pk has no primary key; watermark chunks need one."),
                     "app.secret": SourceError("s: cannot read app.secret (denied). Fix: GRANT SELECT ...")})


def test_a_dump_of_every_table_skips_the_ones_it_cannot_read_says_why_and_takes_one_without_key_whole():
    plan = validate(SOURCE, DumpSpec())
    assert [(s.name, s.key_from) for s in plan.schemas] == [
        ("app.a", "primary key"), ("app.b", "primary key"), ("app.no_pk", WHOLE_TABLE)]
    assert [(s.table, s.reason.split(" (")[0]) for s in plan.skipped] == [("app.secret", "s: cannot read app.secret")]
    with pytest.raises(NoPrimaryKey, match="app.no_pk has no primary key"):   # a key list needs a key
        validate(SOURCE, DumpSpec(tables=["no_pk"], keys=[1]))


def test_an_exclude_list_leaves_tables_out_and_a_name_matching_no_table_is_refused():
    plan = validate(SOURCE, DumpSpec(exclude=["b", "app.no_pk"]))
    assert [s.name for s in plan.schemas] == ["app.a"]
    assert ("app.b", "excluded") in [(s.table, s.reason) for s in plan.skipped]
    with pytest.raises(DumpError, match="the exclude list names app.c, which s does not have"):
        validate(SOURCE, DumpSpec(exclude=["c"]))
    # A table of another database addresses another source of a run over several: not a typo.
    assert validate(SOURCE, DumpSpec(exclude=["other.c"])).schemas
    with pytest.raises(DumpError, match="an exclude list goes with a dump of every table"):
        validate(SOURCE, DumpSpec(tables=["a"], exclude=["b"]))


def test_a_dump_with_no_table_it_can_dump_is_an_error_listing_each_reason():
    with pytest.raises(DumpError, match="no table of s can be dumped: app.a: excluded; app.b: excluded; app.no_pk: "
                                        "excluded; app.secret: s: cannot read"):
        validate(SOURCE, DumpSpec(exclude=["a", "b", "no_pk"]))


def test_an_unreachable_server_fails_a_dump_of_every_table_instead_of_skipping_them_all():
    down = StubSource({"app.a": SourceUnavailable("s: connection refused")})
    with pytest.raises(SourceUnavailable):
        validate(down, DumpSpec())


@pytest.mark.parametrize("table", ["other.t", "information_schema.tables", "mysql.user"])
def test_a_table_outside_the_captured_database_is_refused_naming_it(table):
    with pytest.raises(DumpError, match=f"{table} is outside database app, the one s captures"):
        validate(SOURCE, DumpSpec(tables=[table]))


def test_a_staged_log_it_cannot_write_raises_a_named_error_with_the_fix_and_leaves_no_temporary_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a directory must go: refused even to root
    staged = StagedLog(str(blocker / "staging"))
    with pytest.raises(StagingError, match="cannot write the staged log at .*: Not a directory. Fix: make"):
        staged.write_chunk("s", keyed("app.a"), ChunkMeta("d1", 0, "l", "h", key_to="[1]"), [(1,)], [Op.READ])
    assert list(tmp_path.rglob(".tmp-*")) == []


def test_a_command_without_source_takes_the_one_configured_and_otherwise_asks_which(monkeypatch):
    from dblog.cli.cli_options import source_id as _source_id
    from dblog.connections import ConfigError
    monkeypatch.setenv("DBLOG_SOURCES", "only_one")
    assert _source_id(None, "dump") == "only_one"
    assert _source_id("given", "dump") == "given"
    monkeypatch.setenv("DBLOG_SOURCES", "a_src, b_src")
    with pytest.raises(ConfigError, match=r"`dblog export` needs --source ID: the configured sources \(DBLOG_SOURCES\) "
                                          "are a_src, b_src"):
        _source_id(None, "export")


@pytest.mark.parametrize("option", ["--duration", "--flush-seconds"])
def test_a_capture_given_nan_or_infinite_seconds_is_refused_before_it_starts(option, capsys):
    from dblog.cli import parser
    for value in ("nan", "inf"):
        with pytest.raises(SystemExit) as exc:
            parser().parse_args(["capture", f"{option}={value}"])
        assert exc.value.code == 2
        assert f"argument {option}: a number of seconds must be a finite number" in capsys.readouterr().err
    assert parser().parse_args(["capture", f"{option}=2.5"])
