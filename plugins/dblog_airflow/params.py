"""The DAGs' params and the checks of a run's conf, in one place: what the trigger form offers
(`*_param()` factories, one per param name, the same name, type, title and description in every
DAG that takes it) beside the rules the tasks hold the rendered values to (`value_rules`,
`conf_problems`, `check_run`).

A task checks its run first and fails at once (no retry), before anything is written, with a
message naming the problem and the fix (`check_run`, `fail`): a conf key the DAG does not declare
(a misspelling would otherwise fall back to the param's default), or a value out of range.

Numeric params carry their range in their description, not as JSON-schema `minimum`/`maximum`:
Airflow's trigger form hands those to its number input, which clamps an out-of-range entry on
blur (0 became 1 silently); the range is enforced by the task instead, where it can say what to fix.

DAG files import this module when they are parsed: it loads Airflow's `Param` and the engine's
settings only. The engine's dump rules (`dblog.snapshot.dump_spec`, which loads the sources and
pyarrow) are imported by the functions that run in a task.
"""
from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from dblog.settings import DUMP_ID, settings

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator

    from dblog.snapshot.dump_spec import DumpSpec

ALL_SOURCES = "all"   # the `source` param of the DAGs that cover every source by default
DUMP_ACTIONS = ("status", "pause", "resume", "cancel", "throttle")   # dblog_dump_control's `action`

Rule = tuple[Callable[[Any], bool], str]   # (accepted?, what to set instead)


# -- params: the same names, types and descriptions in every DAG that takes them -----------------
# No `minimum`/`maximum` on numbers: the trigger form clamps an out-of-range entry to them without a
# word (0 became 1); the task checks the range and says what to fix (`value_rules`).
def source_param(sources: list[str], *, every: bool = False) -> Param:
    """`source`: one of `sources` (the first by default), or with `every` also `all` (the default)."""
    if every:
        return Param(ALL_SOURCES, type="string", enum=[ALL_SOURCES, *sources], title="Source",
                     values_display={ALL_SOURCES: "all sources"},
                     description="Connection id of one source database, or all of them.")
    return Param(sources[0], type="string", enum=sources, title="Source connection",
                 description="Connection id of the source database.")


def tables_param(what: str = "dumps") -> Param:
    """`tables`: names, one per line; empty `what` (dumps, checks...) every table."""
    return Param([], type=["array", "null"], items={"type": "string", "minLength": 1}, title="Tables",
                 description=f"`table` or `schema.table`, one per line; empty {what} every table.")


def exclude_param() -> Param:
    """`exclude`: tables to leave out of a run over every table."""
    return Param([], type=["array", "null"], items={"type": "string", "minLength": 1}, title="Leave out",
                 description="With every table (Tables empty): `table` or `schema.table` to leave out, one per "
                             "line (`schema.table` for a table of one source when the run covers several). Tables "
                             "that cannot be dumped (no primary key) are skipped and listed anyway.")


def keys_param() -> Param:
    """`keys`: primary keys to re-read (a repair), at most `DBLOG_MAX_KEYS`; parsed by `dump_keys`."""
    max_keys = settings().dump.max_keys
    return Param(None, type=["null", "array"], maxItems=max_keys, title="Primary keys (repair)",
                 description='With one table: one key per line (7, "abc" or [1, "a"] for a composite '
                             f"key), at most {max_keys:,}; empty = whole tables.")


def chunk_size_param(default: int | None = None, title: str = "Chunk size (rows)") -> Param:
    """`chunk_size` of a dump (default: `DBLOG_CHUNK_SIZE`)."""
    s = settings()
    return Param(s.dump.chunk_size if default is None else default, type="integer", title=title,
                 description=f"Rows per chunk, {s.range_text('dump.chunk_size')}: one short SELECT between a low "
                             "and a high watermark. A range dump's chunks grow while the source takes no writes, "
                             f"up to {s.cite('dump.quiet_chunk_size')}.")


