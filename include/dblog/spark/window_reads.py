"""A dump window's split reads on Spark executors.

The driver (the dump's worker) plans the window's splits and writes its watermarks; between them
one Spark job reads the splits, one task each, and each task decodes its rows into a table of the
data columns in their staged types with the same driver and the same code as an in-process read
(`Source.select_chunk`, `staged.data_table`), so a value reads the same whichever path read it.
The tables come back to the driver, which stages the window as one chunk as always: the window
rule, the chunk format and the takeover rule are the in-process path's.

What Spark buys here is processes: decoding rows is Python work, and one process holds one core
however many threads read. A task that fails (a source restart, an executor lost) fails the
window; it is then retried as a whole (`WindowReadFailed` is transient).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from ..faults import crash_point
from ..schema import TableSchema
from ..sources.base import Source, SourceError, SourceUnavailable
from ..staged import data_table
from ..windows import Split

_TASK_OUT = "split int, data binary, error string, transient boolean"


class WindowReadFailed(SourceUnavailable):
    """A window's Spark job failed for a reason a retry of the whole window can ride out (an
    executor or its Python worker lost, a split's source connection gone)."""


class SparkWindowReader:
    """Reads a window's splits as one Spark job (see the module)."""

    def __init__(self, source: Source, spark: SparkSession):
        self.source, self.spark = source, spark

    def read(self, schema: TableSchema, splits: list[Split]) -> pa.Table:
        tasks = self.spark.range(len(splits), numPartitions=len(splits))
        read = _split_reader(self.source, schema, splits)
        try:
            out = tasks.mapInArrow(read, _TASK_OUT).toArrow()
        except Exception as exc:  # noqa: BLE001 - py4j and PySpark raise several kinds
            raise _job_failure(self.source, schema, len(splits), exc) from exc
        if sorted(out.column("split").to_pylist()) != list(range(len(splits))):
            # A window staged with a split missing would move its cursor past rows never read.
            raise WindowReadFailed(f"{self.source.name}: the Spark job reading {schema.name} returned splits "
                                   f"{sorted(out.column('split').to_pylist())} of {len(splits)}; read again")
        order = pc.sort_indices(out.column("split")).to_pylist()
        for i in order:
            if out.column("error")[i].is_valid:
                error = WindowReadFailed if out.column("transient")[i].as_py() else SourceError
                raise error(out.column("error")[i].as_py())
        # Read from the returned buffers as they are: a window is in memory once, not three times.
        tables = [pa.ipc.open_stream(out.column("data")[i].as_buffer()).read_all() for i in order]
        return pa.concat_tables(tables) if tables else data_table(schema, [])

    def close(self) -> None:
        """The session is the caller's (one per process, shared by its dumps)."""


# A lost executor or Python worker (killed, out of memory) is worth a retry of the window; any
# other failure of the job (results over spark.driver.maxResultSize, an executor that cannot
# import dblog or its drivers) would fail again the same way, and says what to fix.
_LOST = ("Python worker exited unexpectedly", "ExecutorLostFailure", "Connection reset", "worker crashed")


def _job_failure(source: Source, schema: TableSchema, splits: int, exc: Exception) -> SourceError:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    cause = next((ln for ln in lines if any(k in ln for k in _LOST)), None) or \
        next((ln for ln in reversed(lines) if ln.startswith(("Caused by", "org.apache.spark", "pyspark"))), None) or \
        (lines[0] if lines else type(exc).__name__)
    what = f"{source.name}: the Spark job reading {splits} split(s) of {schema.name} failed: {cause[:500]}"
    if any(k in ln for ln in lines for k in _LOST):
        return WindowReadFailed(f"{what}; the window is read again")
    return SourceError(f"{what}. Fix Spark's side (the dump's session: DBLOG_SPARK_MASTER, "
                       "DBLOG_SPARK_DRIVER_MEMORY; executors need dblog and the source's driver), or read in "
                       "the dump's process with DBLOG_DUMP_READER=threads; re-running the dump resumes it")


def _split_reader(source: Source, schema: TableSchema, splits: list[Split]):
    """The task function: the split numbered by each input row, read and encoded in the executor."""
    def read(batches):
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([_read_split(source, schema, splits[i], i)],
                                                 schema=_task_schema())
    return read


def _read_split(source: Source, schema: TableSchema, split: Split, index: int) -> dict:
    # A split's error travels back as text with its kind, so the driver raises what the source
    # raised (a restart: transient, retried; a refusal: not) instead of Spark's wrapper of it.
    # One connection per split: a few milliseconds against a split's read, and never a stale one.
    crash_point("dump.split_read")
    try:
        rows = source.select_chunk(schema, split.after, split.limit, split.upto)
        data = data_table(schema, rows)
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the driver
        return {"split": index, "data": None, "transient": source.transient(exc),
                "error": f"{source.name}: reading split {index + 1} of {schema.name} failed: {exc}"}
    finally:
        source.close()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return {"split": index, "data": sink.getvalue().to_pybytes(), "error": None, "transient": False}


def _task_schema() -> pa.Schema:
    return pa.schema([("split", pa.int32()), ("data", pa.binary()), ("error", pa.string()),
                      ("transient", pa.bool_())])
