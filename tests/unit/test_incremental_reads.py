"""The pure parts of the per-merge cost work: where a watermark's position is indexed, which
staged rows index one, when a finished dump's chunks are all merged, and which dump directories
a merge lists. No services (an in-memory state store, empty files as staged chunks)."""
from __future__ import annotations

import re
from dataclasses import asdict

from dblog.coordination import store as paths
from dblog.coordination.watermark_index import written
from dblog.merge.job import MergeInputs, _pending_chunks
from dblog.model.staged_format import OP, POSITION, ChunkFile
from dblog.snapshot.dump import CANCELLED, DONE, PENDING, RUNNING, TableProgress, chunk_numbers_below
from dblog.stagedlog.staged_log import StagedLog
from dblog.warehouse.merged_state import TableState

NODE_NAME = re.compile(r"^[^/\x00-\x1f\x7f-\x9f]+$")


def test_a_watermark_id_is_indexed_under_one_stable_shard_with_its_uuid_as_the_node_name():
    uuid = "0b7c55a2-3f0e-4a4b-9f1e-2d1c3b4a5e6f"
    path = paths.watermark_path("src", uuid)
    assert path == paths.watermark_path("src", uuid)
    root, shard, name = path.rsplit("/", 2)
    assert root == paths.watermark_index_path("src") and re.fullmatch(r"[0-9a-f]{2}", shard) and name == uuid


def test_any_watermark_value_becomes_one_valid_zookeeper_node_name():
    for value in (".", "..", "a/b", "../../etc", "tab\there", "ünï", "100%"):
        name = paths.watermark_path("src", value).rsplit("/", 1)[1]
        assert name not in (".", "..") and NODE_NAME.match(name), (value, name)
    assert paths.watermark_path("src", "a/b") != paths.watermark_path("src", "a%2Fb")


def test_the_index_takes_the_event_that_wrote_each_watermark_not_a_later_delete_of_its_row():
    rows = [{"id": "d:s", "value": "lw", OP: "c", POSITION: "p1"},
            {"id": "d:s", "value": "hw", OP: "u", POSITION: "p2"},
            {"id": "d:s", "value": "hw", OP: "u", POSITION: "p2"},    # re-staged after a crash
            {"id": "d:s", "value": "hw", OP: "d", POSITION: "p3"},    # a clean-up of the row
            {"id": "d:t", "value": None, OP: "u", POSITION: "p4"},
            {"id": "d:t", "value": "", OP: "u", POSITION: "p5"}]
    assert written(rows) == {"lw": "p1", "hw": "p2"}


def test_a_finished_dump_numbers_every_chunk_file_below_its_next_chunk():
    assert chunk_numbers_below(TableProgress("s.t", status=DONE, chunks=3, next_chunk=5)) == 5  # a takeover skipped one
    assert chunk_numbers_below(TableProgress("s.t", status=DONE, chunks=3)) == 3  # a record without next_chunk
    assert chunk_numbers_below(TableProgress("s.t", status=CANCELLED, chunks=2, next_chunk=2)) == 2
    assert chunk_numbers_below(TableProgress("s.t", status=DONE)) == 0  # an empty table
    for status in (PENDING, RUNNING):
        assert chunk_numbers_below(TableProgress("s.t", status=status, chunks=3, next_chunk=3)) is None


def test_a_dump_is_merged_below_a_count_only_when_every_number_under_it_is():
    state = TableState("s", "t", ["id"], [], chunks={"d": [[0, 4]], "gap": [[0, 2], [4, 5]], "late": [[1, 3]],
                                                     "messy": [[3, 5], [0, 2]]})
    assert state.merged_below("d", 5) and not state.merged_below("d", 6)
    assert not state.merged_below("gap", 6) and state.merged_below("gap", 3)
    assert not state.merged_below("late", 4)
    assert state.merged_below("messy", 6)
    assert state.merged_below("none", 0) and not state.merged_below("none", 1)


def test_chunk_counts_round_trip_through_the_snapshot_summary_and_older_summaries_have_none():
    state = TableState("s", "t", ["id"], [], log_upto="p9", chunks={"d": [[0, 3]]}, chunk_counts={"d": 4})
    assert TableState.from_properties("s", "t", ["id"], [], state.properties()).chunk_counts == {"d": 4}
    older = {k: v for k, v in state.properties().items() if k != "dblog.chunk-counts"}
    assert TableState.from_properties("s", "t", ["id"], [], older).chunk_counts == {}


class MemoryStore:
    def __init__(self, nodes: dict):
        self.nodes = nodes

    def get(self, path):
        return self.nodes.get(path)


class ListingLog(StagedLog):
    """Records which dump directories the merge lists files in (and refuses a recursive listing)."""
    listed: list

    def chunk_files(self, source, table, dump_id=None):
        assert dump_id is not None, "the merge listed every chunk file of the table"
        self.listed.append(dump_id)
        return super().chunk_files(source, table, dump_id)


def _staged(tmp_path, files: dict[str, list[int]]) -> ListingLog:
    staged = ListingLog(str(tmp_path))
    staged.listed = []
    for dump_id, numbers in files.items():
        directory = tmp_path / "s" / "chunks" / "s.t" / dump_id
        directory.mkdir(parents=True)
        for n in numbers:
            (directory / ChunkFile(dump_id, n).name).write_bytes(b"")
    return staged


def _progress(dump_id: str, **fields) -> tuple[str, dict]:
    return paths.table_progress_path("s", dump_id, "s.t"), asdict(TableProgress("s.t", **fields))


def test_a_merge_lists_only_the_dumps_that_may_still_have_chunks_to_merge(tmp_path):
    staged = _staged(tmp_path, {"done": [0, 1, 2], "running": [0, 1], "gap": [0, 1, 3], "gone": [0, 1],
                                "new": [0], "partly": [0, 1, 2]})
    store = MemoryStore(dict([_progress("done", status=DONE, chunks=3, next_chunk=3),
                              _progress("running", status=RUNNING, chunks=2, next_chunk=2),
                              _progress("gap", status=DONE, chunks=3, next_chunk=4),
                              _progress("partly", status=DONE, chunks=3, next_chunk=3)]))
    merged = {"done": [[0, 2]], "running": [[0, 1]], "gap": [[0, 1], [3, 3]], "gone": [[0, 1]], "partly": [[0, 1]]}
    state = TableState("s", "s.t", ["id"], [], chunks=merged, chunk_counts={"gone": 2})
    out = MergeInputs()
    pending = _pending_chunks(store, staged, "s", "s.t", state, out)
    # "done" is finished with all three merged; "gone" (its record deleted, as a landed repair's)
    # was counted by an earlier merge. Every other dump is listed; only unmerged files are pending.
    assert sorted(staged.listed) == ["gap", "new", "partly", "running"]
    assert set(pending) == {ChunkFile("new", 0), ChunkFile("partly", 2)}
    assert out.chunk_counts == {"done": 3, "gap": 4, "partly": 3}  # what the next commit keeps


def test_a_table_never_merged_lists_every_dump(tmp_path):
    staged = _staged(tmp_path, {"a": [0, 1], "b": [0]})
    store = MemoryStore(dict([_progress("a", status=DONE, chunks=2, next_chunk=2)]))
    out = MergeInputs()
    pending = _pending_chunks(store, staged, "s", "s.t", None, out)
    assert sorted(staged.listed) == ["a", "b"] and len(pending) == 3
    assert out.chunk_counts == {"a": 2}  # kept by the table's first commit
