"""spark-submit entry point: merge staged changes and dump chunks into the warehouse.

    spark-submit --master local[2] spark_jobs/merge.py --source dblog_mariadb [--table shop.accounts]

Arguments are `dblog merge`'s; the session takes spark-submit's master and settings.
The work itself is `dblog.spark.job.merge_table` (DataFrame functions in `dblog.spark.merge`).

With `--report FILE` (how the Airflow merge task runs it) the job prints no summary of its own:
the task logs one line per table from the report. A failure writes `{"error": "..."}` to the
report, so the task can say why it failed without digging through Spark's output.
"""
import contextlib
import io
import json
import logging
import sys

from dblog.cli import main

ERROR_PREFIX = "dblog: error: "


class _Tee(io.StringIO):
    """Passes everything on to `out` and keeps a copy."""

    def __init__(self, out) -> None:
        super().__init__()
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(text)
        return super().write(text)

    def flush(self) -> None:
        self.out.flush()


def run(argv: list[str]) -> int:
    report = argv[argv.index("--report") + 1] if "--report" in argv[:-1] else None
    if report is None:
        return main(["merge", *argv])
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stderr = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            code = main(["merge", *argv])  # `dblog merge` prints a line per table: dropped here
    except BaseException as exc:  # a bug, not bad input: the traceback follows on stderr
        _error(report, f"{type(exc).__name__}: {exc}")
        raise
    if code:
        said = [line[len(ERROR_PREFIX):] for line in stderr.getvalue().splitlines() if line.startswith(ERROR_PREFIX)]
        _error(report, said[-1] if said else f"dblog merge exited with code {code}")
    return code


def _error(report: str, message: str) -> None:
    with contextlib.suppress(OSError), open(report, "w") as f:
        json.dump({"error": message}, f)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
