"""A merge that reaches column renames: which stored fields it renames, what its inputs' old names
become, and when it cannot tell and re-reads the table instead."""
import pyarrow as pa

from dblog.merge.column_renames import plan, rename_segment
from dblog.model.events import ColumnRename


def renamed(old, new, at):
    return ColumnRename("shop.t", old, new, at)


def test_a_stored_column_renamed_keeps_its_field_and_inputs_read_its_old_name_before_the_rename():
    found = plan([renamed("body", "remark", "p5")], ["id", "body"], {"id", "remark"})
    assert found.stored == {"body": "remark"} and found.chains == {"remark": [("body", "p5")]}
    assert not found.conflicts


def test_renames_in_a_chain_compose_and_a_rename_back_is_followed_to_where_it_ends():
    chain = plan([renamed("a", "b", "p2"), renamed("b", "c", "p4")], ["id", "a"], {"id", "c"})
    assert chain.stored == {"a": "c"} and chain.chains == {"c": [("a", "p2"), ("b", "p4")]}
    back = plan([renamed("a", "b", "p2"), renamed("b", "a", "p4")], ["id", "a"], {"id", "a"})
    assert back.stored == {} and not back.conflicts and back.chains == {"a": [("a", "p2"), ("b", "p4")]}


def test_a_renamed_name_taken_again_or_already_in_the_warehouse_is_not_followed_but_re_read():
    again = plan([renamed("a", "b", "p2")], ["id", "a"], {"id", "a", "b"})   # RENAME a TO b, ADD a
    assert not again.stored and not again.chains and "in the table again" in again.conflicts[0]
    had = plan([renamed("a", "b", "p2")], ["id", "a", "b"], {"id", "b"})     # a dump stored b first
    assert not had.stored and "already" in had.conflicts[0]


def test_a_rename_past_the_merge_or_of_a_column_dropped_since_changes_nothing():
    assert not plan([renamed("a", "b", "p2")], ["id", "a"], {"id"})


def test_a_staged_segment_before_the_rename_reads_its_old_name_as_the_new_one():
    chains = {"c": [("a", "p2"), ("b", "p4")]}
    old = pa.table({"id": [1], "a": ["x"], "_position": ["p1"]})
    mid = pa.table({"id": [1], "b": ["y"], "_position": ["p3"]})
    new = pa.table({"id": [1], "c": ["z"], "_position": ["p5"]})
    assert rename_segment(old, "p1", chains).column_names == ["id", "c", "_position"]
    assert rename_segment(mid, "p3", chains).column("c").to_pylist() == ["y"]
    assert rename_segment(new, "p5", chains) is new
