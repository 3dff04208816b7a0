"""spark-submit entry point: merge staged changes and dump chunks into the warehouse.

    spark-submit --master local[2] spark_jobs/merge.py --source dblog_mariadb [--table shop.accounts]

Arguments are `dblog merge`'s; the session takes spark-submit's master and settings.
The work itself is `dblog.merge.run.run_merge`, as for `dblog merge` (one table's merge:
`dblog.merge.job.merge_table`; DataFrame functions in `dblog.merge.bucket_merge`).

With `--report FILE` (how the Airflow merge task runs it) the job prints no summary of its own:
the task logs one line per table from the report (`MergeReport`). A failure writes
`{"error": "..."}` to the report, so the task can say why it failed without digging through
Spark's output.

With `--settings FILE` the job takes its connections and roots from that file (written by the
task, readable by this user only) instead of its environment: see `apply_settings`.
"""
import contextlib
import json
import logging
import os
import sys

from dblog.cli import parser, setup_logging
from dblog.cli.cmd_merge import merge_options
from dblog.errors import DBLogError
from dblog.merge.merge_result import MergeReport, failure_lines
from dblog.merge.run import SLICE_FAILED, run_merge


def apply_settings(argv: list[str]) -> list[str]:
    """Take `--settings FILE` out of `argv`: the file maps the engine's variables (AIRFLOW_CONN_*,
    DBLOG_*) to values, which this process then uses. The Airflow task resolves the connections,
    wherever Airflow keeps them, and hands them over in a file because a command line is logged
    and visible to every user. Read once, then removed: the credentials do not outlive the start."""
    if "--settings" not in argv[:-1]:
        return argv
    at = argv.index("--settings")
    path = argv[at + 1]
    with open(path) as f:
        settings = json.load(f)
    os.remove(path)
    unknown = [k for k in settings if not k.startswith(("AIRFLOW_CONN_", "DBLOG_"))]
    if unknown:  # the file configures dblog, nothing else of this process
        raise ValueError(f"{path}: not dblog settings: {', '.join(sorted(unknown))}")
    os.environ.update({k: str(v) for k, v in settings.items()})
    return argv[:at] + argv[at + 2:]


def run(argv: list[str]) -> int:
    report = argv[argv.index("--report") + 1] if "--report" in argv[:-1] else None
    if report is not None:
        logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        try:
            args = parser().parse_args(["merge", *apply_settings(argv)])
            setup_logging()
            # A single merge's line per table is left to the task (it logs its own from the report); a
            # continuous merge's lines per cycle are the task's log while the slice runs.
            quiet = report is not None and not args.continuous
            results = run_merge(merge_options(args), say=(lambda _: None) if quiet else
                                (lambda line: print(line, flush=True)))
        except DBLogError as exc:  # what the engine refuses or cannot reach: the task says why
            print(f"dblog: error: {exc}", file=sys.stderr)
            _write(report, MergeReport(error=str(exc)))
            return 2
    except BaseException as exc:  # a bug, not bad input: the traceback follows on stderr
        _write(report, MergeReport(error=f"{type(exc).__name__}: {exc}"))
        raise
    _write(report, MergeReport(results))
    failing = failure_lines(results)   # the report holds every table's result, the failing ones with their error
    for line in failing:
        print(line, file=sys.stderr)
    return SLICE_FAILED if failing else 0


def _write(report: str | None, what: MergeReport) -> None:
    if report is not None:
        with contextlib.suppress(OSError):
            what.write(report)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
