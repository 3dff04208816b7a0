"""The capture tunes the process's garbage collector while it reads (`capture_loop._fewer_collections`):
captures overlapping in one process restore it only when the last ends, and what the process set
itself (its own freeze, collection turned off) is left as it was."""
from __future__ import annotations

import gc

from dblog.capture.capture_loop import _fewer_collections


def test_overlapping_captures_restore_the_collector_only_when_the_last_one_ends():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert frozen == 0, "this test needs a process that froze nothing itself"
    second = _fewer_collections()
    with _fewer_collections():
        assert gc.get_threshold()[0] >= 50_000 and gc.get_freeze_count() > frozen
        second.__enter__()
    assert gc.get_threshold()[0] >= 50_000, "the first capture's end restored the collector under the second"
    second.__exit__(None, None, None)
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, frozen)


def test_a_process_that_froze_objects_itself_keeps_its_freeze():
    gc.freeze()
    try:
        with _fewer_collections():
            pass
        # (the count itself drifts: a frozen object other threads free leaves the permanent generation)
        assert gc.get_freeze_count() > 0, "the capture's end unfroze what the process had frozen"
    finally:
        gc.unfreeze()


def test_collection_turned_off_stays_off_while_a_capture_reads():
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with _fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