def parallelism_param(default: int | None = None) -> Param:
    """`parallelism` of a dump (default: `DBLOG_PARALLELISM`)."""
    s = settings()
    return Param(s.dump.parallelism if default is None else default, type="integer", title="Parallelism",
                 description=f"Key ranges a window reads at once, {s.range_text('dump.parallelism')}, each on its "
                             "own source connection: a window reads about chunk size x parallelism rows between "
                             "its low and high watermark. Higher dumps faster and loads the source more.")


def delay_param(default: float = 0.0) -> Param:
    """`delay_seconds` between a dump's chunks."""
    return Param(default, type="number", title="Delay between chunks (s)",
                 description=f"Pause after each chunk, 0 to {settings().dump.max_delay_seconds} seconds, to spare "
                             "a busy source.")


def dump_id_param() -> Param:
    """`dump_id` of a new dump: optional, generated when empty."""
    return Param(None, type=["null", "string"], pattern=DUMP_ID.pattern, title="Dump id (optional)",
                 description="1-64 letters, digits, '.', '_' or '-'; empty = a generated id.")


# dblog_dump_control: which dump, what to do, and a throttle's new values (empty: unchanged)
def running_dump_id_param() -> Param:
    """`dump_id` of a registered dump (dblog_dump_control)."""
    return Param("", type="string", pattern=DUMP_ID.pattern, title="Dump id",
                 description="The id a dblog_dump run's start task logged (XCom `dump`), or `dblog status`.")


def action_param() -> Param:
    """`action` of dblog_dump_control: one of `DUMP_ACTIONS`."""
    return Param("status", type="string", enum=list(DUMP_ACTIONS), title="Action",
                 description="pause or resume the table tasks, cancel the dump, throttle it (new chunk "
                             "size, parallelism and/or delay), or only show its progress (status).")


def new_chunk_size_param() -> Param:
    """`chunk_size` of a throttle; empty keeps the current one."""
    return Param(None, type=["null", "integer"], title="New chunk size (throttle)",
                 description=f"Rows per chunk, {settings().range_text('dump.chunk_size')}; empty keeps "
                             "the current one.")


def new_parallelism_param() -> Param:
    """`parallelism` of a throttle; empty keeps the current one."""
    return Param(None, type=["null", "integer"], title="New parallelism (throttle)",
                 description=f"Key ranges a window reads at once, {settings().range_text('dump.parallelism')}; "
                             "empty keeps the current one.")


def new_delay_param() -> Param:
    """`delay_seconds` of a throttle; empty keeps the current one."""
    return Param(None, type=["null", "number"], title="New delay between chunks (throttle)",
                 description=f"0 to {settings().dump.max_delay_seconds} seconds; empty keeps the "
                             "current one.")


# dblog_capture and dblog_merge_continuous: the length of a slice (one run of a @continuous DAG)
def slice_seconds_param() -> Param:
    """`slice_seconds` of dblog_capture (default: `DBLOG_CAPTURE_SLICE_SECONDS`)."""
    s = settings()
    return Param(s.capture.slice_seconds, type="integer", title="Seconds per capture slice",
                 description="How long one run captures before the next run takes over, "
                             f"{s.range_text('capture.slice_seconds')} (each handover pauses the stream for a "
                             "few seconds).")


def merge_slice_seconds_param() -> Param:
    """`merge_slice_seconds` of dblog_merge_continuous."""
    s = settings()
    return Param(s.merge.continuous_slice_seconds, type="number", title="Seconds per slice",
                 description="How long one run merges before the next takes over, "
                             f"{s.range_text('merge.continuous_slice_seconds')} (each handover starts Spark anew: "
                             "tens of seconds without merges).")


def every_seconds_param() -> Param:
    """`every_seconds` of dblog_merge_continuous: the pause between two merge cycles."""
    s = settings()
    return Param(s.merge.continuous_every_seconds, type="number", title="Seconds between cycles",
                 description=f"Pause between two merge cycles, {s.range_text('merge.continuous_every_seconds')}.")


# dblog_maintenance: each defaults to the setting that bounds it
def keep_seconds_param() -> Param:
    s = settings()
    return Param(s.warehouse.keep_seconds, type="number", title="Keep snapshots (s)",
                 description=f"Expire snapshots older than this, {s.range_text('warehouse.keep_seconds')} seconds: "
                             "long queries and time travel read them; the current ones always stay.")


