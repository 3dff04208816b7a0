"""How a first load groups its chunks into buckets (`dblog.merge.first_load.group`)."""
import pytest

from dblog.merge.first_load import group


@pytest.mark.parametrize(("rows", "bucket_rows", "groups"), [
    ([3, 3, 3], 6, [[0, 1], [2]]), ([10, 1], 5, [[0], [1]]), ([2, 2, 2, 2], 100, [[0, 1, 2, 3]]), ([], 5, []),
])
def test_consecutive_chunks_are_grouped_into_buckets_of_about_bucket_rows(rows, bucket_rows, groups):
    assert group(rows, bucket_rows) == groups
