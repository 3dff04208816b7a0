"""A dump window's split reads on Spark executors.

The driver (the dump's worker) plans the window and writes its watermarks; between them one
Spark job reads the splits, one task each, and each task stages its split as a chunk file with
the same driver and the same code as an in-process read (`windows.SplitStaging`), so a value
reads the same whichever path read it, and no row travels through the driver. Only a few numbers
per split come back: how many rows it staged and the key it ends at.

What Spark buys here is processes: decoding rows is Python work, and one process holds one core
however many threads read. A split whose source read fails comes back as that failure; a job that
fails as a whole (an executor lost) is `WindowReadFailed`, transient: the dump then closes the
window with the splits that were staged and reads only the others again.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession

from ..model.schema import TableSchema
from ..sources.base import Source, SourceError, SourceUnavailable
from .windows import SplitRead, SplitStaging, WindowPlan

_TASK_OUT = pa.schema([("split", pa.int32()), ("rows", pa.int64()), ("key_to", pa.string()),
                       ("error", pa.string()), ("transient", pa.bool_()), ("fallback", pa.bool_()),
                       ("nbytes", pa.int64())])


class WindowReadFailed(SourceUnavailable):
    """A window's Spark job failed for a reason a retry can ride out (an executor or its Python
    worker lost, a split's source connection gone)."""


class SparkWindowReader:
    """Reads and stages a window's splits as one Spark job (see the module)."""

    def __init__(self, source: Source, spark: SparkSession):
        self.source, self.spark = source, spark

    def read(self, schema: TableSchema, plan: WindowPlan, stage: SplitStaging) -> list[SplitRead | Exception]:
        n = len(plan.splits)
        tasks = self.spark.range(n, numPartitions=n)
        try:
            out = tasks.mapInArrow(_split_reader(self.source, schema, plan, stage), _ddl(_TASK_OUT)).toArrow()
        except Exception as exc:  # noqa: BLE001 - py4j and PySpark raise several kinds
            raise _job_failure(self.source, schema, n, exc) from exc
        found = {r["split"]: r for r in out.to_pylist()}
        if sorted(found) != list(range(n)):
            # A split that never reported may or may not be staged: the dump closes the window from the files.
            raise WindowReadFailed(f"{self.source.name}: the Spark job reading {schema.name} returned splits "
                                   f"{sorted(found)} of {n}; the splits not staged are read again")
        return [_outcome(found[k]) for k in range(n)]

    def close(self) -> None:
        """The session is the caller's (one per process, shared by its dumps)."""


def _outcome(r: dict) -> SplitRead | Exception:
    if r["error"] is not None:
        return (WindowReadFailed if r["transient"] else SourceError)(r["error"])
    return SplitRead(r["split"], r["rows"], r["key_to"], r["fallback"], r["nbytes"])


# A lost executor or Python worker (killed, out of memory) is worth a retry; any other failure of
# the job (an executor that cannot import dblog or its drivers) would fail again the same way, and
# says what to fix.
_LOST = ("Python worker exited unexpectedly", "ExecutorLostFailure", "Connection reset", "worker crashed")


def _job_failure(source: Source, schema: TableSchema, splits: int, exc: Exception) -> SourceError:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    cause = next((ln for ln in lines if any(k in ln for k in _LOST)), None) or \
        next((ln for ln in reversed(lines) if ln.startswith(("Caused by", "org.apache.spark", "pyspark"))), None) or \
        (lines[0] if lines else type(exc).__name__)
    what = f"{source.name}: the Spark job reading {splits} split(s) of {schema.name} failed: {cause[:500]}"
    if any(k in ln for ln in lines for k in _LOST):
        return WindowReadFailed(f"{what}; the splits not staged are read again")
    return SourceError(f"{what}. Fix Spark's side (the dump's session: DBLOG_SPARK_MASTER, "
                       "DBLOG_SPARK_DRIVER_MEMORY; executors need dblog and the source's driver), or read in "
                       "the dump's process with DBLOG_DUMP_READER=threads; re-running the dump resumes it")


def _split_reader(source: Source, schema: TableSchema, plan: WindowPlan, stage: SplitStaging):
    """The task function: the split numbered by each input row, read and staged in the executor."""
    def read(batches):
        for batch in batches:
            for k in batch.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([_stage_split(source, schema, plan, stage, k)], schema=_TASK_OUT)
    return read


def _stage_split(source: Source, schema: TableSchema, plan: WindowPlan, stage: SplitStaging, k: int) -> dict:
    # A split's error travels back as text with its kind, so the driver raises what the source
    # raised (a restart: transient, retried; a refusal: not) instead of Spark's wrapper of it.
    # One connection per split: a few milliseconds against a split's read, and never a stale one.
    try:
        done = stage(source, schema, plan, k)
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the driver
        return {"split": k, "rows": 0, "key_to": None, "transient": source.transient(exc),
                "error": f"{source.name}: reading split {k + 1} of {schema.name} failed: {exc}", "fallback": False,
                "nbytes": 0}
    finally:
        source.close()
    return {"split": k, "rows": done.rows, "key_to": done.key_to, "error": None, "transient": False,
            "fallback": done.fallback, "nbytes": done.nbytes}


def _ddl(schema: pa.Schema) -> str:
    """The task output's schema as Spark's DDL (one definition, `_TASK_OUT`)."""
    names = {pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string", pa.bool_(): "boolean"}
    return ", ".join(f"{f.name} {names[f.type]}" for f in schema)