def orphan_grace_seconds_param() -> Param:
    s = settings()
    return Param(s.warehouse.orphan_grace_seconds, type="number", title="Orphan grace (s)",
                 description="Delete files no kept snapshot references once older than this, "
                             f"{s.range_text('warehouse.orphan_grace_seconds')} seconds (a running merge's files "
                             "are unreferenced until it commits).")


def compact_min_files_param() -> Param:
    s = settings()
    return Param(s.warehouse.compact_min_files, type="integer", title="Compact above (files)",
                 description="Rewrite a bucket holding more data files than this as one file, "
                             f"{s.range_text('warehouse.compact_min_files')}.")


def log_retention_seconds_param() -> Param:
    s = settings()
    return Param(s.retention.window_seconds, type="number", title="Staged log retention (s)",
                 description="Remove staged changes every table merged, and finished dumps, once older than this, "
                             f"{s.range_text('retention.window_seconds')} seconds: `dblog export --from` reaches "
                             "this far back.")


def dry_run_param() -> Param:
    return Param(False, type="boolean", title="Dry run",
                 description="Only report what would be expired, compacted and deleted; change nothing.")


# -- what a run's rendered params mean ----------------------------------------------------------
def covers(selected_source: str | None, source_conn_id: str) -> bool:
    """Whether a run whose `source` param is `selected_source` covers `source_conn_id` (empty or
    `all`: every source)."""
    return selected_source in (None, "", ALL_SOURCES, source_conn_id)


def dump_keys(keys: Any) -> list | None:
    """Keys from a JSON conf, or one per line from the UI form: `7`, `"abc"` or `[1, "a"]`; an
    unquoted line that is not JSON is taken as a string key."""
    if not keys:
        return None
    if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        out = []
        for line in (k.strip() for k in keys if k.strip()):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append(line)
        return out
    return keys


def dump_spec(tables: Any = None, keys: Any = None, chunk_size: Any = None, delay_seconds: Any = 0.0,
              dump_id: str | None = None, exclude: Any = None, parallelism: Any = None) -> DumpSpec:
    """The engine's DumpSpec from a run's rendered params (the form leaves empty fields as None or "")."""
    from dblog.snapshot.dump_spec import DumpSpec  # loads the sources (pyarrow): at task run, not at DAG parse
    return DumpSpec(tables=list(tables or []), keys=dump_keys(keys), chunk_size=chunk_size, delay_s=delay_seconds,
                    dump_id=dump_id or None, exclude=list(exclude or []), parallelism=parallelism)


# -- the checks of a run's conf -----------------------------------------------------------------
def fail(log, message: str) -> NoReturn:
    """Fail the task for good (no retry), its reason logged at ERROR level first.

    Airflow 3.3 lists a failed task's ERROR lines on the DAG's overview ("Recent Failed Task
    Logs") and in the log view's error filter; a task cannot write its run's note (the Task SDK
    and execution API have no call for it), so this line is where the reason shows."""
    log.error("%s", message)
    raise AirflowFailException(message) from None  # the message says it all: no chained traceback


def _passes(check: str, value: Any) -> bool:
    """The engine's own rule (`dblog.snapshot.dump_spec.check_*`), so a form, the CLI and the page agree."""
    # loads the sources (pyarrow): at task run, not at DAG parse
    from dblog.snapshot.dump_spec import DumpError, check_chunk_size, check_delay, check_parallelism
    rule = {"check_chunk_size": check_chunk_size, "check_delay": check_delay,
            "check_parallelism": check_parallelism}[check]
    try:
        rule(value)
        return True
    except DumpError:
        return False


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_rules() -> dict[str, Rule]:
    """param name -> (accepted?, what to set instead), with the ranges of the settings in force.
    None values are left to the params' types."""
    s = settings()
    low, high = s.bounds("capture.slice_seconds")
    return {
        "chunk_size": (lambda v: _passes("check_chunk_size", v),
                       f"a chunk reads {s.range_text('dump.chunk_size')} rows; set a whole number in that range "
                       f"(default {s.dump.chunk_size})"),
        "parallelism": (lambda v: _passes("check_parallelism", v),
                        f"a window reads {s.range_text('dump.parallelism')} key ranges at once, each on its own "
                        f"connection; set a whole number in that range (default {s.dump.parallelism})"),
        "delay_seconds": (lambda v: _passes("check_delay", v),
                          f"set 0 (no pause) to {s.dump.max_delay_seconds} seconds between chunks"),
        "slice_seconds": (lambda v: _number(v) and low <= v <= high,
                          f"a capture slice lasts {s.range_text('capture.slice_seconds')} seconds; each handover "
                          "pauses the stream a few seconds"),
        "tables": (lambda v: isinstance(v, list) and all(isinstance(t, str) and t.strip() for t in v),
                   "list table names (`table` or `schema.table`), one per line; leave it empty for every table"),
        "exclude": (lambda v: isinstance(v, list) and all(isinstance(t, str) and t.strip() for t in v),
                    "list the table names to leave out of a dump of every table, one per line"),
        **_maintenance_rules(s),
    }


