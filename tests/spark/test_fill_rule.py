"""The merge rule's fill of values an event leaves out: taken from what proves them, never guessed."""
from pyspark.sql import types as S

from dblog.merge.frame_rules import WINDOW, latest

RECORDS = S.StructType([S.StructField("id", S.LongType()), S.StructField("v", S.StringType()),
                        S.StructField("w", S.StringType()), S.StructField("_position", S.StringType()),
                        S.StructField("_op", S.StringType()), S.StructField("_origin", S.StringType()),
                        S.StructField("_dump_id", S.StringType()),
                        S.StructField("_unchanged", S.ArrayType(S.StringType())), S.StructField("_prio", S.IntegerType())])
STORED = 0  # `_prio` of a row read back from the warehouse (new records have 1)


def merged(spark, *records):
    """(id, v, w, _op, _missing) per key after the merge rule; a record may end with its `_prio`."""
    rows = [(i, v, w, pos, op, origin, None, unchanged, rest[0] if rest else 1)
            for i, v, w, pos, op, origin, unchanged, *rest in records]
    state = latest(spark.createDataFrame(rows, RECORDS), ["id"], ["id", "v", "w"])
    return {r["id"]: (r["v"], r["w"], r["_op"], r["_missing"]) for r in state.collect()}


def test_a_value_an_update_leaves_out_takes_the_key_s_previous_value(spark):
    out = merged(spark, (1, "a", "x", "01", "c", "log", None), (1, None, "y", "02", "u", "log", ["v"]))
    assert out[1] == ("a", "y", "u", None)


def test_a_value_behind_a_tombstone_is_unknown_and_listed_not_taken_from_the_deleted_row(spark):
    out = merged(spark, (1, "a", "x", "01", "c", "log", None), (1, "a", "x", "02", "d", "log", None),
                 (1, None, "y", "03", "c", "log", ["v"]))
    assert out[1] == (None, "y", "c", ["v"])


def test_a_value_nothing_older_proves_is_unknown_and_listed(spark):
    out = merged(spark, (1, None, None, "05", "u", "log", ["v", "w"]))
    assert out[1] == (None, None, "u", ["v", "w"])


def test_a_chunk_row_dropped_in_its_window_fills_the_window_s_update_but_never_becomes_the_row(spark):
    out = merged(spark, (1, "from chunk", "x", "10", "r", WINDOW, None), (1, None, "y", "11", "u", "log", ["v"]),
                 (2, "only a filler", "x", "10", "r", WINDOW, None))
    assert out == {1: ("from chunk", "y", "u", None)}


def test_a_stored_row_s_unknown_value_stays_unknown_whatever_older_record_arrives_later(spark):
    # The deletes before the stored row (position 11) are no longer in its history: a late chunk row
    # (position 10, from before a delete perhaps) must not fill it; its repair replaces the row.
    out = merged(spark, (1, None, "y", "11", "u", "log", ["v"], STORED), (1, "late", "x", "10", "r", WINDOW, None),
                 (1, "late", "x", "09", "r", "dump", None))
    assert out[1] == (None, "y", "u", ["v"])
    # A newer update that leaves the same column out must not reach past the stored row either.
    later = merged(spark, (1, None, "y", "11", "u", "log", ["v"], STORED), (1, "late", "x", "10", "r", WINDOW, None),
                   (1, None, "z", "12", "u", "log", ["v"]))
    assert later[1] == (None, "z", "u", ["v"])
    repaired = merged(spark, (1, None, "y", "11", "u", "log", ["v"], STORED), (1, "now", "y", "12", "r", "dump", None))
    assert repaired[1] == ("now", "y", "r", None)


def test_an_event_carrying_the_value_inside_the_window_wins_over_the_chunk_row(spark):
    out = merged(spark, (1, "stale", "x", "10", "r", WINDOW, None), (1, "new", "x", "11", "u", "log", None),
                 (1, None, "z", "12", "u", "log", ["v"]))
    assert out[1] == ("new", "z", "u", None)
