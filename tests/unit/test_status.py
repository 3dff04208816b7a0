"""The DBLog page's figures (dblog.operations.status, dblog.snapshot.dump): progress, current rate, ETA, data age,
and the snapshot over an in-memory state store. No services."""
from __future__ import annotations

import re
from dataclasses import asdict

import pytest

from dblog.cli.cmd_status import merge_line
from dblog.coordination import store as paths
from dblog.coordination.checkpoint import checkpoint_path
from dblog.coordination.merge_beat import beat_path
from dblog.operations.status import data_age, dump_view, eta_seconds, lag_at, page_snapshot, progress_fraction
from dblog.snapshot.dump import (
    CANCELLED,
    DONE,
    FAILED,
    PAUSED,
    PENDING,
    RUNNING,
    UNREADABLE,
    TableProgress,
    dump_status,
    dumping,
    read_progress,
    record_chunk_rate,
)
from dblog.snapshot.dump_spec import DumpError
from dblog.sources.postgres import estimate_from_stats

from staged_fakes import MemoryStore


# -- current rate ------------------------------------------------------------------------------
def test_the_rate_is_rows_over_the_working_time_of_the_last_chunks():
    p = TableProgress("s.t")
    record_chunk_rate(p, 100, 0.5)
    record_chunk_rate(p, 100, 1.5)
    assert p.recent_rows_per_s == 100.0  # 200 rows in 2 working seconds


def test_the_rate_forgets_chunks_older_than_its_window():
    p = TableProgress("s.t")
    for _ in range(5):
        record_chunk_rate(p, 100, 10.0, window=3)  # slow chunks...
    for _ in range(3):
        record_chunk_rate(p, 100, 0.1, window=3)  # ...then a throttle change makes them fast
    assert p.recent_rows_per_s == 1000.0 and len(p.recent_chunks) == 3


def test_a_pause_or_a_delay_between_chunks_does_not_dilute_the_rate():
    # Only each chunk's working time is recorded; an hour paused in between changes nothing.
    p = TableProgress("s.t")
    record_chunk_rate(p, 50, 0.05)
    record_chunk_rate(p, 50, 0.05)
    assert p.recent_rows_per_s == 1000.0


def test_progress_records_written_before_the_new_fields_still_load():
    old = {k: v for k, v in asdict(TableProgress("s.t")).items()
           if k not in ("estimated_rows", "recent_rows_per_s", "recent_chunks")}
    p = TableProgress.load(old, "/s/dumps/d1/tables/s.t")
    assert p.estimated_rows is None and p.recent_rows_per_s is None and p.recent_chunks == []


def test_a_progress_record_of_an_earlier_version_is_read_by_its_dump_s_kind():
    # `last_key` held a key (range dump) or a key-list offset (key-list dump); the scope says which.
    def old(last_key):
        return {**{k: v for k, v in asdict(TableProgress("s.t", status=DONE, chunks=3)).items()
                   if k not in ("after_key", "list_offset")}, "last_key": last_key}
    ranged = MemoryStore(dump_nodes("s", "d1", {"s.t": old("[42]")}))
    assert read_progress(ranged, "s", "d1", "s.t").after_key == "[42]"
    listed = MemoryStore(dump_nodes("s", "d1", {"s.t": old("3")}))
    listed.nodes[paths.dump_path("s", "d1")]["keys"] = [[1], [2], [3]]
    progress = read_progress(listed, "s", "d1", "s.t")
    assert progress.list_offset == 3 and progress.after_key is None
    assert dumping(ranged, "s", "s.t") == [] and dump_status(ranged, "s", "d1")["state"] == DONE


def test_a_progress_record_this_version_cannot_read_is_refused_naming_the_node_and_the_fix():
    unknown = {**asdict(TableProgress("s.t", status=RUNNING, chunks=3)), "cursor_v3": "?"}
    store = MemoryStore(dump_nodes("s", "d1", {"s.t": unknown}))
    refusal = (r"cannot read the dump progress at /s/dumps/d1/tables/s.t \(unknown field\(s\) cursor_v3\)"
               r".*`dblog dump cancel d1 --source s`")
    with pytest.raises(DumpError, match=refusal):
        read_progress(store, "s", "d1", "s.t")
    with pytest.raises(DumpError, match=refusal):  # the merge must not guess whether it still stages
        dumping(store, "s", "s.t")
    status = dump_status(store, "s", "d1")  # status and the DBLog page show it instead of failing
    assert status["state"] == UNREADABLE and re.search(refusal, status["error"])


def test_a_cancelled_dump_with_an_unreadable_record_no_longer_holds_the_merge_back():
    old = {**asdict(TableProgress("s.t", status=RUNNING, chunks=3)), "cursor_v3": "?"}
    store = MemoryStore(dump_nodes("s", "d1", {"s.t": old}))
    store.nodes[paths.control_path("s", "d1")] = {"state": CANCELLED}
    assert dumping(store, "s", "s.t") == []


