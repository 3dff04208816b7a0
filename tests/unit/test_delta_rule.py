"""When a merge changes its buckets in place, by position deletes, instead of rewriting them
(`dblog.merge.delta.qualifies`): the bounds on a bucket's files."""
from dblog.merge import delta
from dblog.warehouse.merged_state import Bucket, TableState

BUCKET_ROWS = 250_000


def _table(files: int, deletes: int = 0) -> TableState:
    buckets = [Bucket(i, None if i == 0 else [str(i * BUCKET_ROWS)], rows=BUCKET_ROWS, files=[object()] * files,
                      deletes=[object()] * deletes) for i in range(4)]
    return TableState("s", "app.t", ["id"], [("id", "bigint"), ("v", "string")], buckets)


def _in_place(table: TableState) -> bool:
    return delta.qualifies(table, {0: 100, 3: 100}, ratio=20, oversized={}, bucket_rows=BUCKET_ROWS)


def test_buckets_adopted_with_a_file_per_chunk_are_still_changed_in_place():
    assert _in_place(_table(files=1))
    assert _in_place(_table(files=BUCKET_ROWS // 20_000 + 1))   # an adopted first load's, at the defaults


def test_a_bucket_changed_in_place_eight_times_or_made_of_32_files_is_rewritten():
    assert _in_place(_table(files=1, deletes=delta.MAX_DELETES - 1))
    assert not _in_place(_table(files=1, deletes=delta.MAX_DELETES))
    assert not _in_place(_table(files=delta.MAX_FILES))
