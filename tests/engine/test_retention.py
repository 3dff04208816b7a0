"""Retention and compaction of a real staged log (capture, dumps, ZooKeeper): what readers see does
not change, a running dump keeps what it needs, `export --from` fails as before past the bound.
The warehouse is stood in for (it says what it merged; tests/spark/test_retention_merge.py merges)."""
from __future__ import annotations

import json

from dblog.coordination import store as paths
from dblog.coordination.watermark_index import staged_positions
from dblog.model.staged_format import ChunkMeta
from dblog.operations.staged_maintenance import maintain_staged, size_text, staged_usage
from dblog.operations.verify import compare

from conftest import checkpoint, settle, wait_for
from staged_fakes import MergedWarehouse

EVERY_SMALL_SEGMENT = {"compact_min_segments": 2, "compact_bytes": 1 << 20}


def test_an_export_from_a_retained_position_is_the_same_after_compaction_and_retention_and_an_older_one_fails_as_before(
        src):
    w = src.workload(seed=70, rows=300)
    w.create()
    w.next_id = 1_000_000   # keys its key updates move rows to, apart from the spawned writer's
    src.start_capture()
    w.run(seconds=0.5)
    writer = src.spawn_workload(seconds=3600, seed=71, rows=300)
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "40", check=True)
    writer.terminate(); writer.wait()
    staged, table = src.staged(), src.table("accounts")

    def export(*args: str):
        return src.dblog("export", "--source", src.source_id, "--table", "accounts", *args)

    def phase(seconds: float) -> tuple[str, str, str]:
        """Writes after a settled point: (that point, the first position after it, the export from there)."""
        settle(src)
        point = checkpoint(src)
        w.run(seconds=seconds)
        settle(src)
        start = next(json.loads(line)["position"] for line in export().stdout.splitlines()
                     if json.loads(line)["position"] > point)
        return point, start, export("--from", start).stdout

    _, start, tail = phase(0.5)
    full = export().stdout
    with src.store() as store:
        compacted = maintain_staged(store, staged, MergedWarehouse(None), src.source_id, **EVERY_SMALL_SEGMENT)
        assert compacted.segments_compacted > compacted.compacted_into > 0 and compacted.segments_removed == 0
        assert export().stdout == full and export("--from", start).stdout == tail

        merged_upto, later, later_tail = phase(2.5)   # the warehouse merged the dump and the log up to here
        chunks = len(staged.chunk_files(src.source_id, table))
        retained = maintain_staged(store, staged, MergedWarehouse.of_everything(staged, src.source_id, merged_upto),
                                   src.source_id, window_seconds=0, replaced_grace_seconds=0, **EVERY_SMALL_SEGMENT)
    assert retained.segments_removed > 0 and retained.segments_compacted > 0
    assert (retained.dumps_removed, retained.chunk_files_removed) == (1, chunks)
    assert staged.chunk_files(src.source_id, table) == []
    oldest = staged_usage(staged, src.source_id).tables[table]["oldest"]
    assert start < oldest <= later, "what the warehouse has not merged stays"
    assert export("--from", later).stdout == later_tail
    assert export("--from", oldest).returncode == 0
    refused = export("--from", start)
    assert refused.returncode == 2
    assert f"position {start} is no longer in the staged log (oldest {oldest}); export from a later position, or " \
           "run a dump of the table to start afresh" in refused.stderr


