"""spark-submit entry point: merge staged changes and dump chunks into the warehouse.

    spark-submit --master local[2] spark_jobs/merge.py --source dblog_mariadb [--table shop.accounts]

Arguments are `dblog merge`'s; the session takes spark-submit's master and settings.
The work itself is `dblog.merge.job.merge_table` (DataFrame functions in `dblog.merge.bucket_merge`).

With `--report FILE` (how the Airflow merge task runs it) the job prints no summary of its own:
the task logs one line per table from the report. A failure writes `{"error": "..."}` to the
report, so the task can say why it failed without digging through Spark's output.

With `--settings FILE` the job takes its connections and roots from that file (written by the
task, readable by this user only) instead of its environment: see `apply_settings`.
"""
import contextlib
import io
import json
import logging
import os
import sys

from dblog.cli import SLICE_FAILED, main

ERROR_PREFIX = "dblog: error: "


class _Tee(io.TextIOBase):
    """Passes everything on to `out` and keeps the `dblog: error:` lines (a continuous merge
    writes for hours: only what the report needs is kept)."""

    def __init__(self, out) -> None:
        super().__init__()
        self.out, self._line = out, ""
        self.said: list[str] = []

    def write(self, text: str) -> int:
        self.out.write(text)
        *done, self._line = (self._line + text).split("\n")
        self.said += [line[len(ERROR_PREFIX):] for line in done if line.startswith(ERROR_PREFIX)]
        del self.said[:-10]
        return len(text)

    def flush(self) -> None:
        self.out.flush()


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
    if report is None:
        return main(["merge", *apply_settings(argv)])
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stderr = _Tee(sys.stderr)
    try:
        argv = apply_settings(argv)
        # A single merge's line per table is dropped (the task logs its own from the report); a
        # continuous merge's lines per cycle are the task's log while the slice runs.
        quiet = contextlib.nullcontext() if "--continuous" in argv else contextlib.redirect_stdout(io.StringIO())
        with quiet, contextlib.redirect_stderr(stderr):
            code = main(["merge", *argv])
    except BaseException as exc:  # a bug, not bad input: the traceback follows on stderr
        _error(report, f"{type(exc).__name__}: {exc}")
        raise
    if code == SLICE_FAILED:
        return code   # the report holds every table's result, the failing ones with their error
    if code:
        said = stderr.said + ([stderr._line[len(ERROR_PREFIX):]] if stderr._line.startswith(ERROR_PREFIX) else [])
        _error(report, said[-1] if said else f"dblog merge exited with code {code}")
    return code


def _error(report: str, message: str) -> None:
    with contextlib.suppress(OSError), open(report, "w") as f:
        json.dump({"error": message}, f)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
