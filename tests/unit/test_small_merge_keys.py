"""The small merge (`dblog.merge.small_merge`) takes out of Arrow only the stored rows at the
events' keys: whole keys, not rows that share each column's value with some event's key."""
from __future__ import annotations

import pyarrow as pa

from dblog.merge.small_merge import _at_keys


def test_stored_rows_at_the_events_keys_are_found_by_whole_composite_keys():
    stored = pa.table({"tenant": ["a", "a", "b", "b", None], "id": [1, 2, 1, 2, 1], "v": [10, 20, 30, 40, 50]})
    # ("a", 1) and ("b", 2): each column's values cover all four keys, the whole keys two of them
    assert _at_keys(stored, ["tenant", "id"], {("a", 1), ("b", 2)}).to_pylist() == [True, False, False, True, False]
    assert _at_keys(stored, ["tenant", "id"], {("c", 9)}).to_pylist() == [False] * 5


def test_stored_rows_at_the_events_keys_are_found_by_a_single_key_column():
    stored = pa.table({"id": pa.array([5, 6, 7], pa.int64()), "v": ["x", "y", "z"]})
    assert _at_keys(stored, ["id"], {(6,), (8,)}).to_pylist() == [False, True, False]