def test_a_running_dump_keeps_its_chunk_files_and_watermarks_and_they_go_once_it_ended_and_is_merged(mariadb):
    w = mariadb.workload(seed=72, rows=200)
    w.create()
    mariadb.start_capture()
    source, table = mariadb.source_id, mariadb.table("accounts")
    dump_id = mariadb.dblog("dump", "--source", source, "--table", "accounts", "--chunk-size", "10", "--delay",
                            "3600", "--create-only", check=True).stdout.strip()
    worker = mariadb.spawn("dump", "run", dump_id, "--source", source)   # waits an hour after its first chunk
    store, staged = mariadb.store(), mariadb.staged()
    progress = paths.table_progress_path(source, dump_id, table)
    wait_for(lambda: (store.get(progress) or {}).get("chunks", 0) >= 1, 60, what="the dump's first chunk")
    w.run(seconds=2.5)   # a few flushes: several segments per table
    settle(mariadb)
    [chunk] = staged.chunk_files(source, table)
    meta = ChunkMeta.of(staged.read_chunk(chunk))
    assert meta is not None
    accounts = staged.read_log(source, table)
    # Even with its chunk merged and no window at all, a dump that may still stage keeps everything.
    everything = MergedWarehouse.of_everything(staged, source, checkpoint(mariadb))
    report = maintain_staged(store, staged, everything, source, window_seconds=0, replaced_grace_seconds=0,
                             **EVERY_SMALL_SEGMENT)
    assert report.dumps_removed == 0 and staged.chunk_files(source, table) == [chunk]
    assert {meta.lw, meta.hw} <= set(staged_positions(staged, source))
    assert staged.read_log(source, table) == accounts
    assert report.segments_removed > 0, "order_lines, which the dump does not read, lost its merged segments"

    mariadb.dblog("dump", "cancel", dump_id, "--source", source, check=True)
    assert worker.wait(60) == 0, worker.stderr.read()
    w.run(seconds=0.3)
    settle(mariadb)
    everything = MergedWarehouse.of_everything(staged, source, checkpoint(mariadb))
    report = maintain_staged(store, staged, everything, source, window_seconds=0, replaced_grace_seconds=0,
                             **EVERY_SMALL_SEGMENT)
    assert (report.dumps_removed, report.chunk_files_removed) == (1, 1)
    assert staged.chunk_files(source, table) == [] and store.get(paths.dump_path(source, dump_id)) is None
    assert meta.lw not in staged_positions(staged, source)
    store.stop()


def test_compaction_keeps_columns_added_over_time_and_the_staged_log_still_rebuilds_the_source(postgres):
    w = postgres.workload(seed=73, rows=100)
    w.create()
    postgres.start_capture()
    w.run(seconds=0.3)
    settle(postgres)
    source, table = postgres.source_id, postgres.table("accounts")
    postgres.sql(f"ALTER TABLE {table} ADD COLUMN tier VARCHAR(8) NULL", f"UPDATE {table} SET tier = 'gold' WHERE id % 7 = 0")
    postgres.sql(f"ALTER TABLE {table} ADD COLUMN score BIGINT NULL", f"UPDATE {table} SET score = id * 1000 WHERE id % 5 = 0")
    w.run(seconds=0.3)
    postgres.dblog("dump", "--source", source, "--table", "accounts", "--chunk-size", "30", check=True)
    settle(postgres)
    staged = postgres.staged()
    before, listed = staged.read_log(source, table), staged.segments(source, table)
    with postgres.store() as store:
        report = maintain_staged(store, staged, MergedWarehouse(None), source, **EVERY_SMALL_SEGMENT)
    assert report.segments_compacted > 0 and report.segments_removed == 0
    after = staged.read_log(source, table)
    assert sorted(after.schema, key=str) == sorted(before.schema, key=str)
    assert after.to_pylist() == before.to_pylist()
    first = staged.segments(source, table)[0]
    assert first not in listed and {"tier", "score"} <= set(staged.read_chunk(first).column_names)
    assert staged.read_chunk(first).num_rows > 0 and len(staged.segments(source, table)) < len(listed)
    assert compare(postgres.source(), staged, table, checkpoint(postgres)).equal
    shown = staged_usage(staged, source)
    status = postgres.dblog("status", "--source", source, check=True).stdout
    assert f"  staged log: {shown.files} file(s), {size_text(shown.bytes)}, oldest retained position {shown.oldest}" \
        in status.splitlines()
    as_json = json.loads(postgres.dblog("status", "--source", source, "--json", check=True).stdout)[source]["staged"]
    assert (as_json["files"], as_json["oldest"], as_json["tables"][table]["segments"]) == (
        shown.files, shown.oldest, shown.tables[table]["segments"])
