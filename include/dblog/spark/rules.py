"""The paper's rules on Spark DataFrames: the same rules as `dblog.rules`, in another shape.

`tests/spark/test_rules_agree.py` holds both to the same cases (`tests/rule_cases.py`). Inputs are
the staged log and chunk files as Spark reads them (`_position`, `_op`, `_old_key` struct,
`_unchanged`, `_lw`, `_hw`).
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

TOMBSTONES = ("d", "x")  # a deleted row; a key a repair dump found absent
WINDOW = "window"  # `_origin` of a chunk row dropped in its window, kept only to fill values (see `latest`)


def watermark_positions(watermark_log: DataFrame) -> DataFrame:
    """Watermark value (UUID) -> position of its staged event."""
    return (watermark_log.select(F.col("value").alias("_wm"), F.col("_position").alias("_wm_position"))
            .dropDuplicates(["_wm"]))


def with_windows(chunks: DataFrame, watermarks: DataFrame) -> DataFrame:
    """Chunk rows with their window (`_lw_position`, `_hw_position`). Rows whose high watermark
    is not staged yet drop out here: they are reconciled by a later run."""
    lw = watermarks.select(F.col("_wm").alias("_lw"), F.col("_wm_position").alias("_lw_position"))
    hw = watermarks.select(F.col("_wm").alias("_hw"), F.col("_wm_position").alias("_hw_position"))
    return chunks.join(F.broadcast(lw), "_lw").join(F.broadcast(hw), "_hw")


def touched(log: DataFrame, key: list[str]) -> DataFrame:
    """(key..., `_touched_at`) for every event; a primary-key update touches the old key too."""
    new = log.select(*key, F.col("_position").alias("_touched_at"))
    old = (log.where(F.col("_old_key").isNotNull())
           .select(*[F.col(f"_old_key.{k}").alias(k) for k in key], F.col("_position").alias("_touched_at")))
    return new.unionByName(old)


def window_survivors(chunks: DataFrame, log: DataFrame | None, watermarks: DataFrame, key: list[str]) -> DataFrame:
    """Chunk rows not touched by a same-table event strictly between LW and HW, stamped with
    HW's position (Algorithm 1, steps 6-7). `log` None: no event of the table was staged."""
    c = with_windows(chunks, watermarks)
    if log is not None:
        t = touched(log, key).alias("t")
        c = c.alias("c")
        hit = [F.col(f"c.{k}") == F.col(f"t.{k}") for k in key] + [
            F.col("t._touched_at") > F.col("c._lw_position"), F.col("t._touched_at") < F.col("c._hw_position")]
        c = c.join(t, hit, "left_anti")
    return c.withColumn("_position", F.col("_hw_position"))


def window_dropped(chunks: DataFrame, log: DataFrame, watermarks: DataFrame, key: list[str]) -> DataFrame:
    """The chunk rows `window_survivors` drops, stamped with LW's position. A row read inside the
    window holds every value the window's events leave out (an unchanged TOAST value, a partial
    row image) unless one of them carries it, so it can fill them; it never becomes the row."""
    c = with_windows(chunks, watermarks).alias("c")
    t = touched(log, key).alias("t")
    hit = [F.col(f"c.{k}") == F.col(f"t.{k}") for k in key] + [
        F.col("t._touched_at") > F.col("c._lw_position"), F.col("t._touched_at") < F.col("c._hw_position")]
    return c.join(t, hit, "left_semi").withColumn("_position", F.col("_lw_position"))


def fill_records(dropped: DataFrame, columns: list[str]) -> DataFrame:
    return dropped.select(*columns, "_position", "_op", _no_unchanged(), F.lit(WINDOW).alias("_origin"), _no_dump())


def _no_unchanged():
    return F.lit(None).cast("array<string>").alias("_unchanged")


def _no_dump():
    return F.lit(None).cast("string").alias("_dump_id")


def log_records(log: DataFrame, key: list[str], columns: list[str]) -> DataFrame:
    """Log events as records (`_origin` log); a key update also leaves a tombstone at its old key."""
    events = log.select(*columns, "_position", "_op", "_unchanged", F.lit("log").alias("_origin"), _no_dump())
    moved = (log.where(F.col("_old_key").isNotNull())
             .select(*[F.col(f"_old_key.{k}").alias(k) if k in key else F.lit(None).alias(k) for k in columns],
                     "_position", F.lit("d").alias("_op"), _no_unchanged(), F.lit("log").alias("_origin"), _no_dump()))
    return events.unionByName(moved, allowMissingColumns=True)


