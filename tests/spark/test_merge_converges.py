"""Invariant 6 through Spark: the warehouse equals its source after dumps under concurrent writes."""
from dblog.merge.job import merge_source

from conftest import assert_warehouse_equals_source, settle


def merge(spark, src, warehouse, **options):
    with src.store() as store:
        return merge_source(spark, store, src.staged(), warehouse, src.source_id, **options)


def test_merges_at_arbitrary_moments_during_a_dump_under_writes_converge_to_the_source(src, spark, warehouse):
    src.workload(seed=11).create()
    src.start_capture()
    writer = src.spawn_workload(seconds=3600, seed=12)
    dump = src.spawn("dump", "--source", src.source_id, "--all", "--chunk-size", "53", "--delay", "0.01")
    merges = []
    while dump.poll() is None:  # merge again and again while the dump and the writer run
        merges += merge(spark, src, warehouse, bucket_rows=400)
    assert dump.returncode == 0, dump.stderr.read()
    writer.terminate(); writer.wait()
    settle(src)
    merges += merge(spark, src, warehouse, bucket_rows=400)
    assert_warehouse_equals_source(src, warehouse)
    assert len(merges) >= 4
    assert sum(m.dropped for m in merges) >= 0
    # Small buckets: the table was split into many key ranges and later merges rewrote only some.
    last = {m.table: m for m in merges if m.snapshot_id}
    assert all(m.buckets > 2 for m in last.values())
    print(src.kind, [(m.table, m.log_events, m.survivors, m.dropped, m.buckets_written, m.buckets) for m in merges])
