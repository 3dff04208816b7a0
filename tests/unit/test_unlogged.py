"""The index of writes the log holds without rows, and the rule that drops the windows holding one."""
from dblog.coordination.unlogged import add
from dblog.model.rules import blind_window, may_restore


def test_a_window_is_blind_only_when_an_unlogged_write_falls_strictly_inside_it():
    at = [("05", "05")]
    assert blind_window("04", "06", at)
    assert not blind_window("01", "04", at)     # closed before the write: its rows are from before, at HW < write
    assert not blind_window("06", "09", at)     # opened after it: read after it
    assert blind_window("01", "09", [("02", "02"), ("12", "12")])
    assert not blind_window("03", "09", [])


def test_each_position_is_added_once_and_the_intervals_stay_ordered():
    out = add([], ["07", "03", "07"])
    assert out == [("03", "03"), ("07", "07")]
    assert add(out, ["03", "05"]) == [("03", "03"), ("05", "05"), ("07", "07")]


def test_past_the_limit_the_oldest_neighbours_join_so_no_window_that_held_a_write_is_forgotten():
    positions = [f"{i:02d}" for i in range(0, 40, 4)]          # 00, 04, ..., 36
    out = add([], positions, limit=4)
    assert len(out) == 4
    assert out[-3:] == [("28", "28"), ("32", "32"), ("36", "36")]   # the newest stay exact
    for p in positions:   # every window that held one of the writes is still blind
        below, above = f"{int(p) - 1:02d}" if p != "00" else "", f"{int(p) + 1:02d}"
        assert blind_window(below, above, out), p


def test_removing_rows_a_write_deleted_waits_only_for_chunks_that_closed_before_it_and_keep_their_rows():
    at = [("05", "05")]
    assert may_restore("01", "03", "05", at)          # read before the write, kept: may put a deleted row back
    assert not may_restore("04", "06", "05", at)      # open at the write: dropped whole
    assert not may_restore("06", "08", "05", at)      # opened after it: read after it
    assert not may_restore("01", None, "05", at)      # its HW never staged (a killed dump): never merged as it is
    assert not may_restore(None, "03", "05", at)      # its LW never indexed: never ready
    assert not may_restore("01", "03", "05", [("02", "02"), *at])   # dropped whole for an earlier write
