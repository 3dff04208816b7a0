"""The window growth rule (`dblog.snapshot.window_growth`): splits double while the source counts
no row written but the dump's watermarks, and go back to the chunk size at the first other write."""
from dblog.snapshot.window_growth import SPLIT_BYTES, WindowGrowth


def run(growth: WindowGrowth, counters, chunk=100, top=800, own=2, row_bytes=50):
    """Split rows of the windows planned at each counter value; each window's watermarks count `own` rows."""
    sizes = []
    for written in counters:
        rows = growth.split_rows(chunk, top, written)
        sizes.append(rows)
        growth.window_written(own, rows, rows * row_bytes)
    return sizes


def test_splits_double_up_to_the_top_while_only_the_watermarks_are_written():
    assert run(WindowGrowth(), [10 + 2 * k for k in range(6)]) == [100, 200, 400, 800, 800, 800]


def test_a_write_by_anyone_else_sends_the_splits_back_to_the_chunk_size_and_quiet_grows_them_again():
    # window k is planned at counter 10 + 2k, plus 1 from the write made during window 3
    counters = [10, 12, 14, 16 + 1, 18 + 1, 20 + 1, 22 + 1]
    assert run(WindowGrowth(), counters) == [100, 200, 400, 100, 200, 400, 800]


def test_a_counter_that_reports_the_watermarks_late_still_grows():
    # PostgreSQL's statistics: the dump's own writes show up a window or two late, all at once
    counters = [10, 10, 10, 16, 16, 20, 22]
    assert run(WindowGrowth(), counters) == [100, 200, 400, 800, 800, 800, 800]


def test_a_late_counter_shows_a_write_once_it_arrives():
    counters = [10, 10, 10, 16 + 5, 18 + 5]
    assert run(WindowGrowth(), counters) == [100, 200, 400, 100, 200]


def test_a_source_that_counts_nothing_or_a_top_at_the_chunk_size_keeps_the_windows():
    assert run(WindowGrowth(), [None] * 4) == [100] * 4
    assert run(WindowGrowth(), [10 + 2 * k for k in range(4)], top=100) == [100] * 4
    assert run(WindowGrowth(), [10 + 2 * k for k in range(4)], top=50) == [100] * 4


def test_wide_rows_stop_the_growth_at_the_split_bytes():
    wide = SPLIT_BYTES // 300   # a 300-row split is as big as a split may grow
    assert run(WindowGrowth(), [10 + 2 * k for k in range(5)], row_bytes=wide) == [100, 200, 300, 300, 300]


def test_the_rows_the_watermarks_say_they_wrote_are_not_anyone_else_s():
    assert run(WindowGrowth(), [10 + 4 * k for k in range(4)], own=4) == [100, 200, 400, 800]
    assert run(WindowGrowth(), [10 + 4 * k for k in range(3)], own=2) == [100, 100, 100]


def test_a_throttle_that_changes_the_chunk_size_starts_the_windows_over_from_it():
    growth = WindowGrowth()
    assert run(growth, [10, 12, 14]) == [100, 200, 400]
    assert run(growth, [16, 18, 20], chunk=30) == [30, 60, 120]
