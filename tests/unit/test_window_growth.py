"""The window growth rule (`dblog.snapshot.window_growth`): splits double while the source counts
no row written but the dump's watermarks, and go back to the chunk size at the first other write."""
from dblog.snapshot.window_growth import SPLIT_BYTES, WindowGrowth


def run(growth: WindowGrowth, counters, chunk=100, top=800, own=2, row_bytes=50, times=None):
    """Split rows of the windows planned at each counter value (at each of `times`, by default one
    a second); each window's watermarks count `own` rows."""
    sizes = []
    for k, written in enumerate(counters):
        rows = growth.split_rows(chunk, top, written, now=times[k] if times else 1000.0 + k)
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


def test_a_counter_that_reports_once_a_second_keeps_a_busy_source_s_windows_at_the_chunk_size():
    # windows 0.25 s apart; others' writes reach the counter once a second, in bursts
    times = [k * 0.25 for k in range(12)]
    counters = [10 + 2 * k + 5 * int(k * 0.25) for k in range(12)]
    assert run(WindowGrowth(delay_s=1.5), counters, times=times) == [100] * 12
    assert run(WindowGrowth(), counters, times=times) != [100] * 12, "without the delay, the bursts' gaps grow it"


def test_a_late_counter_grows_the_windows_once_it_stood_still_for_its_delay():
    times = [k * 0.5 for k in range(8)]
    counters = [10 + 2 * k for k in range(8)]
    assert run(WindowGrowth(delay_s=1.5), counters, times=times) == [100, 100, 100, 200, 400, 800, 800, 800]


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


def test_a_counter_that_goes_back_starts_the_growth_over_instead_of_hiding_writes():
    # a source restart or a statistics reset: the counter falls below where the dump began
    growth = WindowGrowth()
    assert run(growth, [1000, 1002, 1004]) == [100, 200, 400]
    assert run(growth, [5, 7, 9, 11]) == [100, 200, 400, 800]
    assert run(growth, [13 + 1]) == [100], "a write after the reset is seen"
