"""Repair needs coalesce per table before they reach ZooKeeper (pure logic)."""
from dblog.model.events import RepairNeed
from dblog.snapshot.repair import coalesce


def test_key_needs_of_one_table_become_one_with_every_key_once_in_order():
    out = coalesce([RepairNeed("s.a", "partial", "p1", ((1,), (2,))), RepairNeed("s.a", "partial", "p2", ((2,), (3,))),
                    RepairNeed("s.b", "partial", "p3", ((9,),))])
    assert out == [RepairNeed("s.a", "partial", "p1", ((1,), (2,), (3,))), RepairNeed("s.b", "partial", "p3", ((9,),))]


def test_whole_table_needs_keep_the_newest_position_so_the_deleted_rows_repair_waits_for_all():
    out = coalesce([RepairNeed("s.a", "statement", "p5"), RepairNeed("s.a", "TRUNCATE", "p9"),
                    RepairNeed("s.a", "statement", "p7"), RepairNeed("s.a", "partial", "p6", ((1,),))])
    assert out == [RepairNeed("s.a", "partial", "p6", ((1,),)), RepairNeed("s.a", "TRUNCATE", "p9")]
