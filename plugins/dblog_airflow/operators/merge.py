"""Submit `spark_jobs/merge.py` through the Spark provider, then publish one Asset event per
warehouse table that got a new snapshot (through the `dblog_warehouse` AssetAlias), so downstream
DAGs can be scheduled on fresh data: `schedule=[warehouse_asset("dblog_mariadb", "shop.accounts")]`.

The job runs outside Airflow, so the task resolves its connections (sources, ZooKeeper) through
the hook, wherever Airflow keeps them, and hands them over with the staged log and warehouse
roots in a file only this user can read (`job_settings`); its path is all the command line shows.

The task log has one summary line per table (the job itself prints none; Spark logs at WARN).
In a dump run (upstream `StartDumpOperator` tasks), a table's line reports the dump's own chunks,
rows and rows dropped in windows, as recorded in ZooKeeper by whichever merges took its chunks.
Where a continuous merge runs, a dump run's task starts no Spark application: it waits (deferred)
for that merge to take the dump's chunks and reports them (`dblog.merge.handoff`); it merges
itself when none runs, or when the one that runs falls silent or fails on a table of the dump.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException

from dblog.connections import ZOOKEEPER_CONN, source_ids
from dblog.merge.merge_result import MergeReport, MergeResult
from dblog.settings import settings
from dblog_airflow import metrics
from dblog_airflow.hooks.dblog import ZOOKEEPER_CONN_ID, DBLogHook, zookeeper_uri
from dblog_airflow.operators.dump import StartDumpOperator
from dblog_airflow.params import ALL_SOURCES, check_run
from dblog_airflow.triggers.merge import ContinuousMergeTookTrigger

WAREHOUSE_ALIAS = "dblog_warehouse"
MERGE_JOB = str(Path(__file__).resolve().parents[3] / "spark_jobs" / "merge.py")
SPARK_CONF = {"spark.log.level": "WARN"}  # set at SparkContext start: its INFO lines stay out of the task log
# ...and for the driver JVM from its first line (the SparkContext logs a few INFO lines before it applies
# spark.log.level): WARN and above, as Spark's default format.
DRIVER_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _change_range(r) -> dict:
    """The asset event's word on the table's change table: which of its snapshots are new, so a
    downstream job reads the increment (Iceberg's incremental read from `after`, exclusive, to `upto`)."""
    if r.changes_upto is None:
        return {}
    from dblog.warehouse.catalog import changes_namespace
    return {"changes": {"identifier": [changes_namespace(r.source), r.table], "after_snapshot_id": r.changes_after,
                        "upto_snapshot_id": r.changes_upto, "rows": r.changes}}


def warehouse_asset(source: str, table: str) -> Asset:
    """The Asset of one warehouse table (the same name and URI the merge task emits): the Iceberg
    table `(source, table)` of the configured catalog."""
    from urllib.parse import quote

    from dblog.settings import settings
    catalog = settings().warehouse.catalog_name
    return Asset(name=f"dblog.{source}.{table}", uri=f"iceberg://{catalog}/{source}/{quote(table, safe='')}",
                 group="dblog")


def _listed(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    return [v.strip() for v in items if v and v.strip()]


def job_arguments(sources: list[str], tables: list[str], bucket_rows: int | None, report: str,
                  settings: str) -> list[str]:
    """`spark_jobs/merge.py`'s arguments. The task log shows them: nothing secret goes here."""
    args = ["--source", ",".join(sources)]
    if tables:
        args += ["--table", ",".join(tables)]
    if bucket_rows is not None:  # 0 too: the job refuses it with the reason
        args += ["--bucket-rows", str(bucket_rows)]
    return [*args, "--report", report, "--settings", settings]


def job_settings(sources: list[str], zookeeper_conn_id: str = ZOOKEEPER_CONN_ID) -> dict[str, str]:
    """The job's connections and roots, as the engine's own variables (`dblog.connections`), each
    connection resolved through Airflow wherever it is defined. Raises ConfigError naming a
    root that is not set."""
    settings = {f"AIRFLOW_CONN_{s.upper()}": DBLogHook(s, zookeeper_conn_id).source_uri() for s in sources}
    settings[f"AIRFLOW_CONN_{ZOOKEEPER_CONN.upper()}"] = zookeeper_uri(zookeeper_conn_id)
    settings.update(DBLOG_STAGING=DBLogHook.staging_root(), DBLOG_WAREHOUSE=DBLogHook.warehouse_root())
    return settings


def _dump_tables(dumps: list[dict]) -> list:
    """Each table of the run's dumps (XCom `dump` of their start tasks)."""
    from dblog.merge.handoff import DumpTable
    return [DumpTable(d["source"], d["dump_id"], t) for d in dumps for t in d["tables"]]


def write_private(path: str, data: Any) -> str:
    """Write `data` as JSON into a new file only this user can read (created so, never widened)."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(data, f)
    return path


class MergeOperator(SparkSubmitOperator):
    """`dblog merge` as a spark-submit job (`spark_jobs/merge.py`), then one asset event per
    warehouse table that committed (alias `dblog_warehouse`); returns one result per table. A run
    conf key no param declares fails the task at once.

    :param sources: Connection ids, comma-separated or a list; empty or `all`: every configured
        source (templated).
    :param tables: `schema.table` names, comma-separated or a list; empty: every staged table
        (templated).
    :param bucket_rows: Rows per warehouse bucket before it splits; None: `DBLOG_BUCKET_ROWS`.
    :param zookeeper_conn_id: Connection id of the ZooKeeper ensemble of the sources' state.
    :param kwargs: `SparkSubmitOperator`'s arguments (`conn_id`, `conf`, ...); `application`,
        `name`, `driver_memory` and `outlets` have dblog defaults.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "sources", "tables")

    def __init__(self, *, sources: Any = None, tables: Any = None, bucket_rows: int | None = None,
                 zookeeper_conn_id: str = ZOOKEEPER_CONN_ID, **kwargs: Any) -> None:
        kwargs.setdefault("application", os.environ.get("DBLOG_MERGE_JOB", MERGE_JOB))
        kwargs.setdefault("name", "dblog-merge")
        kwargs.setdefault("driver_memory", settings().spark.driver_memory)  # fixed once spark-submit starts the JVM
        kwargs.setdefault("outlets", [AssetAlias(WAREHOUSE_ALIAS)])
        kwargs["conf"] = {**SPARK_CONF, **(kwargs.get("conf") or {})}
        super().__init__(**kwargs)
        self.sources, self.tables, self.bucket_rows = sources, tables, bucket_rows
        self.zookeeper_conn_id = zookeeper_conn_id

    def execute(self, context) -> list[dict]:  # type: ignore[override]  # a result per table, for XCom
        check_run(self, context)  # a conf key no param declares is a typo, not a wish
        sources = self._source_ids()
        self._report_captures(sources)
        dumps = self._run_dumps(context)
        grace = settings().merge.handoff_seconds
        # A dump run's own merge (never a continuous slice's): a running continuous merge takes its chunks.
        if dumps and grace > 0 and not self.mode_arguments():
            from dblog.merge.handoff import MERGE_HERE, MERGED, WAITING, Handoff, handoff
            tables = _dump_tables(dumps)
            try:
                with DBLogHook(dumps[0]["source"], self.zookeeper_conn_id).store() as store:
                    outcome = handoff(store, tables, grace, time.time())
            except Exception as exc:  # noqa: BLE001 - a merge here needs no word from the continuous merge
                outcome = Handoff(MERGE_HERE, f"the continuous merge's state could not be read ({exc})")
            if outcome.state == MERGED:
                return self._handed_off(dumps)
            if outcome.state == WAITING:
                self.log.info("the continuous merge runs: waiting for it to take the chunks of %s",
                              ", ".join(map(str, outcome.pending)))
                stall = settings().merge.lock_timeout_seconds
                self.defer(trigger=ContinuousMergeTookTrigger([[t.source, t.dump_id, t.table] for t in tables],
                                                              zookeeper_uri(self.zookeeper_conn_id), grace, stall),
                           method_name="execute_complete")
            self.log.info("merging here: %s", outcome.reason)
        return self._merge(context, sources, dumps)

    def execute_complete(self, context, event: dict) -> list[dict]:
        """After the wait for the continuous merge (`ContinuousMergeTookTrigger`)."""
        from dblog.merge.handoff import MERGED
        dumps = self._run_dumps(context)
        if event["state"] == MERGED:
            return self._handed_off(dumps)
        self.log.info("merging here: %s", event["reason"])
        return self._merge(context, self._source_ids(), dumps)

    def _source_ids(self) -> list[str]:
        return [s for s in _listed(self.sources) if s != ALL_SOURCES] or source_ids()

    def _handed_off(self, dumps: list[dict]) -> list[dict]:
        """The continuous merge took every chunk of the run's dumps: report them as a merge here
        would (its own asset events are sent at the end of its slice)."""
        self.log.info("the continuous merge took every chunk of this run's dumps; no Spark application started here. "
                      "Their tables' Asset events come from dblog_merge_continuous at the end of its slice")
        self._log_dumps([], dumps, by_continuous=True)
        return []

    def _merge(self, context, sources: list[str], dumps: list[dict]) -> list[dict]:
        with tempfile.TemporaryDirectory(prefix="dblog-merge-") as tmp:
            report = self.prepare_submit(tmp, sources)
            self._hook = None
            try:
                # spark-submit (so the driver's JVM) runs in the job's own directory: on a cluster,
                # the driver's link to the shipped environment goes there (dblog.spark.shipping).
                with contextlib.chdir(tmp):
                    super().execute(context)
            except Exception as exc:  # spark-submit exited non-zero: the job's report says why
                said = MergeReport.read(report) if os.path.exists(report) else None
                if said is None or said.error == "":   # the job never said why: spark-submit's own error
                    raise
                if said.error is not None:   # else a slice whose failing tables it names (below)
                    self.log.error("merge failed: %s", said.error)  # listed with the failed task's errors in the UI
                    raise AirflowException(f"merge failed: {said.error}") from exc  # retried: a lock may be free then
            results = MergeReport.read(report).results
            for r in results:
                if r.error:
                    self.log.error("%s %s: merge kept failing: %s", r.source, r.table, r.error)
        finished = time.time()
        alias = context["outlet_events"][AssetAlias(WAREHOUSE_ALIAS)]
        for r in results:  # one event per table that committed: per run, however many snapshots it made
            if r.snapshot_id is not None and r.commits:
                alias.add(warehouse_asset(r.source, r.table),
                          extra={"identifier": [r.source, r.table], "snapshot_id": r.snapshot_id,
                                 "rows": r.rows, "upto": r.upto, **_change_range(r),
                                 "dag_id": self.dag_id, "run_id": context["run_id"], "task_id": self.task_id})
        # The warehouse has committed and the asset events are set: reporting must not fail the task
        # (a retry would find nothing new to merge, and downstream DAGs would never hear of it).
        reported: set = set()
        try:
            self._emit_metrics(results, finished)
            reported = self._log_dumps(results, dumps) if dumps else set()
        except Exception as exc:  # noqa: BLE001 - reported, and the merge stands
            self.log.warning("merge done, but its report failed: %s", exc)
        for r in results:
            if (r.source, r.table) not in reported:
                self.log.info("%s", r.summary())
            if r.missing_rows or r.waiting:
                self.log.warning("%s %s: %d row(s) hold values nothing proved yet (null, listed in _dblog_missing); "
                                 "%d key(s) sent to repair now; waiting for a repair: %s", r.source, r.table,
                                 r.missing_rows, r.repairs_requested, r.waiting)
        self._committed = [(r.source, r.table) for r in results if r.commits]
        return [r.to_json() for r in results]   # XCom: the report's rows

    def get_openlineage_facets_on_complete(self, task_instance):
        """Each source table merged into its warehouse table (and change table), for the tables
        that committed (`dblog_airflow.lineage`)."""
        from dblog_airflow.lineage import warehouse_lineage
        committed = getattr(self, "_committed", [])
        uris = {s: DBLogHook(s, self.zookeeper_conn_id).source_uri() for s in {s for s, _ in committed}}
        return warehouse_lineage(DBLogHook.warehouse(), committed, uris)

    def prepare_submit(self, tmp: str, sources: list[str]) -> str:
        """Set what spark-submit gets (application args, conf, environment) and write the job's
        settings into `tmp` (a private temporary directory); returns the job's report path."""
        settings = write_private(os.path.join(tmp, "settings.json"), job_settings(sources, self.zookeeper_conn_id))
        report = os.path.join(tmp, "report.json")
        self.application_args = [*(self.application_args or []), *self.mode_arguments(),
                                 *job_arguments(sources, _listed(self.tables), self.bucket_rows, report, settings)]
        self.conf = self._quiet_driver(dict(self.conf or {}), tmp)
        # No connection in the environment either: on YARN and Kubernetes the Spark provider passes
        # env_vars on spark-submit's command line, which it logs, and env_vars is a rendered field.
        self.env_vars = {"PYSPARK_PYTHON": sys.executable, **(self.env_vars or {})}
        return report

    def mode_arguments(self) -> list[str]:
        """Arguments that make the job more than one merge (none: it merges once)."""
        return []

    def _report_captures(self, sources: list[str]) -> None:
        """Each source's capture lag and state as metrics, from here too: a stopped capture sends
        nothing itself, and an alert on its lag must still see the lag grow (every merge run)."""
        from dblog.coordination.health import CAPTURING, capture_health
        try:
            with DBLogHook(sources[0], self.zookeeper_conn_id).store() as store:
                for source in sources:
                    health = capture_health(store, source)
                    metrics.gauge("capture.up", 1 if health.state == CAPTURING else 0, (source,), source=source)
                    if health.lag_s is not None:
                        metrics.gauge("capture.lag_seconds", health.lag_s, (source,), source=source)
        except Exception as exc:  # noqa: BLE001 - metrics never stop a merge
            self.log.warning("could not report the capture's state: %s", exc)

    @staticmethod
    def _quiet_driver(conf: dict, tmp: str) -> dict:
        """The driver JVM (client mode: spark-submit's) logs WARN and above, unless the conf sets its
        own log4j2 configuration."""
        options = conf.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in options:
            path = os.path.join(tmp, "log4j2.properties")
            with open(path, "w") as f:
                f.write(DRIVER_LOG4J2)
            conf["spark.driver.extraJavaOptions"] = f"{options} -Dlog4j2.configurationFile=file:{path}".strip()
        return conf

    def _run_dumps(self, context) -> list[dict]:
        """The dumps this run's start tasks registered (XCom `dump`); none outside a dump run."""
        starts = [t.task_id for t in self.get_flat_relatives(upstream=True) if isinstance(t, StartDumpOperator)]
        if not starts:
            return []
        return [d for d in context["ti"].xcom_pull(task_ids=starts, key="dump") or [] if d]

    def _log_dumps(self, results: list[MergeResult], dumps: list[dict],
                   by_continuous: bool = False) -> set[tuple[str, str]]:
        """One line per table of each dump: the dump's own totals (all merges so far). Returns the
        (source, table) pairs reported."""
        from dblog.coordination.store import dump_merged_path
        from dblog.snapshot.dump import read_progress
        versions = {(r.source, r.table): r for r in results}
        reported = set()
        with DBLogHook(dumps[0]["source"], self.zookeeper_conn_id).store() as store:
            for d in dumps:
                for table in d["tables"]:
                    merged = store.get(dump_merged_path(d["source"], d["dump_id"], table)) or {}
                    progress = read_progress(store, d["source"], d["dump_id"], table)
                    staged = None if progress is None else progress.chunks
                    r = versions.get((d["source"], table))
                    self.log.info("%s %s: dump %s merged %d of %s chunks, %d rows, %d dropped in windows; %s",
                                  d["source"], table, d["dump_id"], merged.get("chunks", 0),
                                  "?" if staged is None else staged, merged.get("rows", 0), merged.get("dropped", 0),
                                  "by the continuous merge" if by_continuous else
                                  f"warehouse snapshot {r and r.snapshot_id}, {r and r.rows} rows")
                    reported.add((d["source"], table))
        return reported

    @staticmethod
    def _emit_metrics(results: list[MergeResult], now: float) -> None:
        seconds: dict[str, float] = {}
        for r in results:
            seconds[r.source] = seconds.get(r.source, 0.0) + r.seconds
            subject, tags = (r.source, r.table), {"source": r.source, "table": r.table}
            metrics.incr("merge.rows_dropped", r.dropped, subject, **tags)
            metrics.gauge("merge.rows_awaiting_repair", r.missing_rows, subject, **tags)
            # 1 while a repair of the table has not landed (a statement-logged write, a partial image):
            # the table is not in sync, whatever its freshness says.
            metrics.gauge("merge.repair_waiting", int(bool(r.waiting)), subject, **tags)
            metrics.incr("merge.chunks_dropped_unlogged", r.blind_chunks, subject, **tags)
            if r.newest_commit_ts is not None:
                metrics.gauge("merge.freshness_seconds", max(0.0, now - r.newest_commit_ts), subject, **tags)
            if r.visible_after_s is not None:
                metrics.gauge("merge.visible_after_seconds", r.visible_after_s, subject, **tags)
        for source, total in seconds.items():
            metrics.timing("merge.duration_seconds", total, (source,), source=source)


class SliceCheckOperator(BaseOperator):
    """Fails, naming each table and why, when a continuous merge slice (`merge_task_id`) ended with
    tables whose merges kept failing. A task of its own: the slice's task succeeds, so the tables
    that did merge keep their asset events, and the run still shows red.

    :param merge_task_id: Task id of the continuous merge whose results (XCom) are checked.
    """

    def __init__(self, *, merge_task_id: str = "merge", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.merge_task_id = merge_task_id

    def execute(self, context) -> None:
        results = [MergeResult.from_json(r) for r in context["ti"].xcom_pull(task_ids=self.merge_task_id) or []]
        failing = [f"{r.source} {r.table}: {r.error}" for r in results if r.error]
        if failing:
            raise AirflowException("the continuous merge kept failing on " + "; ".join(failing))
        self.log.info("every table merged without failing: %d table(s)", len(results))


def _number(value: Any, otherwise: Any = None) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return otherwise


class ContinuousMergeOperator(MergeOperator):
    """`dblog merge --continuous` for one slice (`slice_seconds`): one warm Spark session merging
    every `every_seconds`; its lines per cycle are the task log. At the end, one asset event per
    table that committed in the slice, and the slice's metrics. A slice overrunning twice its length
    by 10 minutes is hung and fails (`execution_timeout`), so its retry starts afresh. A bad run
    conf or value fails the task at once.

    :param slice_seconds: How long the slice merges; None: `DBLOG_MERGE_SLICE_SECONDS` (templated).
    :param every_seconds: Pause between two merge cycles; None: `DBLOG_MERGE_CONTINUOUS_EVERY_SECONDS`
        (templated).
    :param kwargs: `MergeOperator`'s arguments.
    """

    template_fields: Sequence[str] = (*MergeOperator.template_fields, "slice_seconds", "every_seconds")

    def __init__(self, *, slice_seconds: Any = None, every_seconds: Any = None, **kwargs: Any) -> None:
        tuned = settings().merge
        self.slice_seconds = tuned.continuous_slice_seconds if slice_seconds is None else slice_seconds
        self.every_seconds = tuned.continuous_every_seconds if every_seconds is None else every_seconds
        kwargs.setdefault("name", "dblog-merge-continuous")
        super().__init__(**kwargs)

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        # The slice's length is known once its params are rendered; the timeout follows it.
        seconds = _number(self.slice_seconds)
        if self.execution_timeout is None and seconds is not None:
            self.execution_timeout = timedelta(seconds=2 * seconds + 600)

    def execute(self, context) -> list[dict]:  # type: ignore[override]
        check_run(self, context, merge_slice_seconds=_number(self.slice_seconds, self.slice_seconds),
                  every_seconds=_number(self.every_seconds, self.every_seconds))
        return super().execute(context)

    def mode_arguments(self) -> list[str]:
        return ["--continuous", "--duration", str(float(self.slice_seconds)), "--every", str(float(self.every_seconds))]
