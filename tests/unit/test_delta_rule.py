"""When a merge changes its buckets in place, by position deletes, instead of rewriting them
(`dblog.merge.delta.qualifies`): the bounds on a bucket's files."""
from types import SimpleNamespace

from dblog.merge import delta
from dblog.warehouse.merged_state import Bucket, TableState

BUCKET_ROWS = 250_000


def _table(files: int, deletes: int = 0, deleted: int = 1) -> TableState:
    buckets = [Bucket(i, None if i == 0 else [str(i * BUCKET_ROWS)], rows=BUCKET_ROWS,
                      files=[SimpleNamespace(file_path=f"b/{n}.parquet", record_count=1) for n in range(files)],
                      deletes=[SimpleNamespace(record_count=deleted)] * deletes) for i in range(4)]
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


def test_a_bucket_whose_rows_deleted_in_place_pass_a_ratio_th_of_it_is_rewritten():
    """The driver's in-place merges keep one delete file a bucket (`local_delta`): what bounds
    them is the rows it names."""
    assert _in_place(_table(files=2, deletes=1, deleted=BUCKET_ROWS // 20))
    assert not _in_place(_table(files=2, deletes=1, deleted=BUCKET_ROWS // 20 + 1))


def test_a_bucket_whose_delta_file_passes_a_ratio_th_of_it_is_rewritten():
    """Inserts grow a bucket's delta file without deleting a stored row: each driver's merge
    reads and rewrites it, so it is bounded too."""
    table = _table(files=2)
    for b in table.buckets:
        b.files.append(SimpleNamespace(file_path=f"b/{delta.DELTA}1-0.parquet", record_count=BUCKET_ROWS // 20))
    assert _in_place(table)
    for b in table.buckets:
        b.files[-1].record_count += 1
    assert not _in_place(table)


def test_a_busy_table_s_hundred_thousand_changes_stay_in_place_and_the_record_bound_or_ratio_then_rewrites():
    ten_million = TableState("s", "app.t", ["id"], [("id", "bigint")],
                             [Bucket(i, None if i == 0 else [str(i * BUCKET_ROWS)], rows=BUCKET_ROWS, files=[SimpleNamespace(file_path="b/0.parquet", record_count=1)])
                              for i in range(40)])

    def in_place(table: TableState, records: int) -> bool:
        per = records // len(table.buckets)
        return delta.qualifies(table, {b: per for b in range(len(table.buckets))}, ratio=20, oversized={},
                               bucket_rows=BUCKET_ROWS)
    assert in_place(ten_million, 100_000)   # ~90,000: 24.5 s in place, 40.7 s rewritten (docs/performance.md)
    assert not in_place(ten_million, delta.MAX_RECORDS + 40)
    one_million = TableState("s", "app.t", ["id"], [("id", "bigint")], ten_million.buckets[:4])
    assert in_place(one_million, 40_000) and not in_place(one_million, 60_000)   # a 20th of its rows