def _maintenance_rules(s) -> dict[str, Rule]:
    """dblog_maintenance's and dblog_merge_continuous's numbers, bounded as the settings that give
    their defaults."""
    def within(name: str, whole: bool = False) -> Callable[[Any], bool]:
        low, high = s.bounds(name)
        return lambda v: _number(v) and (not whole or float(v).is_integer()) and low <= v <= high
    return {
        "keep_seconds": (within("warehouse.keep_seconds"), f"keep replaced snapshots "
                         f"{s.range_text('warehouse.keep_seconds')} seconds (default {s.warehouse.keep_seconds:g})"),
        "orphan_grace_seconds": (within("warehouse.orphan_grace_seconds"), "delete unreferenced files once older "
                                 f"than {s.range_text('warehouse.orphan_grace_seconds')} seconds (default "
                                 f"{s.warehouse.orphan_grace_seconds:g}); a running merge's files are that young"),
        "compact_min_files": (within("warehouse.compact_min_files", whole=True), "compact buckets of more files "
                              f"than a whole number from {s.range_text('warehouse.compact_min_files')} (default "
                              f"{s.warehouse.compact_min_files})"),
        "merge_slice_seconds": (within("merge.continuous_slice_seconds"), "a continuous merge slice lasts "
                                f"{s.range_text('merge.continuous_slice_seconds')} seconds (default "
                                f"{s.merge.continuous_slice_seconds}); each handover starts Spark anew"),
        "every_seconds": (within("merge.continuous_every_seconds"), "merge cycles come every "
                          f"{s.range_text('merge.continuous_every_seconds')} seconds (default "
                          f"{s.merge.continuous_every_seconds:g})"),
        "log_retention_seconds": (within("retention.window_seconds"), "keep merged changes and finished dumps in "
                                  f"the staged log {s.range_text('retention.window_seconds')} seconds (default "
                                  f"{s.retention.window_seconds:g})"),
    }


def conf_problems(declared: Sequence[str], conf: dict | None, values: dict[str, Any]) -> list[str]:
    """What is wrong with a run: conf keys the DAG does not declare, and `values` (param name ->
    value the task would use) that break `value_rules()`. Each problem names its fix."""
    names = sorted(declared)
    rules = value_rules()
    problems = []
    for key in sorted(set(conf or {}) - set(names)):
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        problems.append(f"unknown param {key!r} " + (f"(did you mean {close[0]!r}?)" if close else
                                                     f"(the params are {', '.join(names)})"))
    for name, value in values.items():
        ok, fix = rules[name]
        if value is not None and not ok(value):
            problems.append(f"{name} = {value!r}: {fix}")
    return problems


def check_run(task: BaseOperator, context, **values: Any) -> None:
    """Fail `task` (see `fail`) when its run's conf or `values` (param name -> the value the task
    would use) are not acceptable."""
    dag_run = context.get("dag_run")
    problems = conf_problems(list(task.dag.params) if task.has_dag() else [],
                             getattr(dag_run, "conf", None), values)
    if problems:
        fail(task.log, f"{task.dag_id} run refused, nothing was started: {'; '.join(problems)}. "
                       "Trigger a new run with a corrected conf.")
