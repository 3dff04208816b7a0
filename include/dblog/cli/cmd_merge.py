"""`dblog merge`: the arguments of a merge run (`dblog.merge.run`), which spark-submit's job
(`spark_jobs/merge.py`) takes too."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from . import cli_options as opts
from .cli_progress import Bars

if TYPE_CHECKING:
    from ..merge.run import MergeOptions


def merge_options(args) -> MergeOptions:
    from ..merge.run import MergeOptions  # Spark's modules load only when a merge runs
    return MergeOptions(sources=opts.listed(args.source), tables=opts.listed(args.table),
                        bucket_rows=args.bucket_rows, master=args.master, continuous=args.continuous,
                        every=args.every, duration=args.duration)


def cmd_merge(args) -> int:
    from ..merge.merge_result import MergeReport, failure_lines
    from ..merge.run import SLICE_FAILED, run_merge
    with Bars() as bars:
        results = run_merge(merge_options(args), say=lambda line: print(line, flush=True),
                            on_table=bars.stepper("merge: tables"))
    if args.report:
        MergeReport(results).write(args.report)
    failing = failure_lines(results)   # the report keeps every table's result: what committed still counts
    for line in failing:
        print(line, file=sys.stderr)
    return SLICE_FAILED if failing else 0


def add_merge(sub, tuned) -> None:
    m = sub.add_parser("merge", help="merge staged changes and dump chunks into the warehouse (Spark)")
    m.add_argument("--source", action="append", help="connection id (repeatable or comma-separated; default: every configured source)")
    m.add_argument("--table", action="append", help="table to merge (repeatable; default: every staged table)")
    m.add_argument("--bucket-rows", type=int, default=tuned.merge.bucket_rows,
                   help=f"rows per warehouse bucket before it splits (default {tuned.cite('merge.bucket_rows')})")
    m.add_argument("--master", help="Spark master (default: spark-submit's, else DBLOG_SPARK_MASTER, else local[*])")
    m.add_argument("--report", help="write the per-table results to this file as JSON")
    m.add_argument("--continuous", action="store_true", help="keep merging every --every seconds in one Spark "
                   "session, until --duration ends or SIGTERM")
    m.add_argument("--every", type=opts.finite, help="seconds between continuous merge cycles "
                   f"({tuned.range_text('merge.continuous_every_seconds')}; default "
                   f"{tuned.cite('merge.continuous_every_seconds')})")
    m.add_argument("--duration", type=opts.finite, help="with --continuous: stop after this many seconds "
                   "(default: run until stopped)")
    m.set_defaults(func=cmd_merge)
