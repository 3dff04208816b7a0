"""Randomized convergence (short, seeded): `make chaos` runs longer and more seeds."""

import pytest
from oracles import PositionHistory, staged_once_in_order
from scenario import run

SEEDS = {"mariadb": 1108, "postgres": 2209}


# Every run also has a second client writing what the log holds without rows all along
# (MariaDB: statement-logged updates and range deletes, TRUNCATE, LOAD DATA; PostgreSQL:
# TRUNCATE). The short form runs each merge once, on one source each (the MariaDB continuous
# merge with kills: tests/spark/test_continuous_merge.py); `make chaos` runs both merges on both
# sources, more seeds, for longer (LEGACY=1 for that client).
@pytest.mark.parametrize("kind, continuous", [("mariadb", False), ("postgres", True)],
                         ids=["mariadb-batch", "postgres-continuous"])
def test_a_seeded_chaos_run_with_writes_logged_without_rows_keeps_every_oracle_with_no_manual_step(
        kind, continuous, services, spark, tmp_path):
    report = run(kind, SEEDS[kind], 15, spark, tmp_path, legacy=True, continuous=continuous)
    print(report)
    assert report.ok, f"{report.problems[:5]}; replay: {report.replay()}"
    # The run did what it claims: writes, unlogged writes, dumps, merges and kills all happened.
    assert report.transactions > 500 and report.events >= report.transactions
    assert report.dumps >= 3 and report.versions >= 3 and (continuous or report.merges >= 2)
    assert report.legacy_writes >= 5 and report.kills >= 2 and report.converged_s is not None


@pytest.mark.offline
def test_the_journal_oracle_catches_a_lost_a_repeated_and_a_reordered_transaction():
    journal = [{"a": 1}, {"b": 2}, {"a": 1, "b": 1}]
    assert staged_once_in_order(journal, journal) == []
    assert staged_once_in_order(journal, journal[:2])                       # lost
    assert staged_once_in_order(journal, journal + [{"a": 1, "b": 1}])      # repeated
    assert staged_once_in_order(journal, [journal[1], journal[0], journal[2]])  # reordered


@pytest.mark.offline
def test_the_history_oracle_catches_a_key_going_back_in_time(tmp_path):
    from dblog.warehouse.tables import Warehouse

    from iceberg_tables import commit_rows
    warehouse = Warehouse(str(tmp_path))
    history = PositionHistory()

    def version(position: str) -> None:
        commit_rows(warehouse, "s", "db.t", [{"id": 1, "_dblog_position": position}], [("id", "bigint")], ["id"])

    version("0002")
    assert history.observe(warehouse, "s") == []
    version("0003")
    assert history.observe(warehouse, "s") == []
    version("0001")
    assert history.observe(warehouse, "s") == ["db.t key (1,) went back from position 0003 to 0001"]
