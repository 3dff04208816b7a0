"""The reconciliation rule, the output order and the merge rule, on the paper's examples."""
from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.rules import (
    Chunk,
    ChunkRange,
    DumpRecord,
    Window,
    disjoint_chunks,
    merge_latest,
    ordered_output,
    touched_in_window,
    visible_rows,
    window_survivors,
)
from dblog.model.staged_format import ChunkRow

T, WM = "app.items", "dblog.watermarks"


def pos(n: int) -> str:
    return Position(1, n, 0).encode()


def ev(n, key, op="u", table=T, old_key=None, after=None):
    k = key if isinstance(key, tuple) else (key,)
    row = None if op == "d" else (after or {"id": k[0], "v": f"log@{n}"})
    return ChangeEvent("s", table, op, pos(n), k, row, old_key=old_key)


def wm(n, value):
    return ChangeEvent("s", WM, "u", pos(n), ("d1",), {"id": "d1", "value": value})


def rows(*keys):
    return [{"id": k, "v": f"chunk:{k}"} for k in keys]


def key_of(row):
    return (row["id"],)


def chunk_rows(*keys):
    return tuple(ChunkRow(key_of(r), r) for r in rows(*keys))


def ids(rs):
    return [r["id"] for r in rs]


def test_paper_example_drops_k1_and_k3_changed_between_the_watermarks():
    # Figure 3: chunk k1..k6; the log has k1 and k3 between LW and HW.
    log = [ev(1, "k2"), wm(2, "lw"), ev(3, "k1"), ev(4, "k3"), wm(5, "hw"), ev(6, "k4")]
    window = Window(T, pos(2), pos(5))
    assert ids(window_survivors(rows("k1", "k2", "k3", "k4", "k5", "k6"), key_of, window, log)) == \
        ["k2", "k4", "k5", "k6"]


def test_paper_output_order_is_log_up_to_hw_then_chunk_survivors_then_later_log():
    log = [ev(1, "k2"), wm(2, "lw"), ev(3, "k1"), ev(4, "k3"), wm(5, "hw"), ev(6, "k4")]
    chunk = Chunk(Window(T, pos(2), pos(5)), chunk_rows("k1", "k2", "k3", "k4", "k5", "k6"))
    out = list(ordered_output(reversed(log), [chunk], lambda e: e.table == WM))
    shown = [("dump", o.key[0]) if isinstance(o, DumpRecord) else ("log", o.key[0]) for o in out]
    assert shown == [("log", "k2"), ("log", "k1"), ("log", "k3"),
                     ("dump", "k2"), ("dump", "k4"), ("dump", "k5"), ("dump", "k6"), ("log", "k4")]
    assert all(o.position == pos(5) for o in out if isinstance(o, DumpRecord))


def test_reference_readme_example_update_of_42_in_window_keeps_41_and_43():
    log = [wm(10, "lw"), ev(11, 42), wm(12, "hw")]
    assert ids(window_survivors(rows(41, 42, 43), key_of, Window(T, pos(10), pos(12)), log)) == [41, 43]


def test_empty_chunk_has_no_survivors():
    assert window_survivors([], key_of, Window(T, pos(1), pos(2)), [ev(1, 5)]) == []


def test_every_key_colliding_drops_the_whole_chunk():
    log = [ev(n, k) for n, k in ((2, 1), (3, 2), (4, 3))]
    assert window_survivors(rows(1, 2, 3), key_of, Window(T, pos(1), pos(5)), log) == []


def test_events_of_another_table_in_the_window_drop_nothing():
    log = [ev(2, 1, table="app.other"), ev(3, 2, table="app.other")]
    assert ids(window_survivors(rows(1, 2), key_of, Window(T, pos(1), pos(5)), log)) == [1, 2]


def test_events_on_the_watermark_positions_or_outside_the_window_drop_nothing():
    log = [ev(1, 1), ev(5, 2), ev(9, 3)]
    assert ids(window_survivors(rows(1, 2, 3), key_of, Window(T, pos(1), pos(9)), log)) == [1, 3]


def test_composite_keys_collide_only_on_the_whole_key():
    log = [ev(2, (1, "b"))]
    chunk = [{"a": 1, "b": "a"}, {"a": 1, "b": "b"}, {"a": 2, "b": "b"}]
    survivors = window_survivors(chunk, lambda r: (r["a"], r["b"]), Window(T, pos(1), pos(3)), log)
    assert survivors == [{"a": 1, "b": "a"}, {"a": 2, "b": "b"}]


