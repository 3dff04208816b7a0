"""The paper's rules on Spark DataFrames: the same rules as `dblog.model.rules`, in another shape.

Inputs are the staged log and chunk files as Spark reads them (`staged`: `_position`, `_op`,
`_old_key` struct, `_unchanged`), chunk rows with their window's positions (`_lw_position`,
`_hw_position`: `records.with_windows`). `tests/spark/test_rules_agree.py` holds the merge's
composition of them (`records.merge_input`, then `merge.merge_records`) to the Python rules.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..model.staged_format import DUMP_ID, OLD_KEY, OP, POSITION, TOMBSTONES, UNCHANGED

WINDOW = "window"  # `_origin` of a chunk row dropped in its window, kept only to fill values (see `latest`)


def touched(log: DataFrame, key: list[str]) -> DataFrame:
    """(key..., `_touched_at`) for every event; a primary-key update touches the old key too."""
    new = log.select(*key, F.col(POSITION).alias("_touched_at"))
    old = (log.where(F.col(OLD_KEY).isNotNull())
           .select(*[F.col(f"{OLD_KEY}.{k}").alias(k) for k in key], F.col(POSITION).alias("_touched_at")))
    return new.unionByName(old)


def _touched_in_window(key: list[str]) -> list[Column]:
    """The join of chunk rows `c` with touches `t`: same key, strictly between LW and HW."""
    return [F.col(f"c.{k}") == F.col(f"t.{k}") for k in key] + [
        F.col("t._touched_at") > F.col("c._lw_position"), F.col("t._touched_at") < F.col("c._hw_position")]


def touched_in_windows(log: DataFrame, windows: DataFrame, key: list[str]) -> DataFrame:
    """(`_w`, key...) for every key an event touched strictly between a window's LW and HW
    (`windows`: `_w`, `_lw_position`, `_hw_position`): the keys whose chunk rows `window_dropped`
    finds, from the events alone, without reading the chunks."""
    t = touched(log, key)
    inside = (t["_touched_at"] > windows["_lw_position"]) & (t["_touched_at"] < windows["_hw_position"])
    return t.join(F.broadcast(windows), inside).select(windows["_w"], *[t[k] for k in key]).distinct()


def window_survivors(chunks: DataFrame, log: DataFrame | None, key: list[str]) -> DataFrame:
    """Chunk rows not touched by a same-table event strictly between LW and HW, stamped with
    HW's position (Algorithm 1, steps 6-7). `log` None: no event of the table was staged."""
    if log is not None:
        chunks = chunks.alias("c").join(touched(log, key).alias("t"), _touched_in_window(key), "left_anti")
    return chunks.withColumn(POSITION, F.col("_hw_position"))


def window_dropped(chunks: DataFrame, log: DataFrame, key: list[str]) -> DataFrame:
    """The chunk rows `window_survivors` drops, stamped with LW's position. A row read inside the
    window holds every value the window's events leave out (an unchanged TOAST value, a partial
    row image) unless one of them carries it, so it can fill them; it never becomes the row."""
    return (chunks.alias("c").join(touched(log, key).alias("t"), _touched_in_window(key), "left_semi")
            .withColumn(POSITION, F.col("_lw_position")))


def latest(recs: DataFrame, key: list[str], columns: list[str], carry: tuple[str, ...] = (),
           fill_unchanged: bool = True, within: tuple[str, ...] = (), unique: bool = False) -> DataFrame:
    """Per key the record with the highest position (the merge rule), tombstones included.
    On equal positions (the same event merged twice) a lower `_prio`, when present, wins.

    Values an event leaves out (`_unchanged`: PostgreSQL's unchanged TOAST values, a MySQL
    partial row image) take the key's previous value (`fill_unchanged`; without any `_unchanged`
    list the fill is skipped, it costs a sort). A tombstone in between proves nothing: a value
    nothing proves stays null and is listed in `_missing` (never guessed); the merge asks for a
    repair of those keys, and a stored row (`_prio` 0) keeps it unknown until a newer record
    replaces the row. Window-fill records (`WINDOW`) only fill, they never win.
    `within`: columns that depend on the key only (a bucket): the windows reuse their partitioning.
    `unique`: the caller knows each key has one record (`dblog.model.rules.disjoint_chunks`, nothing
    stored, no event): it is the latest, so the ranking (a sort of every record) is skipped.
    """
    if unique and fill_unchanged:
        raise ValueError("records unique per key have no earlier record to fill values from")
    meta = [POSITION, OP, "_origin", DUMP_ID, *carry]
    prio = ["_prio"] if "_prio" in recs.columns else []
    values = [c for c in columns if c not in key]
    tomb = F.col(OP).isin(*TOMBSTONES)
    if fill_unchanged:
        history = Window.partitionBy(*within, *key).orderBy(POSITION).rowsBetween(Window.unboundedPreceding, 0)
        unchanged = F.coalesce(F.col(UNCHANGED), F.array().cast("array<string>"))
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
        # A tombstone keeps the values its delete carried (a soft-delete table shows them).
        value_cols: list[Column | str] = [F.when(k | tomb, F.col(f"_f{i}.v")).alias(c)
                                          for i, (c, k) in enumerate(zip(values, known))]
        unknown = F.array_compact(F.array(*[F.when(~k, F.lit(c)) for c, k in zip(values, known)])) if values \
            else F.array().cast("array<string>")
        missing = F.when(~tomb & (F.size(unknown) > 0), unknown)
    else:
        value_cols = list(values)
        missing = F.when(~tomb, F.col(UNCHANGED)) if UNCHANGED in recs.columns else F.lit(None)
    filler = F.col("_origin") == F.lit(WINDOW)
    if unique:
        return recs.select(*columns, *meta, missing.cast("array<string>").alias("_missing"), *within).where(~filler)
    order = [filler.asc(), F.col(POSITION).desc()] + [F.col(p) for p in prio]
    newest = Window.partitionBy(*within, *key).orderBy(*order)
    return (recs.select(*within, *key, *value_cols, *meta, *prio, missing.cast("array<string>").alias("_missing"))
            .withColumn("_rank", F.row_number().over(newest)).where((F.col("_rank") == 1) & ~filler)
            .select(*columns, *meta, "_missing", *within))


def visible(state: DataFrame) -> DataFrame:
    """What users query: tombstones hidden."""
    return state.where(~F.col(OP).isin(*TOMBSTONES))
