"""dblog_dump through `dag.test()` against the real services."""
from __future__ import annotations

import re


def test_bad_input_fails_the_run_at_once_and_writes_nothing(mariadb, deploy):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.start_capture()
    states, run = deploy(mariadb).run("dblog_dump", {"source": mariadb.source_id, "tables": ["no_such_table"]})
    assert str(run.state) == "failed"
    start = f"{mariadb.source_id}.start"
    assert states[start] == "failed" and states["merge"] == "upstream_failed", states
    with mariadb.store() as store:
        assert store.children(f"/{mariadb.source_id}/dumps") == []
    assert not (mariadb.staging / mariadb.source_id / "chunks").exists(), "a chunk was staged"


def test_a_key_list_of_a_table_without_key_and_malformed_keys_fail_with_the_reason(mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.sql(f"CREATE TABLE {mariadb.table('nokey')} (a INT)")
    mariadb.start_capture()
    airflow = deploy(mariadb)
    for conf, reason in (({"tables": ["nokey"], "keys": [1]}, "primary key"),
                         ({"tables": ["accounts"], "keys": [["x", "y"]]}, "malformed key list")):
        states, run = airflow.run("dblog_dump", {"source": mariadb.source_id, **conf})
        assert states[f"{mariadb.source_id}.start"] == "failed", states
        failure = [line for line in capfd.readouterr().out.splitlines() if "AirflowFailException: dump not started: " in line]
        assert failure and reason in failure[0], failure  # the task log, as dag.test() prints it
    with mariadb.store() as store:
        assert store.children(f"/{mariadb.source_id}/dumps") == []


def start_failure(out: str) -> str:
    """The reason the start task logged at ERROR level (what the UI lists for a failed task)."""
    errors = [line for line in out.splitlines() if "[error" in line and "StartDumpOperator" in line]
    assert errors, out[-3000:]
    return errors[0]


def assert_nothing_written(src) -> None:
    with src.store() as store:
        assert store.children(f"/{src.source_id}/dumps") == [], "a dump was registered"
    assert not (src.staging / src.source_id / "chunks").exists(), "a chunk was staged"


def test_a_chunk_size_of_zero_fails_the_start_task_saying_what_to_set_and_writes_nothing(mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.start_capture()
    states, run = deploy(mariadb).run("dblog_dump", {"source": mariadb.source_id, "chunk_size": 0})
    assert str(run.state) == "failed" and states[f"{mariadb.source_id}.start"] == "failed", states
    assert "chunk_size = 0: a chunk reads 1 to 100,000 rows; set a whole number in that range" in \
        start_failure(capfd.readouterr().out)
    assert_nothing_written(mariadb)


def test_misspelled_conf_keys_fail_the_start_task_naming_the_right_keys_and_nothing_is_dumped(mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=50).create()
    mariadb.start_capture()
    states, run = deploy(mariadb).run("dblog_dump", {"source": mariadb.source_id, "table": ["accounts"],
                                                     "chunksize": 10})
    assert str(run.state) == "failed" and states[f"{mariadb.source_id}.start"] == "failed", states
    assert states["merge"] == "upstream_failed", states
    reason = start_failure(capfd.readouterr().out)
    assert "unknown param 'table' (did you mean 'tables'?)" in reason
    assert "unknown param 'chunksize' (did you mean 'chunk_size'?)" in reason
    assert_nothing_written(mariadb)


class SentMetrics:
    """Stands in for Airflow's stats client: keeps (name, value) of every metric sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    def incr(self, name, count=1, rate=1, tags=None):
        self.sent.append((name, count))

    def gauge(self, name, value, rate=1, delta=False, tags=None):
        self.sent.append((name, value))

    def timing(self, name, dt, tags=None):
        self.sent.append((name, dt.total_seconds()))

    def values(self, *parts: str) -> list[float]:
        from dblog_airflow import metrics
        return [v for n, v in self.sent if n == metrics.name(*parts)]


def xcom(run, task_id: str, key: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id,
                                                 key=key).one()
        return XComModel.deserialize_value(row)


def asset_event_extras(name: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    with create_session() as session:
        return [e for (e,) in session.query(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name == name).all()]


def test_a_dump_run_shows_its_dump_id_and_its_merge_reports_the_dumps_own_chunks_once(
        mariadb, deploy, capfd, monkeypatch):
    from dblog.coordination import store as paths
    from dblog_airflow import metrics
    mariadb.workload(seed=5, rows=60).create()
    mariadb.start_capture()
    mariadb.sql(f"UPDATE {mariadb.table('accounts')} SET name = 'fresh' WHERE id = 1")  # a log event to merge
    sent = SentMetrics()
    monkeypatch.setattr(metrics, "_stats", lambda: sent)
    sid, table = mariadb.source_id, mariadb.table("accounts")

    states, run = deploy(mariadb).run("dblog_dump", {"source": sid, "tables": ["accounts"], "chunk_size": 25})
    assert str(run.state) == "success", states
    out = capfd.readouterr().out

    dump = xcom(run, f"{sid}.start", "dump")
    dump_id = dump["dump_id"]
    assert dump["summary"].startswith(f"dump {dump_id} on {sid}: 1 table(s) {table}, chunk size 25"), dump
    with mariadb.store() as store:
        progress = store.get(paths.table_progress_path(sid, dump_id, table))
        merged = store.get(paths.dump_merged_path(sid, dump_id, table))
    assert progress["rows"] == 60 and progress["chunks"] == 3, progress
    assert merged == {"chunks": 3, "rows": 60, "dropped": 0}, merged  # no write inside a window

    summaries = [line for line in out.splitlines() if f"{table}: dump {dump_id} merged" in line]
    assert len(summaries) == 1, summaries
    assert "merged 3 of 3 chunks, 60 rows, 0 dropped in windows" in summaries[0]
    assert "MergeResult(" not in out and f"{sid} {table}: snapshot" not in out, "a second summary"
    spark_info = [line for line in out.splitlines() if re.search(r"\bINFO (SparkContext|DAGScheduler|Executor)\b", line)]
    assert not spark_info, spark_info[:5]

    assert sum(sent.values("dump.rows", sid, table)) == 60
    assert len(sent.values("dump.rows_per_second", sid, table)) == 3
    assert all(0 < v <= 100 for v in sent.values("dump.progress_percent", sid, table))  # when the source estimates
    assert sent.values("merge.duration_seconds", sid) and sent.values("merge.rows_dropped", sid, table) == [0]
    assert [v for v in sent.values("merge.freshness_seconds", sid, table) if v >= 0], sent.sent

    [extra] = asset_event_extras(f"dblog.{sid}.{table}")
    assert extra["rows"] == 60 and extra["upto"], extra
    assert extra["identifier"] == [sid, table], extra   # the Iceberg table, at the snapshot the merge committed
    from dblog.warehouse.tables import Warehouse
    assert extra["snapshot_id"] == Warehouse().state(sid, table).snapshot_id, extra
    assert (extra["dag_id"], extra["run_id"], extra["task_id"]) == ("dblog_dump", run.run_id, "merge"), extra


def test_a_null_or_out_of_range_key_fails_the_start_task_with_the_column_and_writes_nothing(mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=50).create()
    airflow = deploy(mariadb)
    for keys, reason in ((["null"], "null is not a key value: column id"),
                         (["99999999999999999999999"], "to 9223372036854775807")):  # the range it holds
        states, run = airflow.run("dblog_dump", {"source": mariadb.source_id, "tables": ["accounts"], "keys": keys})
        assert states[f"{mariadb.source_id}.start"] == "failed", states
        assert reason in start_failure(capfd.readouterr().out)
    assert_nothing_written(mariadb)
    with mariadb.store() as store:  # not even the checkpoint: bad input on a new source creates nothing
        assert store.get(f"/{mariadb.source_id}/capture/checkpoint") is None


def test_a_run_over_every_table_dumps_a_table_without_key_whole_leaves_out_excluded_ones_and_logs_each(
        mariadb, deploy, capfd):
    mariadb.workload(seed=3, rows=30).create()
    mariadb.sql(f"CREATE TABLE {mariadb.table('nokey')} (a INT)", f"INSERT INTO {mariadb.table('nokey')} VALUES (1), (1)")
    mariadb.start_capture()
    sid = mariadb.source_id
    states, run = deploy(mariadb).run("dblog_dump", {"source": sid, "exclude": ["order_lines"], "chunk_size": 50})
    assert str(run.state) == "success", states
    dump = xcom(run, f"{sid}.start", "dump")
    assert dump["tables"] == [mariadb.table("accounts"), mariadb.table("nokey")], dump
    assert [s["table"] for s in dump["skipped"]] == [mariadb.table("order_lines")], dump
    assert dump["summary"].endswith(f"; skipped {mariadb.table('order_lines')}")
    said = [line for line in capfd.readouterr().out.splitlines() if f"{mariadb.table('nokey')}: done after" in line]
    assert said and "1 chunks, 2 rows" in said[0], said   # read whole (the dump task's log line)
