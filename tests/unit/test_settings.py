"""The settings: one default per tunable, overridden by its variable, checked against its range,
and the one source of the CLI's defaults, the DAGs' params and the table of docs/configuration.md."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from dblog import cli
from dblog.settings import DUMP_ID, ConfigError, Settings, markdown_table, settings, specs

ROOT = Path(__file__).resolve().parents[2]
NAMES = [name for name, _, _ in specs()]


def accepted_sample(name: str, spec, default, tuned: Settings):
    """A value the setting accepts other than its default, as its variable would spell it."""
    if spec.choices:
        return next(c for c in spec.choices if c != default)
    if spec.string_map:
        return '{"warehouse": "s3://tables/"}'
    if spec.pattern:
        return "512m" if name == "spark.driver_memory" else "analytics"
    if isinstance(default, str):
        return "local[2]" if name == "spark.master" else "0 3 * * *"
    low, high = tuned.bounds(name)
    if any(other.maximum == name for _, other, _ in specs()):  # lower, it would refuse their defaults
        return high
    return low if low != default else low + 1


def test_the_defaults_are_what_an_empty_environment_gives():
    assert Settings.from_env({}) == Settings()
    tuned = Settings()
    assert (tuned.dump.chunk_size, tuned.dump.max_chunk_size, tuned.dump.max_delay_seconds) == (20_000, 100_000, 3600)
    assert tuned.spark.driver_memory == "4g" and tuned.verify.page_rows == 5000
    assert tuned.full_refresh.chunk_size == tuned.dump.chunk_size


@pytest.mark.parametrize("name", NAMES)
def test_each_setting_is_overridden_by_its_own_variable(name):
    spec, default = next((s, d) for n, s, d in specs() if n == name)
    value = accepted_sample(name, spec, default, Settings())
    tuned = settings({spec.env: str(value)})
    assert tuned.get(name) == value
    others = [n for n in NAMES if n not in (name, spec.same_as) and n != "full_refresh.chunk_size"]
    assert all(tuned.get(n) == Settings().get(n) for n in others), "one variable moved another setting"


def test_every_setting_has_its_own_variable_a_meaning_and_says_what_it_accepts():
    variables = [spec.env for _, spec, _ in specs()]
    assert len(set(variables)) == len(variables)
    for name, spec, _ in specs():
        assert spec.env.startswith("DBLOG_") and len(spec.help) > 20, name
        assert spec.choices or spec.accepts or spec.minimum is not None, f"{name} accepts anything"


def test_a_setting_without_its_own_variable_follows_the_one_it_is_the_same_as():
    assert settings({"DBLOG_CHUNK_SIZE": "500"}).full_refresh.chunk_size == 500
    tuned = settings({"DBLOG_CHUNK_SIZE": "500", "DBLOG_FULL_REFRESH_CHUNK_SIZE": "700"})
    assert (tuned.dump.chunk_size, tuned.full_refresh.chunk_size) == (500, 700)


def test_an_empty_number_variable_means_the_default_and_an_empty_schedule_means_none():
    tuned = settings({"DBLOG_CHUNK_SIZE": " ", "DBLOG_VERIFY_SCHEDULE": ""})
    assert tuned.dump.chunk_size == 20_000 and tuned.verify.schedule == ""


@pytest.mark.parametrize("env, said", [
    ({"DBLOG_CHUNK_SIZE": "0"},
     "DBLOG_CHUNK_SIZE='0' is not accepted: set a whole number from 1 to 100,000 (DBLOG_MAX_CHUNK_SIZE bounds it)"),
    ({"DBLOG_CHUNK_SIZE": "20k"}, "DBLOG_CHUNK_SIZE='20k' is not accepted: set a whole number (it sets: rows per"),
    ({"DBLOG_CAPTURE_SLICE_SECONDS": "86401"},
     "DBLOG_CAPTURE_SLICE_SECONDS='86401' is not accepted: set a whole number from 5 to 86,400 (it sets:"),
    ({"DBLOG_CAPTURE_FLUSH_SECONDS": "nan"}, "DBLOG_CAPTURE_FLUSH_SECONDS='nan' is not accepted: set a finite number"),
    ({"DBLOG_ZK_SESSION_TIMEOUT": "0.5"},
     "DBLOG_ZK_SESSION_TIMEOUT='0.5' is not accepted: set a number from 1 to 600"),
    ({"DBLOG_SPARK_DRIVER_MEMORY": "lots"},
     "DBLOG_SPARK_DRIVER_MEMORY='lots' is not accepted: set a value matching [0-9]+[kmgtp]?, such as 4g"),
    ({"DBLOG_SPARK_LOG_LEVEL": "LOUD"}, "DBLOG_SPARK_LOG_LEVEL='LOUD' is not accepted: set one of ALL, TRACE"),
    ({"DBLOG_ICEBERG_CATALOG_PROPERTIES": '{"rest.sigv4-enabled": true}'},
     "DBLOG_ICEBERG_CATALOG_PROPERTIES is not accepted: set a JSON object of strings"),
    ({"DBLOG_ICEBERG_CATALOG_PROPERTIES": '{"token": "s3cr3t"'},   # (a token in it is never echoed)
     "DBLOG_ICEBERG_CATALOG_PROPERTIES is not accepted: set a JSON object of strings"),
    ({"DBLOG_FULL_REFRESH_DELAY": "5000"},
     "DBLOG_FULL_REFRESH_DELAY='5000' is not accepted: set a number from 0 to 3,600 (DBLOG_MAX_DELAY_SECONDS bounds it)"),
])
def test_a_bad_value_names_the_variable_the_value_and_what_it_accepts(env, said):
    with pytest.raises(ConfigError) as exc:
        settings(env)
    assert str(exc.value).startswith(said), str(exc.value)
    assert "s3cr3t" not in str(exc.value)


def test_lowering_a_maximum_below_a_default_names_the_default_that_no_longer_fits():
    with pytest.raises(ConfigError, match=re.escape(
            "DBLOG_CHUNK_SIZE unset, so 20000, is not accepted: set a whole number from 1 to 1,000 "
            "(DBLOG_MAX_CHUNK_SIZE bounds it)")):
        settings({"DBLOG_MAX_CHUNK_SIZE": "1000"})
    assert settings({"DBLOG_MAX_CHUNK_SIZE": "1000", "DBLOG_CHUNK_SIZE": "1000"}).full_refresh.chunk_size == 1000


def test_the_configuration_page_s_table_of_tunables_is_the_generated_one():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert f"-->\n{markdown_table()}\n<!-- end of settings table -->" in page, \
        "regenerate it: .venv/bin/python -m dblog.settings"


def test_the_cli_takes_its_defaults_and_bounds_from_the_settings(monkeypatch):
    tuned = settings()
    parse = cli.parser().parse_args
    capture = parse(["capture"])
    assert (capture.flush_rows, capture.flush_seconds) == (tuned.capture.flush_rows, tuned.capture.flush_seconds)
    assert parse(["merge"]).bucket_rows == tuned.merge.bucket_rows
    assert parse(["verify"]).page == tuned.verify.page_rows
    assert parse(["sync"]).timeout == tuned.capture.sync_timeout_seconds
    monkeypatch.setenv("DBLOG_VERIFY_PAGE_ROWS", "77")
    assert cli.parser().parse_args(["verify"]).page == 77


def test_a_cli_option_out_of_its_settings_range_is_refused_before_anything_runs(capsys):
    assert cli.main(["verify", "--page", "0"]) == 2
    assert "dblog: error: --page must be from 1 to 1,000,000, got 0" in capsys.readouterr().err
    assert cli.main(["capture", "--flush-rows", "0"]) == 2
    assert "--flush-rows must be from 1 to 10,000,000, got 0" in capsys.readouterr().err


def test_a_bad_setting_fails_the_cli_with_the_reason_not_a_traceback(monkeypatch, capsys):
    monkeypatch.setenv("DBLOG_CAPTURE_FLUSH_ROWS", "many")
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err.startswith("dblog: error: DBLOG_CAPTURE_FLUSH_ROWS='many' is not accepted")


def test_engine_defaults_follow_the_settings(monkeypatch):
    from dblog.coordination.store import StateStore
    from dblog.snapshot.dump_spec import DumpError, DumpSpec, check_chunk_size
    monkeypatch.setenv("DBLOG_CHUNK_SIZE", "321")
    monkeypatch.setenv("DBLOG_MAX_CHUNK_SIZE", "1000")
    monkeypatch.setenv("DBLOG_WAREHOUSE_KEEP_SECONDS", "60")
    monkeypatch.setenv("DBLOG_ZK_OUTAGE_SECONDS", "7")
    assert DumpSpec().chunk_size == 321
    with pytest.raises(DumpError, match="from 1 to 1,000, got 1001"):
        check_chunk_size(1001)
    assert settings().warehouse.keep_seconds == 60
    assert StateStore("127.0.0.1:1").outage == 7


# -- the DAGs: params default to the settings and their start tasks enforce the settings' ranges --
@pytest.fixture
def parse_dags(airflow_home):
    def parse() -> dict:
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(str(ROOT / "dags"))
        assert not bag.import_errors, bag.import_errors
        return bag.dags
    return parse


def test_dag_params_default_to_the_settings(parse_dags):
    dags, tuned = parse_dags(), settings()
    assert dags["dblog_dump"].params["chunk_size"] == tuned.dump.chunk_size
    assert dags["dblog_full_refresh"].params["chunk_size"] == tuned.full_refresh.chunk_size
    assert dags["dblog_full_refresh"].params["delay_seconds"] == tuned.full_refresh.delay_seconds
    assert dags["dblog_verify"].params["chunk_size"] == tuned.verify.chunk_size
    assert dags["dblog_capture"].params["slice_seconds"] == tuned.capture.slice_seconds
    assert dags["dblog_dump"].params.get_param("keys").schema["maxItems"] == tuned.dump.max_keys
    assert dags["dblog_dump"].params.get_param("dump_id").schema["pattern"] == DUMP_ID.pattern
    assert dags["dblog_merge_continuous"].params["every_seconds"] == tuned.merge.continuous_every_seconds
    assert dags["dblog_merge_continuous"].params["merge_slice_seconds"] == tuned.merge.continuous_slice_seconds
    assert tuned.merge.mode == "continuous"   # by default the continuous merge runs, the batch one when triggered
    assert dags["dblog_merge_continuous"].schedule == "@continuous" and dags["dblog_merge"].schedule is None
    assert dags["dblog_verify"].schedule == tuned.verify.schedule
    assert dags["dblog_full_refresh"].schedule == tuned.full_refresh.schedule


def test_the_scheduled_merge_mode_schedules_dblog_merge_and_leaves_the_continuous_one_to_triggers(
        parse_dags, monkeypatch):
    monkeypatch.setenv("DBLOG_MERGE_MODE", "scheduled")
    monkeypatch.setenv("DBLOG_MERGE_EVERY_MINUTES", "7")
    dags = parse_dags()
    assert dags["dblog_merge"].schedule == timedelta(minutes=7)
    assert dags["dblog_merge_continuous"].schedule is None


def test_overridden_settings_move_the_dag_params_and_the_ranges_their_start_tasks_enforce(parse_dags, monkeypatch):
    from dblog_airflow.params import conf_problems
    for env, value in {"DBLOG_MAX_CHUNK_SIZE": "5000", "DBLOG_CHUNK_SIZE": "4000", "DBLOG_MAX_DELAY_SECONDS": "9",
                       "DBLOG_CAPTURE_SLICE_SECONDS": "60", "DBLOG_VERIFY_CHUNK_SIZE": "50"}.items():
        monkeypatch.setenv(env, value)
    dags = parse_dags()
    dump = dags["dblog_dump"].params
    assert dump["chunk_size"] == 4000 and dags["dblog_full_refresh"].params["chunk_size"] == 4000
    assert dags["dblog_verify"].params["chunk_size"] == 50 and dags["dblog_capture"].params["slice_seconds"] == 60
    assert "1 to 5,000" in dump.get_param("chunk_size").description
    assert "0 to 9 seconds" in dump.get_param("delay_seconds").description
    declared = list(dump)
    assert conf_problems(declared, {}, {"chunk_size": 5000, "delay_seconds": 9}) == []
    assert conf_problems(declared, {}, {"chunk_size": 5001, "delay_seconds": 9.5}) == [
        "chunk_size = 5001: a chunk reads 1 to 5,000 rows; set a whole number in that range (default 4000)",
        "delay_seconds = 9.5: set 0 (no pause) to 9 seconds between chunks"]


@pytest.mark.parametrize("dag_id, param, setting", [
    ("dblog_dump", "chunk_size", "dump.chunk_size"),
    ("dblog_dump_control", "chunk_size", "dump.chunk_size"),
    ("dblog_full_refresh", "chunk_size", "full_refresh.chunk_size"),
    ("dblog_verify", "chunk_size", "verify.chunk_size"),
    ("dblog_capture", "slice_seconds", "capture.slice_seconds"),
])
def test_a_dag_param_states_its_settings_range_and_its_start_task_holds_it_to_it(parse_dags, dag_id, param, setting):
    from dblog_airflow.params import conf_problems
    params, tuned = parse_dags()[dag_id].params, settings()
    low, high = tuned.bounds(setting)
    assert tuned.range_text(setting) in params.get_param(param).description
    assert conf_problems(list(params), {}, {param: low}) == conf_problems(list(params), {}, {param: high}) == []
    assert len(conf_problems(list(params), {}, {param: low - 1})) == len(conf_problems(list(params), {}, {param: high + 1})) == 1
