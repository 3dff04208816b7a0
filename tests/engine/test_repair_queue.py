"""The repair queue in ZooKeeper: requests small enough for its nodes, turned into repair dumps."""
import time

from dblog.coordination import repair_requests
from dblog.coordination.store import _dump
from dblog.model.events import RepairNeed
from dblog.snapshot import repair
from dblog.snapshot.dump import dump_status


def test_a_large_key_list_is_queued_in_parts_that_fit_zookeeper_nodes(mariadb):
    keys = tuple((f"{i:036d}",) for i in range(5_000))  # UUID-sized keys
    with mariadb.store() as store:
        written = repair_requests.request(store, mariadb.source_id, [RepairNeed("db.t", "test", None, keys)])
        queued = repair.pending(store, mariadb.source_id)
    assert written == len(queued) == 3
    assert sorted(len(r.keys) for r in queued) == [1_000, 2_000, 2_000]
    assert max(len(_dump({"keys": r.keys})) for r in queued) < 200_000


def test_more_keys_than_a_key_list_repair_takes_become_one_full_dump_of_the_table(mariadb):
    mariadb.workload(seed=80, rows=50).create()
    table = mariadb.table("accounts")
    keys = tuple((i,) for i in range(repair_requests.TABLE_ABOVE + 1))
    with mariadb.store() as store:
        repair_requests.request(store, mariadb.source_id, [RepairNeed(table, "many partial images", None, keys)])
        ran = repair.Repairer(store, mariadb.source(), mariadb.staged()).run_once()
        assert len(ran) == 1
        status = dump_status(store, mariadb.source_id, ran[0])
        assert status["state"] == "done" and not status["key_list"]
        assert status["tables"][table]["rows"] == 50
        assert not repair.pending(store, mariadb.source_id), "the requests must be gone once their dump exists"


def test_a_repair_of_a_dropped_table_is_dropped_and_does_not_hold_up_the_others(mariadb):
    mariadb.workload(seed=81, rows=20).create()
    with mariadb.store() as store:
        repair_requests.request(store, mariadb.source_id, [
            RepairNeed(mariadb.table("gone_table"), "test", None, ((1,),)),
            RepairNeed(mariadb.table("accounts"), "test", None, ((1,), (2,)))])
        ran = repair.Repairer(store, mariadb.source(), mariadb.staged()).run_once()
        assert len(ran) == 1 and dump_status(store, mariadb.source_id, ran[0])["state"] == "done"
        assert not repair.pending(store, mariadb.source_id)


def test_a_write_logged_without_rows_after_a_repair_was_registered_gets_a_repair_of_its_own(mariadb, tmp_path):
    """Statement-logged writes keep coming while the removal of the first one's deleted rows
    waits for a merge: each gets a full repair registered after it, never one that already
    passed the keys it touched."""
    from dblog.model.positions import Position
    from dblog.warehouse.tables import Warehouse
    mariadb.workload(seed=82, rows=30).create()
    table = mariadb.table("accounts")
    later = Position(999_999, 0, 0).encode()   # the capture has not passed it: the removals wait
    with mariadb.store() as store:
        repairer = repair.Repairer(store, mariadb.source(), mariadb.staged(), warehouse=Warehouse(str(tmp_path / "w")))
        ran = []
        for i in range(3):
            repair_requests.request(store, mariadb.source_id, [RepairNeed(table, f"statement {i}", later)])
            asked = time.time()
            (dump_id,) = repairer.run_once()
            status = dump_status(store, mariadb.source_id, dump_id)
            assert status["created_at"] >= asked, f"write {i} mapped onto {dump_id}, registered before it"
            assert status["state"] == "done" and status["tables"][table]["rows"] == 30
            ran.append(dump_id)
        assert len(set(ran)) == 3
        waits = repair.waiting(store, mariadb.source_id)[table]
        assert waits["whole_table"] and any(r.startswith("removal of the rows it deleted") for r in waits["reasons"])