# -- progress and ETA ----------------------------------------------------------------------------
def test_progress_is_rows_of_the_estimate_and_never_full_before_the_table_is_done():
    assert progress_fraction(250, 1000, RUNNING) == 0.25
    assert progress_fraction(1200, 1000, RUNNING) == 0.99  # the estimate is a statistic: it can be passed
    assert progress_fraction(1200, 1000, DONE) == 1.0
    assert progress_fraction(10, None, RUNNING) is None
    assert progress_fraction(0, 0, PENDING) is None


def test_eta_is_remaining_rows_at_the_current_rate_plus_the_known_delays():
    assert eta_seconds(rows=400, estimated=1000, rate=100.0, chunk_size=100, delay_s=0.0) == 6.0
    assert eta_seconds(rows=400, estimated=1000, rate=100.0, chunk_size=100, delay_s=0.5) == 9.0  # 6 chunks
    assert eta_seconds(rows=1100, estimated=1000, rate=100.0, chunk_size=100, delay_s=0.5) == 0.0


def test_eta_is_unknown_without_an_estimate_or_a_rate():
    assert eta_seconds(10, None, 100.0, 10, 0) is None
    assert eta_seconds(10, 100, None, 10, 0) is None


def test_postgres_estimate_falls_back_to_the_live_tuple_count_before_any_analyze():
    assert estimate_from_stats(5000.0, 4800) == 5000
    assert estimate_from_stats(-1.0, 4800) == 4800   # never analyzed (PostgreSQL 14+)
    assert estimate_from_stats(0.0, 4800) == 4800    # never analyzed (older servers)
    assert estimate_from_stats(0.0, 0) == 0          # both say empty
    assert estimate_from_stats(-1.0, 0) is None      # nobody knows yet
    assert estimate_from_stats(-1.0, None) is None


# -- warehouse data age ------------------------------------------------------------------------
def test_data_age_adds_the_capture_lag_at_the_merge_to_the_time_since_it():
    history = [[1000.0, 2.0], [1030.0, 8.0], [1060.0, 3.0]]
    assert lag_at(history, 1033.0) == 8.0
    assert data_age(1033.0, history, now=1100.0) == (75.0, True)


def test_data_age_without_a_lag_sample_near_the_merge_is_a_lower_bound():
    assert lag_at([[0.0, 2.0]], 5000.0) is None
    assert data_age(5000.0, [[0.0, 2.0]], now=5100.0) == (100.0, False)
    assert data_age(None, [], now=1.0) == (None, False)


# -- dumps -----------------------------------------------------------------------------------------
def dump_nodes(source, dump_id, tables: dict, control=None, created_at=1.0, merged=None) -> dict:
    nodes = {paths.dump_path(source, dump_id): {"id": dump_id, "tables": list(tables), "keys": None,
                                                "created_at": created_at},
             paths.control_path(source, dump_id): control or {"state": RUNNING, "chunk_size": 100, "delay_s": 0.5}}
    for t, p in tables.items():
        nodes[paths.table_progress_path(source, dump_id, t)] = p
    for t, m in (merged or {}).items():
        nodes[paths.dump_merged_path(source, dump_id, t)] = m
    return nodes


