"""What downstream jobs read besides the table: soft-deleted rows and the change table, both held
to the writer's own journal of what it changed."""
import datetime as dt
import random

from test_merge_converges import merge
from test_repairs import assert_equal, repairs_done, start_capture

from dblog.warehouse.change_tables import expire_days
from dblog.warehouse.change_tables import load as load_changes
from dblog.warehouse.readers import duckdb_read, duckdb_scan
from dblog.warehouse.table_maintenance import maintain
from dblog.warehouse.types import DELETED

from conftest import settle, wait_for


class Journal:
    """A writer that remembers each row it wrote, per key the ops it ran, in its own order."""

    def __init__(self, src, table: str, seed: int):
        self.src, self.table, self.rnd = src, table, random.Random(seed)
        self.rows: dict[int, tuple[int, str]] = {}
        self.ops: dict[int, list[str]] = {}
        self.deleted: dict[int, tuple[int, str]] = {}   # key -> its values when last deleted
        self.truncated: set[int] = set()
        self.next = 1

    def insert(self) -> None:
        k, row = self.next, (self.rnd.randrange(1000), f"s{self.rnd.randrange(1000)}")
        self.next += 1
        self.src.sql(f"INSERT INTO {self.table} (id, v, s) VALUES (%s, %s, %s)", params=[k, *row])
        self._did(k, "c", row)

    def step(self) -> None:
        if not self.rows or self.rnd.random() < 0.3:
            return self.insert()
        k = self.rnd.choice(sorted(self.rows))
        roll = self.rnd.random()
        if roll < 0.5:
            row = (self.rnd.randrange(1000), self.rows[k][1])
            self.src.sql(f"UPDATE {self.table} SET v = %s WHERE id = %s", params=[row[0], k])
            self._did(k, "u", row)
        elif roll < 0.8:
            self.src.sql(f"DELETE FROM {self.table} WHERE id = %s", params=[k])
            self._did(k, "d", None)
        else:   # a primary-key update: a delete at the old key, the row at the new one
            new, row = self.next, self.rows[k]
            self.next += 1
            self.src.sql(f"UPDATE {self.table} SET id = %s WHERE id = %s", params=[new, k])
            self._did(k, "d", None)
            self._did(new, "u", row)

    def truncate(self) -> None:
        self.src.sql(f"TRUNCATE TABLE {self.table}")
        self.truncated = set(self.rows)
        for k in list(self.rows):
            self._did(k, "d", None)

    def _did(self, key: int, op: str, row) -> None:
        self.ops.setdefault(key, []).append(op)
        if row is None:
            self.deleted[key] = self.rows.pop(key)
        else:
            self.rows[key] = row
            self.deleted.pop(key, None)


def test_deleted_rows_and_the_change_table_match_the_writers_journal_through_a_missed_merge_and_a_truncate(
        src, spark, warehouse, monkeypatch):
    soft = src.kind == "mariadb"   # each delete mode on one source: PostgreSQL's table hard-deletes
    table = src.table("ledger")
    src.sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v INT, s VARCHAR(20))")
    if src.kind == "postgres":   # a delete then logs the whole row, not only its key
        src.sql(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    journal = Journal(src, table, seed=35)
    for _ in range(40):
        journal.insert()
    initial = dict(journal.rows)
    journal.ops.clear()   # the dump reads these: the change table holds them as `r`
    monkeypatch.setenv("DBLOG_SOFT_DELETE_TABLES", table if soft else "")
    monkeypatch.setenv("DBLOG_CHANGE_TABLES", table)
    capture = start_capture(src, warehouse)
    src.dblog("dump", "--source", src.source_id, "--table", table, "--chunk-size", "15", check=True)
    for phase in range(3):
        for _ in range(60):
            journal.step()
        settle(src)
        # The second merge misses its change-table append (as a crash between the two commits
        # would): the third must catch up with both.
        monkeypatch.setenv("DBLOG_CHANGE_TABLES", "" if phase == 1 else table)
        merge(spark, src, warehouse, tables=[table])
    # A TRUNCATE has no row events: its repair dumps find the keys gone, and the change table says so.
    journal.truncate()
    for done in (1, 2):
        wait_for(lambda n=done: repairs_done(src, at_least=n), 120, what=f"repair dump {done} of the truncate")
        settle(src)
        merge(spark, src, warehouse, tables=[table])
    capture.terminate()
    capture.wait()

    assert_equal(src, warehouse, table)   # live rows: soft-deleted ones are not the source's
    stored = warehouse.load(src.source_id, table).scan().to_arrow().to_pylist()
    if soft:
        gone = {r["id"]: (r["v"], r["s"]) for r in stored if r[DELETED]}
        assert set(gone) == set(journal.deleted)
        # A row deleted by its own event keeps the values it had; one a repair found gone, its key.
        assert {k: v for k, v in gone.items() if k not in journal.truncated} == \
            {k: v for k, v in journal.deleted.items() if k not in journal.truncated}
        assert all(gone[k] == (None, None) for k in journal.truncated)
        assert {r["id"] for r in stored if not r[DELETED]} == set(journal.rows)
    else:
        assert not stored and DELETED not in warehouse.load(src.source_id, table).schema().column_names

    changes = load_changes(warehouse, src.source_id, table).scan().to_arrow().sort_by("_position").to_pylist()
    logged: dict[int, list[str]] = {}
    for c in changes:
        if c["_op"] != "r":
            logged.setdefault(c["id"], []).append(c["_op"])
    assert logged == journal.ops, "every change, once, in the writer's order"
    read = {c["id"] for c in changes if c["_op"] == "r"}
    # A dumped row a change of the same merge replaced is not listed: that change is.
    assert read <= set(initial) and set(initial) - read <= set(journal.ops)
    replayed: dict[int, tuple[int, str]] = {}
    for c in changes:   # a downstream copy built from the change table alone
        if c["_op"] == "d":
            replayed.pop(c["id"], None)
        else:
            replayed[c["id"]] = (c["v"], c["s"])
    assert replayed == journal.rows
    from_log = [c for c in changes if c["_commit_ts"] is not None]
    assert from_log and all(c["_txid"] for c in from_log)
    assert all(c["_commit_ts"] is None for c in changes if c["_op"] == "r")

    # Another engine reads both as they are: DuckDB's Iceberg reader.
    duck = duckdb_scan(warehouse.root, load_changes(warehouse, src.source_id, table)).to_pylist()
    assert sorted((c["_position"], c["id"], c["_op"]) for c in duck) == \
        sorted((c["_position"], c["id"], c["_op"]) for c in changes)
    if soft:
        flagged = duckdb_read(warehouse, src.source_id, table).to_pylist()
        assert {r["id"] for r in flagged if r[DELETED]} == set(journal.deleted)

    # Maintenance keeps what the staged log keeps; past it, whole days go and the reach stays:
    # the next merge appends only what is new.
    assert maintain(warehouse, src.source_id, table).line()
    assert len(load_changes(warehouse, src.source_id, table).scan().to_arrow()) == len(changes)
    expire_days(load_changes(warehouse, src.source_id, table), dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    assert not len(load_changes(warehouse, src.source_id, table).scan().to_arrow())
    capture = start_capture(src, warehouse)
    journal.insert()
    settle(src)
    merge(spark, src, warehouse, tables=[table])
    capture.terminate()
    capture.wait()
    after = load_changes(warehouse, src.source_id, table).scan().to_arrow().to_pylist()
    assert [(c["id"], c["_op"]) for c in after] == [(journal.next - 1, "c")]
