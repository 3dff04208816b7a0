"""The warehouse's key-range buckets, without Spark: which bucket a key falls in, when a bucket
splits and where, the bucket list after a split.

`dblog.merge.bucket_merge.bucket_of` builds its Spark expression with `bucket_search`; here plain Python
values stand in for the columns (comparing bounds as Spark casts them is left to tests/spark)."""
from __future__ import annotations

import math
import random
from bisect import bisect_right

import pytest

from dblog.merge.bucket_merge import (
    SAMPLES_PER_PIECE,
    bucket_search,
    oversized,
    sample_fraction,
    split_points,
    with_splits,
)


def bucket(value, bounds: list) -> int:
    """The bucket `bucket_of` picks for `value`, evaluated in Python."""
    return bucket_search(len(bounds), lambda i: value < bounds[i], lambda below, a, b: a if below else b,
                         lambda i: i)


def reference(value, bounds: list) -> int:
    """The last bucket whose inclusive lower bound is at or below the value (bucket 0 has none)."""
    return bisect_right(bounds[1:], value)


def depth(count: int) -> int:
    tree = bucket_search(count, lambda i: i, lambda below, a, b: (a, b), lambda i: None)

    def d(node) -> int:
        return 0 if node is None else 1 + max(d(node[0]), d(node[1]))
    return d(tree)


# -- which bucket a key falls in -----------------------------------------------------------------
def test_a_table_with_one_bucket_puts_every_key_in_it_without_a_comparison():
    asked = []
    assert bucket_search(1, asked.append, lambda *_: pytest.fail("no comparison"), lambda i: i) == 0
    assert asked == []


def test_a_table_has_at_least_one_bucket():
    with pytest.raises(ValueError):
        bucket_search(0, lambda i: True, lambda c, a, b: a, lambda i: i)


def test_a_key_on_a_bound_falls_in_that_bounds_bucket_and_one_below_in_the_bucket_before():
    bounds = [None, 10, 20, 30]
    assert [bucket(k, bounds) for k in (-5, 9, 10, 11, 19, 20, 29, 30, 10**9)] == [0, 0, 1, 1, 1, 2, 2, 3, 3]


def test_the_first_bucket_has_no_lower_bound_and_is_never_compared():
    def below(i):
        assert i != 0, "bucket 0's bound (None) was compared"
        return -10**12 < [None, 0, 5][i]
    assert bucket_search(3, below, lambda c, a, b: a if c else b, lambda i: i) == 0


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 8, 9, 40, 41, 257])
def test_every_bound_is_compared_once_and_a_key_needs_at_most_log2_comparisons(count):
    asked = []
    bucket_search(count, lambda i: asked.append(i), lambda c, a, b: None, lambda i: None)
    assert sorted(asked) == list(range(1, count))
    assert depth(count) == math.ceil(math.log2(count))


def test_keys_fall_in_the_same_bucket_as_a_plain_search_over_the_bounds():
    rnd = random.Random(7)
    for count in range(1, 30):
        bounds = [None] + sorted(rnd.sample(range(-1000, 1000), count - 1))
        for key in [*(b for b in bounds[1:]), *(rnd.randint(-1100, 1100) for _ in range(50))]:
            assert bucket(key, bounds) == reference(key, bounds), (key, bounds)


def test_composite_keys_compare_column_by_column():
    bounds = [None, (1, "m"), (2, "a"), (2, "k")]
    keys = [(0, "z"), (1, "a"), (1, "m"), (1, "z"), (2, "a"), (2, "j"), (2, "k"), (3, "")]
    assert [bucket(k, bounds) for k in keys] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_string_keys_compare_as_strings():
    bounds = [None, "b", "ba", "c"]
    keys = ("", "a", "azz", "b", "b\x00", "ba", "bz", "c", "ca")
    assert [bucket(k, bounds) for k in keys] == [0, 0, 0, 1, 1, 2, 2, 3, 3]


# -- when a bucket splits ------------------------------------------------------------------------
def test_a_bucket_splits_only_once_it_passes_twice_its_target_size():
    assert oversized({0: 200, 1: 201, 2: 0, 3: 10_000}, 100) == {1: 201, 3: 10_000}
    assert oversized({}, 100) == {}


