"""A merge that reaches column renames: which stored fields it renames, what its inputs' old names
become, and when it cannot tell and re-reads the table instead."""
import pyarrow as pa

from dblog.merge.column_renames import plan, rename_segment
from dblog.model.events import ColumnRename


def renamed(old, new, at):
    return ColumnRename("shop.t", old, new, at)


def test_a_stored_column_renamed_keeps_its_field_and_inputs_read_its_old_name_before_the_rename():
    found = plan([renamed("body", "remark", "p5")], ["id", "body"], [("p7", {"id", "remark"})], "p1")
    assert found.stored == {"body": "remark"} and found.chains == {"remark": [("body", "p5")]}
    assert not found.conflicts and found.key(["body"]) == ["remark"]


def test_a_merge_whose_inputs_all_precede_the_rename_renames_the_field_all_the_same():
    # (else it would pass the rename, and the next merge would take the new name for a new column)
    found = plan([renamed("body", "remark", "p5")], ["id", "body"], [("p3", {"id", "body"})], "p1")
    assert found.stored == {"body": "remark"} and found.current({"id", "body"}) == {"id", "remark"}
    quiet = plan([renamed("body", "remark", "p5")], ["id", "body"], [], "p1")   # no row since: no input at all
    assert quiet.stored == {"body": "remark"}


def test_renames_in_a_chain_compose_and_a_rename_back_is_followed_to_where_it_ends():
    chain = plan([renamed("a", "b", "p2"), renamed("b", "c", "p4")], ["id", "a"], [("p5", {"id", "c"})], None)
    assert chain.stored == {"a": "c"} and chain.chains == {"c": [("a", "p2"), ("b", "p4")]}
    back = plan([renamed("a", "b", "p2"), renamed("b", "a", "p4")], ["id", "a"], [("p5", {"id", "a"})], None)
    assert back.stored == {} and not back.conflicts and back.chains == {"a": [("a", "p2"), ("b", "p4")]}


def test_a_renamed_name_taken_again_or_already_in_the_warehouse_is_not_followed_but_re_read():
    again = plan([renamed("a", "b", "p2")], ["id", "a"], [("p3", {"id", "a", "b"})], None)   # RENAME a TO b, ADD a
    assert not again.stored and not again.chains and "in the table again" in again.conflicts[0]
    had = plan([renamed("a", "b", "p2")], ["id", "a", "b"], [("p3", {"id", "b"})], None)   # kept dropped b
    assert not had.stored and "already" in had.conflicts[0]
    # A dump read the new name before the capture placed the rename: the stored b holds its keys only.
    early = plan([renamed("a", "b", "p6")], ["id", "b"], [("p7", {"id", "b"})], "p5")
    assert not early.stored and "already" in early.conflicts[0]


def test_a_rename_an_earlier_merge_followed_only_maps_inputs_that_reach_back_before_it():
    # A chunk read before the rename (its window opened before it) merged after the field was renamed.
    late = plan([renamed("a", "b", "p4")], ["id", "b"], [("p3", {"id", "a"})], "p5")
    assert late.chains == {"b": [("a", "p4")]} and not late.stored and not late.conflicts


def test_a_staged_segment_reads_its_old_names_as_the_new_one_row_by_row():
    chains = {"c": [("a", "p2"), ("b", "p4")]}
    old = pa.table({"id": [1], "a": ["x"], "_position": ["p1"]})
    assert rename_segment(old, chains).column("c").to_pylist() == ["x"]
    compacted = pa.table({"id": [1, 2, 3], "a": ["x", None, None], "b": [None, "y", None], "c": [None, None, "z"],
                          "_position": ["p1", "p3", "p5"]})
    assert rename_segment(compacted, chains).column("c").to_pylist() == ["x", "y", "z"]
    new = pa.table({"id": [1], "c": ["z"], "_position": ["p5"]})
    assert rename_segment(new, chains).equals(new)


def test_a_name_added_again_after_the_rename_is_its_own_column_and_an_old_value_of_another_type_is_null():
    again = pa.table({"id": [1, 2], "a": ["old", "new a"], "b": [None, "b"], "_position": ["p1", "p3"]})
    out = rename_segment(again, {"b": [("a", "p2")]})
    assert out.column("b").to_pylist() == ["old", "b"] and out.column("a").to_pylist() == [None, "new a"]
    typed = pa.table({"id": [1], "a": ["abc"], "b": pa.array([None], pa.int64()), "_position": ["p1"]})
    assert rename_segment(typed, {"b": [("a", "p2")]}).column("b").to_pylist() == [None]
