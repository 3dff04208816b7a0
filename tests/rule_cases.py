"""Scenarios for the reconciliation and merge rules, shared by the Python and Spark tests.

Table T has key `id` and one column `v`. Positions are small integers; watermark events carry
their UUID-like value. Each case: log events (watermarks included), chunks (LW value, HW value,
rows: a key read, or `gone(key)`, a key-list dump's key the source does not have), and the rows
a user must see afterwards. `unlogged(n)` in a log marks a write the log holds without rows (a
statement-logged write, a TRUNCATE): the capture indexes its position (`dblog.coordination.unlogged`), it is
no event.
"""
from dblog.model.events import ChangeEvent
from dblog.model.positions import Position
from dblog.model.rules import Chunk, Window, blind_window, chunk_ready, merge_latest, ordered_output, visible_rows
from dblog.model.staged_format import ChunkRow, Op

T, WM = "app.t", "dblog.watermarks"


def pos(n: int) -> str:
    return Position(1, n, 0).encode()


def ev(n, key, op=Op.UPDATE, v=None, old=None, unchanged=()):
    after = None if op == Op.DELETE else {"id": key, "v": v if v is not None else f"log@{n}"}
    e = ChangeEvent("s", T, op, pos(n), (key,), after, before={"id": key, "v": None} if op == Op.DELETE else None,
                    old_key=None if old is None else (old,))
    e.unchanged = list(unchanged)
    return e


def wm(n, value):
    return ChangeEvent("s", WM, Op.UPDATE, pos(n), ("slot",), {"id": "slot", "value": value})


UNLOGGED = "unlogged"  # the op of a log entry that stands for a write logged without rows


def unlogged(n):
    return ChangeEvent("s", T, UNLOGGED, pos(n), (), None)


def events(log) -> list:
    """The log's events, the unlogged writes' marks left out."""
    return [e for e in log if e.op != UNLOGGED]


def unlogged_at(log) -> list[tuple[str, str]]:
    """The intervals the capture would index for the log's unlogged writes (one each)."""
    return [(e.position, e.position) for e in log if e.op == UNLOGGED]


def row(key, v) -> ChunkRow:
    return ChunkRow((key,), {"id": key, "v": v})


def gone(key) -> ChunkRow:
    return ChunkRow((key,), None)


def chunk(lw, hw, *rows):
    return (lw, hw, [r if isinstance(r, ChunkRow) else ChunkRow((r,), {"id": r, "v": f"chunk:{r}"}) for r in rows])