def test_delete_and_reinsert_in_the_window_drops_the_row_and_the_log_wins():
    log = [wm(1, "lw"), ev(2, 7, op="d"), ev(3, 7, op="c", after={"id": 7, "v": "new"}), wm(4, "hw")]
    chunk = Chunk(Window(T, pos(1), pos(4)), chunk_rows(6, 7))
    state = merge_latest({}, ordered_output(log, [chunk], lambda e: e.table == WM))
    assert visible_rows(state) == {(6,): {"id": 6, "v": "chunk:6"}, (7,): {"id": 7, "v": "new"}}


def test_primary_key_update_touches_the_old_and_the_new_key():
    log = [ev(2, (9,), old_key=(3,), after={"id": 9, "v": "moved"})]
    window = Window(T, pos(1), pos(3))
    assert touched_in_window(window, log) == {(3,), (9,)}
    assert ids(window_survivors(rows(3, 5, 9), key_of, window, log)) == [5]


def test_merge_keeps_the_highest_position_whatever_the_arrival_order():
    newer, older = ev(9, 1, after={"id": 1, "v": "new"}), DumpRecord(T, pos(5), (1,), {"id": 1, "v": "old"})
    assert visible_rows(merge_latest({}, [newer, older])) == {(1,): {"id": 1, "v": "new"}}
    assert visible_rows(merge_latest({}, [older, newer])) == {(1,): {"id": 1, "v": "new"}}


def test_a_delete_leaves_a_tombstone_that_an_older_chunk_row_cannot_revive():
    state = merge_latest({}, [ev(9, 1, op="d")])
    merge_latest(state, [DumpRecord(T, pos(5), (1,), {"id": 1, "v": "stale"})])
    assert visible_rows(state) == {} and state[(1,)] == (pos(9), None)


def test_replaying_a_merge_changes_nothing():
    records = [ev(2, 1), ev(3, 2, op="d"), DumpRecord(T, pos(4), (3,), {"id": 3}), ev(5, (4,), old_key=(1,))]
    once = merge_latest({}, records)
    assert merge_latest(dict(once), records) == once


def test_a_key_update_moves_the_row_and_tombstones_the_old_key():
    state = merge_latest({}, [ev(1, 1, op="c"), ev(2, (2,), old_key=(1,), after={"id": 2, "v": "x"})])
    assert visible_rows(state) == {(2,): {"id": 2, "v": "x"}}


def test_unchanged_toast_columns_keep_their_previous_value():
    first = ev(1, 1, op="c", after={"id": 1, "big": "B" * 10, "v": 1})
    second = ev(2, 1, after={"id": 1, "big": None, "v": 2})
    second.unchanged = ["big"]
    assert visible_rows(merge_latest({}, [first, second]))[(1,)] == {"id": 1, "big": "B" * 10, "v": 2}


def test_a_window_whose_low_watermark_is_not_before_its_high_is_refused():
    import pytest
    with pytest.raises(ValueError, match="not before"):
        Window(T, pos(5), pos(5))


def test_a_chunk_is_ready_only_once_both_watermarks_are_staged_and_the_checkpoint_passed_the_hw():
    from dblog.model.rules import chunk_ready
    assert chunk_ready(pos(1), pos(5), pos(5)) and chunk_ready(pos(1), pos(5), pos(9))
    assert not chunk_ready(pos(1), pos(5), pos(4)), "HW staged, checkpoint not past it: the window may be incomplete"
    assert not chunk_ready(None, pos(5), pos(9)) and not chunk_ready(pos(1), None, pos(9))
    assert not chunk_ready(pos(1), pos(5), None)


def _ranges(*spans, dump="d1"):
    return [ChunkRange(dump, n, None if a is None else f"[{a}]", None if b is None else f"[{b}]")
            for n, (a, b) in enumerate(spans)]


def test_chunks_each_starting_where_the_one_before_ended_cannot_share_a_key():
    assert disjoint_chunks(_ranges((None, 3), (3, 7), (7, 9)))
    assert disjoint_chunks(reversed(_ranges((None, 3), (3, 7))))   # listed in any order
    assert disjoint_chunks(_ranges((12, 20)))                      # a resumed dump's first chunk
    assert disjoint_chunks([])


def test_a_re_read_a_broken_chain_a_second_dump_or_a_key_list_chunk_is_not_proven_disjoint():
    assert not disjoint_chunks(_ranges((None, 3), (1, 7)))         # re-read after a crash
    assert not disjoint_chunks(_ranges((None, 3), (5, 7)))         # not where the one before ended
    assert not disjoint_chunks(_ranges((None, 3)) + _ranges((None, 2), dump="d2"))
    assert not disjoint_chunks(_ranges((None, None)))              # key-list chunk: no range