def progress(table, status, rows, estimated, rate=None) -> dict:
    return {**asdict(TableProgress(table, status=status, rows=rows, chunks=rows // 100, estimated_rows=estimated)),
            "recent_rows_per_s": rate}


def lock(source, dump_id, table):
    return f"{paths.table_progress_path(source, dump_id, table)}/lock"


def test_a_running_dump_totals_its_tables_and_takes_the_slowest_eta():
    nodes = dump_nodes("src", "d1", {"s.a": progress("s.a", RUNNING, 500, 1000, rate=100.0),
                                     "s.b": progress("s.b", RUNNING, 100, 1000, rate=300.0)})
    store = MemoryStore(nodes, {lock("src", "d1", "s.a"): ["w1"], lock("src", "d1", "s.b"): ["w2"]})
    d = dump_view(dump_status(store, "src", "d1"))
    assert (d["state"], d["rows"], d["estimated_rows"], d["fraction"]) == (RUNNING, 600, 2000, 0.3)
    assert d["rows_per_s"] == 400.0
    assert d["eta_s"] == 5.0 + 2.5 and [t["eta_s"] for t in d["tables"]] == [7.5, 3.0 + 4.5]
    assert d["dropped"] is None  # not merged yet: the page shows "-"


def test_a_paused_dump_has_no_current_rate_nor_eta():
    nodes = dump_nodes("src", "d1", {"s.a": progress("s.a", RUNNING, 500, 1000, rate=100.0)},
                       control={"state": PAUSED, "chunk_size": 100, "delay_s": 0})
    d = dump_view(dump_status(MemoryStore(nodes, {lock("src", "d1", "s.a"): ["w1"]}), "src", "d1"))
    assert (d["state"], d["rows_per_s"], d["eta_s"]) == (PAUSED, None, None)


def test_a_running_table_whose_worker_is_gone_makes_the_dump_failed():
    nodes = dump_nodes("src", "d1", {"s.a": progress("s.a", RUNNING, 500, 1000, rate=100.0),
                                     "s.b": progress("s.b", PENDING, 0, 10)})
    status = dump_status(MemoryStore(nodes), "src", "d1")
    assert status["state"] == FAILED and status["failed"] == ["s.a"]  # a pending table has no worker yet


def test_a_finished_dump_shows_the_rows_its_merge_dropped():
    nodes = dump_nodes("src", "d1", {"s.a": progress("s.a", DONE, 1000, 990), "s.b": progress("s.b", DONE, 5, 5)},
                       merged={"s.a": {"chunks": 10, "rows": 996, "dropped": 4}})
    d = dump_view(dump_status(MemoryStore(nodes), "src", "d1"))
    assert (d["state"], d["fraction"], d["eta_s"], d["dropped"]) == (DONE, 1.0, 0.0, 4)
    assert [t["dropped"] for t in d["tables"]] == [4, None]


def test_each_table_shows_the_chunks_the_native_reader_gave_up_on_and_older_records_show_none():
    slow = {**progress("s.a", DONE, 1000, 1000), "fallback_chunks": 3}
    older = {k: v for k, v in progress("s.b", DONE, 5, 5).items() if k != "fallback_chunks"}
    d = dump_view(dump_status(MemoryStore(dump_nodes("src", "d1", {"s.a": slow, "s.b": older})), "src", "d1"))
    assert [t["fallback_chunks"] for t in d["tables"]] == [3, 0]


class FakeSource:
    name, kind = "src", "mysql"


class FakeWarehouse:
    def tables(self, source):
        return ["s.a"]

    def table_summary(self, source, table):
        return {"table": table, "snapshot_id": "3", "merged_at": 1000.0, "rows": 42, "tombstones": 0, "buckets": 1,
                "log_upto": "x"}


def test_the_snapshot_lists_capture_health_the_continuous_merge_newest_dumps_first_and_warehouse_tables():
    nodes = {**dump_nodes("src", "old", {"s.a": progress("s.a", DONE, 10, 10)}, created_at=1.0),
             **dump_nodes("src", "new", {"s.a": progress("s.a", PENDING, 0, 10)}, created_at=2.0),
             checkpoint_path("src"): {"position": "p", "resume": {"log_file": "mysql-bin.000003", "log_pos": 77},
                                            "commit_ts": 990.0, "staged_at": 995.0},
             paths.heartbeat_path("src"): {"leader": "w1", "at": 1005.0, "caught_up_at": 1005.0},
             paths.lag_history_path("src"): [[1001.0, 1.5]],
             beat_path("src"): {"at": 1007.0, "tables": None, "failing": {"s.b": "disk full"}}}
    store = MemoryStore(nodes, {paths.capture_lock("src"): ["w1", "w2"]})
    snap = page_snapshot(store, [FakeSource()], FakeWarehouse(), now=1010.0)
    (s,) = snap["sources"]
    assert s["merge"] == {"at": 1007.0, "tables": None, "failing": {"s.b": "disk full"}, "live": True}
    assert merge_line(s["merge"], 1010.0) == "continuous merge: running 3s ago; failing on s.b: disk full"
    silent = page_snapshot(store, [FakeSource()], FakeWarehouse(), now=2000.0)["sources"][0]["merge"]
    assert not silent["live"] and "running 993s ago (dump runs merge themselves)" in merge_line(silent, 2000.0)
    assert merge_line(None, 1010.0) == "continuous merge: none has run (dump runs merge themselves)"
    assert (s["capture"]["state"], s["capture"]["leader"], s["capture"]["standby"]) == ("capturing", "w1", ["w2"])
    assert s["capture"]["readable_position"] == "mysql-bin.000003:77" and s["capture"]["lag_s"] == 5.0
    assert [d["id"] for d in s["dumps"]] == ["new", "old"]
    assert s["warehouse"] == [{"table": "s.a", "snapshot_id": "3", "merged_at": 1000.0, "rows": 42, "tombstones": 0,
                               "buckets": 1, "log_upto": "x", "data_age_s": 11.5, "data_age_exact": True}]


def test_the_snapshot_shows_each_source_s_staged_log_size_file_count_and_oldest_retained_position(tmp_path):
    from dblog.operations.staged_maintenance import staged_usage
    from dblog.stagedlog.staged_log import StagedLog
    root = tmp_path / "staging" / "src"
    for path, size in (("log/s.a/p3_p5.parquet", 10), ("log/s.a/p3_p4.parquet", 4),   # hidden within p3_p5
                       ("log/s.b/p2_p9.parquet", 20), ("log/dblog.watermarks/p1_p9.parquet", 5),
                       ("chunks/s.a/d1/00000000.parquet", 7), ("log/s.a/.tmp-x.parquet", 99)):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x" * size)
    staged = StagedLog(str(tmp_path / "staging"))
    snap = page_snapshot(MemoryStore({}), [FakeSource()], FakeWarehouse(), now=1010.0,
                         usage=lambda source: staged_usage(staged, source))
    (s,) = snap["sources"]
    assert {k: s["staged"][k] for k in ("files", "bytes", "segments", "chunk_files", "oldest")} == {
        "files": 5, "bytes": 46, "segments": 4, "chunk_files": 1, "oldest": "p2"}
    assert s["staged"]["tables"]["s.a"] == {"segments": 2, "bytes": 14, "oldest": "p3"}
    assert page_snapshot(MemoryStore({}), [FakeSource()], FakeWarehouse(), now=1010.0)["sources"][0]["staged"] is None


def test_a_dump_of_a_thousand_tables_is_one_line_of_counts_naming_only_the_unfinished_tables():
    from dblog.cli.cmd_status import SHOWN, _dump_tables
    tables = {f"shop.t{i:04d}": {"status": DONE, "rows": 1000, "chunks": 1} for i in range(1000)}
    tables["shop.t0007"] = {"status": RUNNING, "rows": 10, "chunks": 1}
    tables["shop.t0500"] = {"status": FAILED, "rows": 0, "chunks": 0}
    line = _dump_tables(tables, every=False)
    assert line.startswith("1000 tables (998 done, 1 running, 1 failed), 998010 rows/999 chunks; "
                           "not done: shop.t0007, shop.t0500 (")
    assert "shop.t0001" not in line
    assert _dump_tables(tables, every=True).count(" rows/") == 1000   # --tables: each one
    few = dict(list(tables.items())[:SHOWN])
    assert _dump_tables(few, every=False).count(" rows/") == SHOWN   # a few are listed as before


class ManyTables(FakeWarehouse):
    def __init__(self, n: int):
        self.names, self.loaded = [f"s.t{i:04d}" for i in range(n)], []

    def tables(self, source):
        return list(reversed(self.names))

    def table_summary(self, source, table):
        self.loaded.append(table)
        return super().table_summary(source, table)


def test_a_source_of_a_thousand_tables_shows_and_loads_one_page_of_them_by_name_or_search():
    from dblog.operations.status import TABLES_PER_PAGE, TableView
    warehouse, store = ManyTables(1000), MemoryStore({})
    first = page_snapshot(store, [FakeSource()], warehouse, now=1010.0)["sources"][0]
    assert [t["table"] for t in first["warehouse"]] == warehouse.names[:TABLES_PER_PAGE]
    assert warehouse.loaded == warehouse.names[:TABLES_PER_PAGE]   # only the shown tables cost a catalog load
    assert first["warehouse_view"] == {"total": 1000, "page": 0, "pages": 20, "per_page": TABLES_PER_PAGE, "find": ""}
    third = page_snapshot(store, [FakeSource()], warehouse, views={"src": TableView(2)})["sources"][0]
    assert third["warehouse"][0]["table"] == "s.t0100"
    past = page_snapshot(store, [FakeSource()], warehouse, views={"src": TableView(99)})["sources"][0]
    assert past["warehouse_view"]["page"] == 19 and past["warehouse"][-1]["table"] == "s.t0999"
    found = page_snapshot(store, [FakeSource()], warehouse, views={"src": TableView(0, "T099")})["sources"][0]
    assert [t["table"] for t in found["warehouse"]] == [f"s.t099{i}" for i in range(10)]
    assert found["warehouse_view"]["total"] == 10


def test_the_page_names_a_few_of_a_dump_s_tables_unfinished_first_and_counts_them_all():
    tables = {f"s.t{i:04d}": progress(f"s.t{i:04d}", DONE, 10, 10) for i in range(1000)}
    tables["s.t0900"] = progress("s.t0900", RUNNING, 5, 10)
    store = MemoryStore(dump_nodes("src", "all", tables, created_at=1.0))
    view = dump_view(dump_status(store, "src", "all"), shown=20)
    assert len(view["tables"]) == 20 and view["tables"][0]["table"] == "s.t0900"
    assert view["table_count"] == 1000 and view["table_statuses"] == {DONE: 999, RUNNING: 1}
    assert view["rows"] == 999 * 10 + 5   # the totals cover every table