CASES = {
    "paper_k1_to_k6": (
        [ev(1, 2), wm(2, "lw"), ev(3, 1), ev(4, 3), wm(5, "hw"), ev(6, 4)],
        [chunk("lw", "hw", 1, 2, 3, 4, 5, 6)],
        {1: "log@3", 2: "chunk:2", 3: "log@4", 4: "log@6", 5: "chunk:5", 6: "chunk:6"}),
    "reference_41_42_43": (
        [wm(10, "lw"), ev(11, 42), wm(12, "hw")],
        [chunk("lw", "hw", 41, 42, 43)],
        {41: "chunk:41", 42: "log@11", 43: "chunk:43"}),
    "delete_and_reinsert_in_window": (
        [wm(1, "lw"), ev(2, 7, op=Op.DELETE), ev(3, 7, op=Op.INSERT, v="new"), wm(4, "hw")],
        [chunk("lw", "hw", 6, 7)],
        {6: "chunk:6", 7: "new"}),
    "key_update_in_window_touches_both_keys": (
        [wm(1, "lw"), ev(2, 9, old=3, v="moved"), wm(3, "hw")],
        [chunk("lw", "hw", 3, 5, 9)],
        {5: "chunk:5", 9: "moved"}),
    "a_later_delete_keeps_the_chunk_row_dead": (
        [wm(1, "lw"), wm(2, "hw"), ev(3, 1, op=Op.DELETE)],
        [chunk("lw", "hw", 1, 2)],
        {2: "chunk:2"}),
    "a_chunk_whose_hw_is_not_staged_waits": (
        [wm(1, "lw"), ev(2, 5, op=Op.INSERT, v="ins")],
        [chunk("lw", "hw-not-yet", 1, 2)],
        {5: "ins"}),
    "an_older_chunk_cannot_overwrite_a_newer_change": (
        [wm(1, "lw1"), wm(2, "hw1"), ev(3, 1, v="newer"), wm(4, "lw2"), wm(5, "hw2")],
        [chunk("lw2", "hw2", 2), chunk("lw1", "hw1", 1, 2)],
        {1: "newer", 2: "chunk:2"}),
    "unchanged_toast_value_keeps_the_previous_one": (
        [ev(1, 1, op=Op.INSERT, v="big"), ev(2, 1, v=None, unchanged=["v"])],
        [],
        {1: "big"}),
    "events_of_another_table_drop_nothing": (
        [wm(1, "lw"), ChangeEvent("s", "app.other", Op.UPDATE, pos(2), (1,), {"id": 1, "v": "x"}), wm(3, "hw")],
        [chunk("lw", "hw", 1)],
        {1: "chunk:1"}),
    # A statement-logged DELETE removed keys 4 and 6 without row events; the repair's key-list
    # dump finds them absent. Key 6 comes back inside the window: its insert wins.
    "a_key_list_dump_deletes_a_requested_key_the_source_does_not_have": (
        [ev(1, 4, op=Op.INSERT, v="stale"), ev(2, 5, op=Op.INSERT, v="old"), ev(3, 6, op=Op.INSERT, v="stale"),
         wm(4, "lw"), ev(5, 6, op=Op.INSERT, v="back"), wm(6, "hw")],
        [chunk("lw", "hw", gone(4), 5, gone(6))],
        {5: "chunk:5", 6: "back"}),
    # A statement-logged write at 4 deleted key 1 and changed key 2 inside a long window that read
    # both before it; the write's repair (lw2..hw2) read after it, and closed first. The long
    # window's rows, stamped at 7, must not win: the whole chunk is dropped.
    "a_window_holding_a_statement_logged_write_keeps_none_of_its_rows": (
        [ev(1, 1, op=Op.INSERT, v="a"), ev(2, 2, op=Op.INSERT, v="b"), wm(3, "lw"), unlogged(4), wm(5, "lw2"),
         wm(6, "hw2"), wm(7, "hw")],
        [chunk("lw", "hw", row(1, "a"), row(2, "b")), chunk("lw2", "hw2", gone(1), row(2, "b+1"))],
        {2: "b+1"}),
    "windows_before_and_after_a_statement_logged_write_keep_their_rows": (
        [wm(1, "lw1"), wm(2, "hw1"), unlogged(3), wm(4, "lw2"), ev(5, 2, v="log"), wm(6, "hw2")],
        [chunk("lw1", "hw1", 1), chunk("lw2", "hw2", 2, 3)],
        {1: "chunk:1", 2: "log", 3: "chunk:3"}),
}


def checkpoint(log) -> str:
    """The capture's checkpoint once the whole log is staged: its last position."""
    return max(e.position for e in log)


def python_visible(log, chunks) -> dict:
    """What a user sees after the Python rules: the paper's output order, merged, with the chunks
    ready once the whole log is staged."""
    upto, blind = checkpoint(log), unlogged_at(log)
    positions = {e.after["value"]: e.position for e in log if e.table == WM}
    windows = [(positions.get(lw), positions.get(hw), rows) for lw, hw, rows in chunks]
    ready = [Chunk(Window(T, low, high), tuple(rows)) for low, high, rows in windows
             if chunk_ready(low, high, upto) and not blind_window(low, high, blind)]
    state = merge_latest({}, ordered_output([e for e in events(log) if e.table in (T, WM)], ready,
                                            lambda e: e.table == WM))
    return {k[0]: row["v"] for k, row in visible_rows(state).items()}
