"""`dblog export`: the reconciled change stream in the paper's order, replayable into the table."""
import json

from dblog.model.rules import DumpRecord, merge_latest, visible_rows
from dblog.operations.verify import compare, source_rows

from conftest import checkpoint, settle


def test_the_exported_stream_is_ordered_complete_and_replays_into_the_source_table(src):
    src.workload(seed=20, rows=300).create()
    src.start_capture()
    # Changes before the dump's first watermark belong to the stream too (a key update among them).
    src.sql(f"UPDATE {src.table('accounts')} SET name = 'before-dump' WHERE id <= 5",
            f"UPDATE {src.table('accounts')} SET id = 99999 WHERE id = 6")
    writer = src.spawn_workload(seconds=3600, seed=21, rows=300)
    src.dblog("dump", "--source", src.source_id, "--table", "accounts", "--chunk-size", "25", check=True)
    writer.terminate(); writer.wait()
    settle(src)
    result = src.dblog("export", "--source", src.source_id, "--table", "accounts", check=True)
    lines = [json.loads(l) for l in result.stdout.splitlines()]
    positions = [l["position"] for l in lines]
    assert positions == sorted(positions)
    assert {l["origin"] for l in lines} == {"log", "dump"}
    staged_events = src.staged().read_log(src.source_id, src.table("accounts")).num_rows
    assert sum(l["origin"] == "log" for l in lines) == staged_events, "every staged event is in the stream"
    assert all(l["txid"] and l["commit_ts"] for l in lines if l["origin"] == "log")
    # Replaying the stream with the merge rule gives the source table (compared on keys here;
    # values round-trip through JSON).
    state = {}
    for l in lines:
        key = tuple(l["key"].values())
        if l["origin"] == "dump":
            merge_latest(state, [DumpRecord("t", l["position"], key, l["row"])])
        elif l["old_key"] and tuple(l["old_key"].values()) != key:
            merge_latest(state, [DumpRecord("t", l["position"], tuple(l["old_key"].values()), None),
                                 DumpRecord("t", l["position"], key, l["row"])])
        else:
            merge_latest(state, [DumpRecord("t", l["position"], key, None if l["op"] == "d" else l["row"])])
    source = src.source()
    expected = source_rows(source, source.table_schema(src.table("accounts")))
    assert set(visible_rows(state)) == set(expected)
    assert compare(source, src.staged(), src.table("accounts"), checkpoint(src)).equal


def test_export_from_a_position_starts_there_and_a_bad_table_is_refused(src):
    src.workload(seed=22, rows=50).create()
    src.start_capture()
    src.workload(seed=23, rows=50).run(seconds=0.3)
    settle(src)
    full = src.dblog("export", "--source", src.source_id, "--table", "accounts", check=True).stdout.splitlines()
    middle = json.loads(full[len(full) // 2])["position"]
    tail = src.dblog("export", "--source", src.source_id, "--table", "accounts", "--from", middle,
                     check=True).stdout.splitlines()
    assert tail == full[len(full) // 2:]
    bad = src.dblog("export", "--source", src.source_id, "--table", "nosuch")
    assert bad.returncode == 2 and "no staged log for" in bad.stderr


def test_a_chunk_whose_hw_is_staged_before_its_window_s_events_is_not_exported_until_checkpointed(mariadb):
    """The capture stages one table after another: killed between two (a named crash point),
    the HW is staged while the update inside the window is not. Export must wait for the
    checkpoint (rules.chunk_ready), or it emits the chunk's stale row after the HW."""
    import datetime as dt
    import uuid

    from dblog.coordination.watermark_index import staged_positions
    from dblog.model.staged_format import ChunkMeta, Op

    mariadb.workload(seed=61, rows=20).create()
    table = mariadb.table("accounts")
    first = mariadb.start_capture()
    mariadb.sql(f"UPDATE {table} SET name = 'staged before' WHERE id = 2")
    settle(mariadb)
    first.terminate(); first.wait()
    # A dump's steps, with a write inside its window: LW, the chunk read, an update of key 1, HW.
    source, staged = mariadb.source(), mariadb.staged()
    schema = source.table_schema(table)
    lw, hw = str(uuid.uuid4()), str(uuid.uuid4())
    source.write_watermark("race", lw)
    rows = source.select_chunk(schema, None, 1000)
    mariadb.sql(f"UPDATE {table} SET name = 'changed in the window' WHERE id = 1")
    source.write_watermark("race", hw)
    staged.write_chunk(mariadb.source_id, schema, ChunkMeta("race", 0, lw, hw, dt.datetime.now(dt.UTC),
                                                            key_to="[20]"), rows, [Op.READ] * len(rows))
    # The capture's first flush holds all of it; it stages the watermark table first, then dies.
    capture = mariadb.spawn("capture", "--source", mariadb.source_id, env={"DBLOG_CRASH_AT": "capture.mid_flush@1"})
    assert capture.wait(timeout=120) == -9, capture.stderr.read()
    assert hw in staged_positions(staged, mariadb.source_id), "the crash came before the HW was staged"

    def exported() -> list[dict]:
        out = mariadb.dblog("export", "--source", mariadb.source_id, "--table", "accounts", check=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    assert not [r for r in exported() if r["origin"] == "dump"], "a chunk was exported before its window was staged"
    mariadb.spawn("capture", "--source", mariadb.source_id)
    settle(mariadb)
    records = exported()
    last = [r for r in records if r["key"] == {"id": 1}][-1]
    assert last["origin"] == "log" and last["row"]["name"] == "changed in the window"
    assert len([r for r in records if r["origin"] == "dump"]) == 19, "every other chunk row survives"