def test_split_keys_are_sampled_about_64_per_piece_and_all_of_a_small_bucket():
    assert sample_fraction(3, 1) == 1.0
    assert sample_fraction(100, 40) == 1.0             # 3 pieces: 192 samples wanted of 100
    assert sample_fraction(201, 100) == 192 / 201      # 3 pieces: 192 samples of 201
    assert sample_fraction(10_000_001, 250_000) == pytest.approx(SAMPLES_PER_PIECE * 41 / 10_000_001)
    for rows, target in [(501, 250), (1_000_000, 250_000), (7_777_777, 100_000)]:
        pieces = -(-rows // target)
        assert sample_fraction(rows, target) * rows == pytest.approx(min(rows, SAMPLES_PER_PIECE * pieces))


# -- where a bucket splits -----------------------------------------------------------------------
def keys(*values) -> list[list[str]]:
    """Sampled keys as `_split_points` hands them over: Spark's string form per key column,
    sorted by the typed key."""
    return [[str(v)] if not isinstance(v, tuple) else [str(x) for x in v] for v in values]


def test_nothing_to_split_without_samples_or_below_two_pieces():
    assert split_points([], 1_000, 100) == []
    assert split_points(keys(1, 2, 3), 0, 100) == []
    assert split_points(keys(1, 2, 3), 100, 100) == []       # one piece
    assert split_points(keys(7), 1_000, 100) == []           # one row sampled: nothing to cut at


def test_a_bucket_is_cut_into_pieces_of_about_the_target_size_at_sampled_keys():
    sample = keys(*range(1, 1001))
    points = split_points(sample, 1000, 100)
    assert len(points) == 9
    assert all(p in sample for p in points)
    cuts = [int(p[0]) for p in points]
    assert cuts == sorted(set(cuts)) and cuts[0] > 1
    sizes = [b - a for a, b in zip([1, *cuts], [*cuts, 1001])]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1000


def test_the_pieces_follow_the_rows_not_the_sample_size():
    # 64 sampled keys of a bucket of 1,000 rows, target 300: 4 pieces, 3 points.
    sample = keys(*range(0, 640, 10))
    assert [p[0] for p in split_points(sample, 1000, 300)] == ["160", "320", "480"]


def test_split_points_keep_the_typed_order_of_the_sample_never_string_order():
    # 9 < 10 as numbers, "9" > "10" as strings: the points come out in the sample's order.
    points = [int(p[0]) for p in split_points(keys(*range(1, 21)), 20, 5)]
    assert points == [6, 11, 16]


def test_a_key_repeated_in_the_sample_gives_one_point():
    # A key updated in the merge is in the sample twice (stored row + new record).
    sample = keys(1, 2, 2, 2, 2, 2, 2, 2, 2, 3)
    assert split_points(sample, 10, 2) == keys(2)            # 5 pieces wanted, cut at 2 four times
    assert split_points(keys(*[5] * 100), 100, 10) == []   # one hot key cannot be split


def test_a_point_never_equals_the_first_sampled_key_so_no_piece_is_empty():
    sample = keys(1, 1, 1, 1, 1, 1, 1, 1, 2, 3)
    assert split_points(sample, 10, 3) == keys(2)            # cuts at 1, 1 and 2: only 2 is kept


def test_composite_and_string_keys_split_on_whole_keys():
    sample = [["1", "a"], ["1", "b"], ["2", "a"], ["2", "b"], ["3", "a"], ["3", "b"]]
    assert split_points(sample, 6, 2) == [["2", "a"], ["3", "a"]]
    words = [[w] for w in sorted(f"user-{i:04d}" for i in range(400))]
    points = split_points(words, 400, 100)
    assert points == [["user-0100"], ["user-0200"], ["user-0300"]]


# -- the bucket list after a split ---------------------------------------------------------------
def test_split_points_become_new_buckets_right_after_the_bucket_they_cut():
    bounds = [None, ["100"], ["200"]]
    assert with_splits(bounds, {}) == [(None, 0), (["100"], 1), (["200"], 2)]
    assert with_splits(bounds, {0: [["40"], ["70"]], 2: [["300"]]}) == [
        (None, 0), (["40"], None), (["70"], None), (["100"], 1), (["200"], 2), (["300"], None)]


def test_after_a_split_each_key_stays_within_the_range_of_the_bucket_it_was_in():
    rnd = random.Random(3)
    table = sorted(rnd.sample(range(100_000), 5_000))
    bounds = [None, 20_000, 50_000, 90_000]
    before = {k: bucket(k, bounds) for k in table}
    sizes = {b: sum(1 for v in before.values() if v == b) for b in range(len(bounds))}
    big = oversized(sizes, 600)
    assert big  # the middle buckets hold over twice 600 keys
    samples = {b: [[str(k)] for k in table if before[k] == b] for b in big}
    splits = {b: split_points(samples[b], n, 600) for b, n in big.items()}
    entries = with_splits([None] + [[str(b)] for b in bounds[1:]], splits)
    new_bounds = [None if lo is None else int(lo[0]) for lo, _ in entries]
    assert new_bounds[1:] == sorted(set(new_bounds[1:]))
    owner, last = [], None
    for _, old in entries:  # the old bucket each new one came from
        last = old if old is not None else last
        owner.append(last)
    for k in table:
        assert owner[bucket(k, new_bounds)] == before[k]
    for b in big:  # each split bucket's keys are spread over pieces of about 600
        pieces = [sum(1 for k in table if bucket(k, new_bounds) == j) for j, o in enumerate(owner) if o == b]
        assert len(pieces) == -(-sizes[b] // 600) and max(pieces) <= 601


@pytest.mark.parametrize("order", ["rising", "random"])
def test_a_table_growing_past_the_limit_merge_after_merge_keeps_its_buckets_bounded(order):
    """Insert-only merges of 500 keys each, new ids (rising) or anywhere (random): a bucket splits
    once it passes twice the target, so after every merge each bucket holds 1 to 2x the target
    rows (sampling every key, as `_split_points` does for a bucket this small)."""
    target, bounds, table = 200, [None], []
    rnd = random.Random(11)
    fresh = list(range(15_000)) if order == "rising" else rnd.sample(range(10**6), 15_000)
    for merge in range(30):
        table = sorted(table + fresh[merge * 500:(merge + 1) * 500])
        members: dict[int, list[int]] = {}
        for k in table:  # reference(): the same bucket as bucket_search, in log2 time
            members.setdefault(reference(k, bounds), []).append(k)
        big = oversized({b: len(ks) for b, ks in members.items()}, target)
        splits = {b: split_points([[str(k)] for k in members[b]], n, target) for b, n in big.items()}
        bounds = [None if lo is None else int(lo[0])
                  for lo, _ in with_splits([None] + [[str(b)] for b in bounds[1:]], splits)]
        after = [0] * len(bounds)
        for k in table:
            after[reference(k, bounds)] += 1
        assert max(after) <= 2 * target and min(after) > 0, (merge, after)
    assert len(bounds) >= len(table) // (2 * target)