def dump_records(survivors: DataFrame, columns: list[str]) -> DataFrame:
    """Surviving chunk rows as records (`_origin` dump, `_dump_id`)."""
    dump_id = F.col("_dump_id") if "_dump_id" in survivors.columns else _no_dump()
    return survivors.select(*columns, "_position", "_op", _no_unchanged(), F.lit("dump").alias("_origin"),
                            dump_id.alias("_dump_id"))


def records(log: DataFrame, survivors: DataFrame, key: list[str], columns: list[str]) -> DataFrame:
    """Log events and surviving chunk rows as one record stream."""
    return log_records(log, key, columns).unionByName(dump_records(survivors, columns), allowMissingColumns=True)


def latest(recs: DataFrame, key: list[str], columns: list[str], carry: tuple[str, ...] = (),
           fill_unchanged: bool = True, within: tuple[str, ...] = ()) -> DataFrame:
    """Per key the record with the highest position (the merge rule), tombstones included.
    On equal positions (the same event merged twice) a lower `_prio`, when present, wins.

    Values an event leaves out (`_unchanged`: PostgreSQL's unchanged TOAST values, a MySQL
    partial row image) take the key's previous value (`fill_unchanged`; without any `_unchanged`
    list the fill is skipped, it costs a sort). A tombstone in between proves nothing: a value
    nothing proves stays null and is listed in `_missing` (never guessed); the merge asks for a
    repair of those keys, and a stored row (`_prio` 0) keeps it unknown until a newer record
    replaces the row. Window-fill records (`WINDOW`) only fill, they never win.
    `within`: columns that depend on the key only (a bucket): the windows reuse their partitioning.
    """
    meta = ["_position", "_op", "_origin", "_dump_id", *carry]
    prio = ["_prio"] if "_prio" in recs.columns else []
    values = [c for c in columns if c not in key]
    tomb = F.col("_op").isin(*TOMBSTONES)
    if fill_unchanged:
        history = Window.partitionBy(*within, *key).orderBy("_position").rowsBetween(Window.unboundedPreceding, 0)
        unchanged = F.coalesce(F.col("_unchanged"), F.array().cast("array<string>"))
        # A stored row's unknown value stays unknown, for it and for the records after it: the
        # deletes before it are no longer in its history, so an older record (a late chunk) could
        # hold a value from before one of them. It blocks like a tombstone, for that column.
        stored = (F.col("_prio") == 0) if prio else F.lit(False)

        def carrier(c: str):
            blocked = tomb | (stored & F.array_contains(unchanged, c))
            return F.when(blocked | ~F.array_contains(unchanged, c), F.struct(F.col(c).alias("v"), (~blocked).alias("k")))

        filled = [F.last(carrier(c), ignorenulls=True).over(history).alias(f"_f{i}") for i, c in enumerate(values)]
        recs = recs.select(*within, *key, *meta, *prio, *filled)
        known = [F.coalesce(F.col(f"_f{i}.k"), F.lit(False)) for i in range(len(values))]
        value_cols = [F.when(k, F.col(f"_f{i}.v")).alias(c) for i, (c, k) in enumerate(zip(values, known))]
        unknown = F.array_compact(F.array(*[F.when(~k, F.lit(c)) for c, k in zip(values, known)])) if values \
            else F.array().cast("array<string>")
        missing = F.when(~tomb & (F.size(unknown) > 0), unknown)
    else:
        value_cols = values
        missing = F.when(~tomb, F.col("_unchanged")) if "_unchanged" in recs.columns else F.lit(None)
    filler = F.col("_origin") == F.lit(WINDOW)
    order = [filler.asc(), F.col("_position").desc()] + [F.col(p) for p in prio]
    newest = Window.partitionBy(*within, *key).orderBy(*order)
    return (recs.select(*within, *key, *value_cols, *meta, *prio, missing.cast("array<string>").alias("_missing"))
            .withColumn("_rank", F.row_number().over(newest)).where((F.col("_rank") == 1) & ~filler)
            .select(*columns, *meta, "_missing", *within))


def visible(state: DataFrame) -> DataFrame:
    """What users query: tombstones hidden."""
    return state.where(~F.col("_op").isin(*TOMBSTONES))
