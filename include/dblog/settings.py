"""Every tunable in one place: its default, the variable that overrides it, what it accepts.

Modelled on dlt's typed configuration: frozen dataclasses, one per part of the product, whose
fields are the settings. A field's metadata names its environment variable, its range (a number,
or another setting: a chunk size is bounded by the maximum chunk size) and what it means.
`settings()` reads the environment and checks every value, so a mistyped variable fails where it
is first read, naming the variable, the value and what it accepts, not somewhere deep in a run.
The table of tunables in docs/configuration.md is `markdown_table()`; a unit test holds the two equal.

Import-light on purpose: DAG files import it while the scheduler parses them.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import DBLogError


class ConfigError(DBLogError, ValueError):
    """A setting or connection that cannot work; the message names it and the fix."""


# A dump id names ZooKeeper nodes and staged paths: a contract every entry point shares, not a tunable.
DUMP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

CRON = "a cron expression or preset"
Bound = int | float | str | None  # a number, or "group.field": the setting that bounds this one


@dataclass(frozen=True)
class Spec:
    env: str
    help: str
    minimum: Bound = None
    maximum: Bound = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    accepts: str = ""  # what a free-text setting takes, for docs/configuration.md
    same_as: str | None = None  # "group.field" whose value this one takes unless its variable is set
    string_map: bool = False  # a JSON object of strings (empty: none)


def setting(default: Any, env: str, help: str, **spec: Any) -> Any:
    return field(default=default, metadata={"spec": Spec(env, help, **spec)})


@dataclass(frozen=True)
class Dump:
    chunk_size: int = setting(
        20_000, "DBLOG_CHUNK_SIZE", "rows per dump chunk when a dump names none (CLI, `dblog_dump` form, "
        "repairs), chosen by the chunk size sweep (Performance)", minimum=1, maximum="dump.max_chunk_size")
    parallelism: int = setting(
        1, "DBLOG_DUMP_PARALLELISM", "splits a dump window reads at once, each on its own connection "
        "(a window reads about chunk size x parallelism rows), when a dump names none",
        minimum=1, maximum="dump.max_parallelism")
    reader: str = setting(
        "threads", "DBLOG_DUMP_READER", "where a range dump's windows are read: `threads` (in the dump's process, a "
        "connection per split), `spark` (one Spark task per split, decoded in executors: the Performance "
        "section measures both), `auto` (Spark for a table of at least `DBLOG_DUMP_SPARK_MIN_ROWS` rows)",
        choices=("auto", "spark", "threads"))
    decoder: str = setting(
        "native", "DBLOG_DUMP_DECODER", "how a range dump's chunk rows are decoded: `native` (straight into Arrow "
        "by connectorx or ADBC, for a table whose every column they read exactly; other tables and values are read "
        "by the Python driver), `python` (the Python driver for every chunk)", choices=("native", "python"))
    spark_min_rows: int = setting(
        1_000_000, "DBLOG_DUMP_SPARK_MIN_ROWS", "with the `auto` reader, the estimated rows from which a table's "
        "windows are read on Spark (starting Spark costs seconds; a small table is done sooner without)",
        minimum=0, maximum=10**15)
    max_parallelism: int = setting(
        16, "DBLOG_MAX_PARALLELISM", "most splits a user may ask one window to read at once: each holds a "
        "source connection while the window is open", minimum=1, maximum=256)
    max_chunk_size: int = setting(
        100_000, "DBLOG_MAX_CHUNK_SIZE", "largest chunk a user may ask for: one chunk's SELECT stays short",
        minimum=1, maximum=10_000_000)
    quiet_chunk_size: int = setting(
        100_000, "DBLOG_DUMP_QUIET_CHUNK_SIZE", "rows a range dump's splits grow to, doubling window by window, "
        "while the source counts no row written but the dump's watermarks (a first load's window stays within "
        "`DBLOG_BUCKET_ROWS`, and no split passes `DBLOG_MAX_CHUNK_SIZE`); the first other write the source counts "
        "(another dump's watermarks too) sends them back to the chunk size. A dump throttled with a delay, or this "
        "at or below the chunk size: windows keep their size", minimum=1, maximum=10_000_000)
    max_delay_seconds: int = setting(
        3600, "DBLOG_MAX_DELAY_SECONDS", "longest pause between chunks a user may ask for", minimum=0,
        maximum=86_400)
    max_keys: int = setting(
        100_000, "DBLOG_MAX_KEYS", "most primary keys one key-list dump takes (a verify finding more re-dumps "
        "the whole table)", minimum=1, maximum=10_000_000)
    reconnect_seconds: float = setting(
        120.0, "DBLOG_DUMP_RECONNECT_SECONDS", "how long a chunk read retries while the source is unreachable; "
        "then the dump fails, and re-running it resumes after its last chunk", minimum=0, maximum=86_400)
    retry_delay_seconds: float = setting(
        30.0, "DBLOG_DUMP_RETRY_DELAY_SECONDS", "how long a failed task of `dblog_dump` or `dblog_full_refresh` "
        "(its worker died, its source was away) waits before its retry; a dump task's retry resumes after the last "
        "window it recorded", minimum=0, maximum=86_400)


@dataclass(frozen=True)
class Capture:
    slice_seconds: int = setting(
        3600, "DBLOG_CAPTURE_SLICE_SECONDS", "length of one `dblog_capture` run; each handover to the next "
        "pauses the stream a few seconds", minimum=5, maximum=86_400)
    flush_rows: int = setting(
        20_000, "DBLOG_CAPTURE_FLUSH_ROWS", "events a capture batches before staging them (cut at a "
        "transaction end, or at a piece of a larger one)", minimum=1, maximum=10_000_000)
    flush_seconds: float = setting(
        1.0, "DBLOG_CAPTURE_FLUSH_SECONDS", "longest a capture holds a batch before staging it (the capture "
        "lag's floor)", minimum=0.01, maximum=3600)
    piece_rows: int = setting(
        20_000, "DBLOG_CAPTURE_PIECE_ROWS", "a transaction with more events is staged in pieces of this many as "
        "they are read, so its size does not bound the capture's memory; the checkpoint passes them, and readers "
        "see them, only once its commit is staged", minimum=1, maximum=10_000_000)
    shared_segment_tables: int = setting(
        8, "DBLOG_CAPTURE_SHARED_SEGMENT_TABLES", "a flush that stages events of more tables than this writes the "
        "small ones (`DBLOG_CAPTURE_SHARED_SEGMENT_ROWS`) into one shared segment, so the files a flush writes do "
        "not grow with the tables it touched; `dblog maintain` moves them into each table's own segments; 0: "
        "every table its own file", minimum=0, maximum=100_000)
    shared_segment_rows: int = setting(
        1000, "DBLOG_CAPTURE_SHARED_SEGMENT_ROWS", "a table with at most this many events in a flush may share a "
        "segment with other tables (see `DBLOG_CAPTURE_SHARED_SEGMENT_TABLES`)", minimum=1, maximum=1_000_000)
    hung_after_seconds: float = setting(
        600.0, "DBLOG_CAPTURE_HUNG_AFTER_SECONDS", "a capture task past twice its slice that stages nothing "
        "for this long is hung: it fails, and its retry captures afresh (one still staging a transaction "
        "larger than a slice is not)", minimum=60, maximum=86_400)
    wait_timeout_seconds: float = setting(
        1800.0, "DBLOG_CAPTURE_WAIT_TIMEOUT", "how long a DAG's `wait_for_capture` waits for the capture to "
        "pass its sync watermark before failing with the reason", minimum=1, maximum=604_800)
    stopped_grace_seconds: float = setting(
        300.0, "DBLOG_CAPTURE_STOPPED_GRACE_SECONDS", "a `wait_for_capture` fails at once, with the reason, when "
        "no capture has run for this long while it waits (a paused dblog_capture DAG); a handover between "
        "slices or a retry after a crash is shorter", minimum=5, maximum=604_800)
    sync_timeout_seconds: float = setting(
        60.0, "DBLOG_SYNC_TIMEOUT", "how long `dblog sync` waits for the capture (its `--timeout`)", minimum=0,
        maximum=86_400)
    auto_dump_new_tables: str = setting(
        "on", "DBLOG_AUTO_DUMP_NEW_TABLES", "a table created in (or renamed into) the captured schema while the "
        "capture runs is dumped by a repair dump, so \"all tables\" stays all tables (`off`: logged, left to you)",
        choices=("on", "off"))
    pg_streaming: str = setting(
        "on", "DBLOG_PG_STREAMING", "PostgreSQL 14+: receive a large transaction while it is still in progress "
        "(pgoutput streaming) and decode it into a local spool (the system's temporary directory, `TMPDIR`), so "
        "its commit is staged soon after it is made; `off`: the server holds it back until its commit",
        choices=("on", "off"))
    pg_decoding_work_mem_kib: int = setting(
        0, "DBLOG_PG_DECODING_WORK_MEM_KIB", "the capture's `logical_decoding_work_mem` (KiB, at least 64): how much "
        "of the transactions in progress the PostgreSQL server holds for the capture before it streams the largest "
        "(or, streaming off, spills it to its disk); 0: the server's setting (64 MiB unless changed)",
        minimum=0, maximum=2**31 - 1)
    slot_busy_seconds: float = setting(
        15.0, "DBLOG_PG_SLOT_BUSY_SECONDS", "how long a PostgreSQL capture waits for its replication slot held "
        "by another consumer before failing with the fix", minimum=0, maximum=3600)


@dataclass(frozen=True)
class Merge:
    mode: str = setting(
        "continuous", "DBLOG_MERGE_MODE", "which merge keeps the warehouse: `continuous` (`dblog_merge_continuous`, "
        "fresh within seconds) or `scheduled` (`dblog_merge` every `DBLOG_MERGE_EVERY_MINUTES`); the other DAG "
        "is then trigger-only", choices=("continuous", "scheduled"))
    every_minutes: float = setting(
        5.0, "DBLOG_MERGE_EVERY_MINUTES", "schedule of the `dblog_merge` DAG", minimum=0.1, maximum=10_080)
    bucket_rows: int = setting(
        250_000, "DBLOG_BUCKET_ROWS", "rows per warehouse key-range bucket (it splits when it doubles); "
        "`--bucket-rows`", minimum=1, maximum=1_000_000_000)
    lock_timeout_seconds: float = setting(
        600.0, "DBLOG_MERGE_LOCK_TIMEOUT", "how long a merge waits for another merge of the same table",
        minimum=1, maximum=86_400)
    continuous_every_seconds: float = setting(
        2.0, "DBLOG_MERGE_CONTINUOUS_EVERY_SECONDS", "longest pause between two cycles of the continuous merge "
        "(`dblog merge --continuous`, `dblog_merge_continuous`); a cycle starts sooner once a capture checkpoints "
        "new events",
        minimum=0.1, maximum=3600)
    local_rows: int = setting(
        20_000, "DBLOG_MERGE_LOCAL_ROWS", "a merge of at most this many new log events into a table stored as one "
        "bucket of at most this many rows (or of at most `DBLOG_MERGE_LOCAL_BUCKET_BYTES`), or into bigger "
        "buckets it changes in place (`DBLOG_MERGE_DELTA_RATIO`), or a first load of at most this many rows, runs "
        "on the driver with pyarrow, not Spark (tens of milliseconds instead of a second; 1,000 random keys into "
        "10M rows: 0.5 s instead of 3.7 s); 0: every merge through Spark", minimum=0, maximum=1_000_000)
    local_bucket_bytes: int = setting(
        16 * 1024 * 1024, "DBLOG_MERGE_LOCAL_BUCKET_BYTES", "a merge of at most `DBLOG_MERGE_LOCAL_ROWS` new log "
        "events also runs on the driver into a larger one-bucket table whose stored Parquet (live rows and "
        "tombstones) is at most this many bytes: the driver holds the bucket decompressed, 5-10 times this size "
        "for compressible columns, once per table merged at once (100 changed keys into a 250,000-row bucket: "
        "0.1-0.3 s there, 1.5-1.8 s through Spark); 0: only tables of at most `DBLOG_MERGE_LOCAL_ROWS` rows",
        minimum=0, maximum=1 << 34)
    delta_ratio: int = setting(
        20, "DBLOG_MERGE_DELTA_RATIO", "a merge whose touched buckets hold at least this many times the rows it "
        "brings leaves their data files in place: it writes the new rows beside them and an Iceberg position delete "
        "file naming the rows they replace (1,000 random keys into 10M rows: no longer a rewrite of every bucket); "
        "0: always rewrite the touched buckets", minimum=0, maximum=1_000_000)
    parallel_tables: int = setting(
        4, "DBLOG_MERGE_PARALLEL_TABLES", "tables a merge (continuous or single) merges at once in its Spark "
        "session (fair scheduling), so a big table's merge does not hold the others' freshness and one table's "
        "driver-side work overlaps another's tasks; 1: one after another",
        minimum=1, maximum=64)
    adopt_first_load: str = setting(
        "on", "DBLOG_MERGE_ADOPT_FIRST_LOAD", "a table's first load commits its dump's chunk files as its data files, "
        "neither read nor rewritten (a range dump of a table the warehouse does not hold yet stages them in the "
        "warehouse's form: Warehouse), where they "
        "match the table and its bucket size; `off`: dumps stage chunks without the warehouse's columns and a first load "
        "writes its buckets from them",
        choices=("on", "off"))
    first_load_wait_seconds: float = setting(
        600.0, "DBLOG_MERGE_FIRST_LOAD_WAIT_SECONDS", "a table that stores nothing yet is not merged while a range dump "
        "reads it (nor while its last windows wait for the capture): its first load is merged once, its chunk files "
        "adopted (Warehouse), not piecemeal, each merge after the first merging its chunks into stored buckets. A "
        "dump whose progress stood still this many seconds no longer holds the table back; 0: the table fills in as "
        "its chunks are staged", minimum=0, maximum=86_400)
    handoff_seconds: float = setting(
        120.0, "DBLOG_MERGE_HANDOFF_SECONDS", "a dump run's merge task leaves the dump's chunks to a continuous merge "
        "that beat within this many seconds (a handover between two slices included) and waits for it to merge "
        "them, instead of starting a Spark application of its own; it merges itself when that merge falls silent "
        "this long, leaves out or fails on one of the dump's tables, or counts no new chunk of the dump for "
        "`DBLOG_MERGE_LOCK_TIMEOUT`; 0: the task always merges itself", minimum=0, maximum=86_400)
    continuous_slice_seconds: int = setting(
        3600, "DBLOG_MERGE_SLICE_SECONDS", "length of one `dblog_merge_continuous` run (one warm Spark session); "
        "each handover costs a Spark start, and asset events are sent at the end of a slice",
        minimum=10, maximum=86_400)


@dataclass(frozen=True)
class Warehouse:
    catalog: str = setting(
        "", "DBLOG_ICEBERG_CATALOG", "Iceberg catalog of the warehouse tables (empty: a SQLite file, "
        "`catalog.db` in a local warehouse root, else under `.local/iceberg/` with `DBLOG_LOCAL=1`)",
        accepts="a SQLAlchemy URI (`sqlite:///…`, `postgresql+psycopg2://…`) or a REST catalog's `http(s)://…`")
    catalog_name: str = setting(
        "dblog", "DBLOG_ICEBERG_CATALOG_NAME", "the catalog's name (a JDBC catalog's `catalog_name`: Spark and "
        "Trino must use the same)", pattern=r"[A-Za-z_][A-Za-z0-9_]{0,63}", accepts="letters, digits and `_`")
    catalog_properties: str = setting(
        "", "DBLOG_ICEBERG_CATALOG_PROPERTIES", "the catalog's properties besides its URI, as pyiceberg names "
        "them: a REST catalog's `warehouse` (else the warehouse root), SigV4 signing (`rest.sigv4-enabled`, "
        "`rest.signing-name`, `rest.signing-region`), `credential`, `token` (see The warehouse)",
        string_map=True, accepts='a JSON object of strings, such as `{"rest.sigv4-enabled": "true"}`')
    keep_seconds: float = setting(
        14_400.0, "DBLOG_WAREHOUSE_KEEP_SECONDS", "how long `dblog maintain` keeps replaced snapshots (long "
        "queries and time travel read them)", minimum=0, maximum=31_536_000)
    keep_snapshots: int = setting(
        100, "DBLOG_WAREHOUSE_KEEP_SNAPSHOTS", "the most replaced snapshots a table keeps: past it, each merge "
        "keeps the newest half and thins the older ones to one per equal slot of the keep window (every "
        "commit rewrites the list of snapshots, so its length is each merge's cost)", minimum=10, maximum=100_000)
    keep_all_seconds: float = setting(
        600.0, "DBLOG_WAREHOUSE_KEEP_ALL_SECONDS", "no snapshot younger than this is thinned by "
        "`DBLOG_WAREHOUSE_KEEP_SNAPSHOTS` (a query planned on it a moment ago still finds it)", minimum=0,
        maximum=31_536_000)
    orphan_grace_seconds: float = setting(
        3600.0, "DBLOG_ORPHAN_GRACE_SECONDS", "files no snapshot references are removed once older than this "
        "(a running merge's files are not referenced yet)", minimum=0, maximum=31_536_000)
    compact_min_files: int = setting(
        4, "DBLOG_COMPACT_MIN_FILES", "`dblog maintain` rewrites a bucket holding more data files than this "
        "as one", minimum=1, maximum=100_000)
    keep_dropped_columns: str = setting(
        "off", "DBLOG_KEEP_DROPPED_COLUMNS", "`on`: a column dropped in the source stays in the warehouse table "
        "(null for rows changed since); `off`: the merge drops it from the table's current schema (older "
        "snapshots still hold it)", choices=("on", "off"))
    soft_delete_tables: str = setting(
        "", "DBLOG_SOFT_DELETE_TABLES", "tables whose deleted rows stay in the warehouse table with "
        "`_dblog_deleted = true` and the delete's position (empty: none, deletes remove rows; `*`: every table); "
        "set before a table's first merge (docs/warehouse.md)",
        accepts="`*` or comma-separated table names (`shop.orders`)")
    change_tables: str = setting(
        "", "DBLOG_CHANGE_TABLES", "tables that also get an append-only change table `{table}` in the namespace "
        "`{source}__changes`: every change merged (op, row, position, commit time, transaction id), partitioned by "
        "day (empty: none; `*`: every table)",
        accepts="`*` or comma-separated table names (`shop.orders`)")
    maintenance_schedule: str = setting(
        "@daily", "DBLOG_MAINTENANCE_SCHEDULE", "schedule of `dblog_maintenance` (empty: trigger only)",
        accepts=CRON)

    def soft_deletes(self, table: str) -> bool:
        return _listed(self.soft_delete_tables, table)

    def change_table(self, table: str) -> bool:
        return _listed(self.change_tables, table)


def _listed(listing: str, table: str) -> bool:
    """Whether a `*`-or-names setting names `table`."""
    names = {n.strip() for n in listing.split(",") if n.strip()}
    return "*" in names or table in names


@dataclass(frozen=True)
class Retention:
    window_seconds: float = setting(
        604_800.0, "DBLOG_LOG_RETENTION_SECONDS", "how long `dblog maintain` keeps merged changes in the staged log "
        "(how far back `dblog export --from` reaches) and finished dumps' chunks", minimum=3600,
        maximum=315_360_000)
    compact_bytes: int = setting(
        32 * 1024 * 1024, "DBLOG_LOG_COMPACT_BYTES", "`dblog maintain` rewrites runs of staged-log segments smaller "
        "than this (bytes) as segments of about this size", minimum=1024 * 1024, maximum=1024 * 1024 * 1024)
    compact_min_segments: int = setting(
        10, "DBLOG_LOG_COMPACT_MIN_SEGMENTS", "fewest small segments rewritten as one", minimum=2,
        maximum=1_000_000)
    replaced_grace_seconds: float = setting(
        3600.0, "DBLOG_LOG_REPLACED_GRACE_SECONDS", "segments a compaction replaced are removed once the compacted "
        "one is this old (a merge that listed them before may still read them)", minimum=0, maximum=604_800)


@dataclass(frozen=True)
class Spark:
    master: str = setting(
        "", "DBLOG_SPARK_MASTER", "Spark master of `dblog merge` and of dumps read on Spark (empty: "
        "spark-submit's, else `local[*]`)",
        accepts="a Spark master URL")
    driver_memory: str = setting(
        "4g", "DBLOG_SPARK_DRIVER_MEMORY", "driver memory of the merge (in process and spark-submit) and of a "
        "dump read on Spark",
        pattern=r"[0-9]+[kmgtp]?", accepts="a JVM size such as `512m` or `4g`")
    shuffle_partitions: int = setting(
        8, "DBLOG_SPARK_PARTITIONS", "shuffle partitions of the merge session", minimum=1, maximum=100_000)
    cores_max: int = setting(
        0, "DBLOG_SPARK_CORES_MAX", "most cores one dblog job takes on a standalone cluster (`spark.cores.max`): "
        "a continuous merge and a dump read on Spark at once each need some (0: Spark's default, every core free)",
        minimum=0, maximum=1_000_000)
    executor_env: str = setting(
        "", "DBLOG_SPARK_EXECUTOR_ENV", "the executors' Python environment on a cluster: an archive of it "
        "(`make executor-env` packs one with venv-pack), shipped with each job (`spark.archives`) with dblog's code "
        "as a zip, so executors read neither the driver's checkout nor its virtualenv (empty: executors run the "
        "driver's interpreter and code, as in local mode)",
        accepts="a path or URL of a `.tar.gz` made by venv-pack")
    log_level: str = setting(
        "WARN", "DBLOG_SPARK_LOG_LEVEL", "Spark's log level in dblog's jobs",
        choices=("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"))


@dataclass(frozen=True)
class ZooKeeper:
    session_timeout_seconds: float = setting(
        10.0, "DBLOG_ZK_SESSION_TIMEOUT", "seconds before a dead leader's lease expires and a standby takes over "
        "(a connection's `session_timeout` wins)", minimum=1, maximum=600)
    lease_wait_factor: float = setting(
        3.0, "DBLOG_ZK_LEASE_WAIT_FACTOR", "a resumed dump waits this many session timeouts for a dead worker's "
        "table lease", minimum=1, maximum=100)
    outage_seconds: float = setting(
        120.0, "DBLOG_ZK_OUTAGE_SECONDS", "how long a ZooKeeper call rides out a lost connection (the session "
        "and its leases outlive it) before failing", minimum=0, maximum=86_400)


@dataclass(frozen=True)
class Verify:
    schedule: str = setting(
        "@daily", "DBLOG_VERIFY_SCHEDULE", "schedule of `dblog_verify` (empty: trigger only)", accepts=CRON)
    page_rows: int = setting(
        5000, "DBLOG_VERIFY_PAGE_ROWS", "rows per compared key range (`dblog verify --page`)", minimum=1,
        maximum=1_000_000)
    chunk_size: int = setting(
        1000, "DBLOG_VERIFY_CHUNK_SIZE", "chunk size of the repair dumps a verify triggers (few keys each)",
        minimum=1, maximum="dump.max_chunk_size")


@dataclass(frozen=True)
class FullRefresh:
    schedule: str = setting(
        "@weekly", "DBLOG_FULL_REFRESH_SCHEDULE", "schedule of `dblog_full_refresh` (empty: trigger only)",
        accepts=CRON)
    chunk_size: int = setting(
        Dump.chunk_size, "DBLOG_FULL_REFRESH_CHUNK_SIZE", "chunk size of its scheduled runs (unset: "
        "`DBLOG_CHUNK_SIZE`)", minimum=1, maximum="dump.max_chunk_size", same_as="dump.chunk_size")
    delay_seconds: float = setting(
        0.0, "DBLOG_FULL_REFRESH_DELAY", "pause between chunks of its scheduled runs", minimum=0,
        maximum="dump.max_delay_seconds")


@dataclass(frozen=True)
class Settings:
    dump: Dump = field(default_factory=Dump)
    capture: Capture = field(default_factory=Capture)
    merge: Merge = field(default_factory=Merge)
    warehouse: Warehouse = field(default_factory=Warehouse)
    retention: Retention = field(default_factory=Retention)
    spark: Spark = field(default_factory=Spark)
    zookeeper: ZooKeeper = field(default_factory=ZooKeeper)
    verify: Verify = field(default_factory=Verify)
    full_refresh: FullRefresh = field(default_factory=FullRefresh)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Defaults, overridden by the variables set in `env` (default: the process's); ConfigError
        names the first variable whose value is not accepted."""
        env = os.environ if env is None else env
        raw = {name: env[spec.env] for name, spec, default in specs()
               if spec.env in env and (isinstance(default, str) or env[spec.env].strip())}
        values = {name: _parse(spec, raw[name], default) if name in raw else default
                  for name, spec, default in specs()}
        for name, spec, _ in specs():  # a setting that follows another follows its resolved value
            if spec.same_as and name not in raw:
                values[name] = values[spec.same_as]
        out = cls(**{group: kind(**{f.name: values[f"{group}.{f.name}"] for f in fields(kind)})
                     for group, kind in _groups()})
        for name, spec, _ in specs():
            shown = f"{spec.env}={raw[name]!r}" if name in raw else f"{spec.env} unset, so {values[name]!r},"
            out._check(name, spec, values[name], shown)
        return out

    def get(self, name: str) -> Any:
        group, attr = name.split(".")
        return getattr(getattr(self, group), attr)

    def bounds(self, name: str) -> tuple[Any, Any]:
        """The setting's accepted range, with bounds that are other settings resolved."""
        spec = _SPECS[name][0]
        low, high = (self.get(b) if isinstance(b, str) else b for b in (spec.minimum, spec.maximum))
        return low, high

    def cite(self, name: str) -> str:
        """The value and the variable that sets it, for help texts: `20,000, DBLOG_CHUNK_SIZE`."""
        return f"{_number(self.get(name))}, {_SPECS[name][0].env}"

    def range_text(self, name: str) -> str:
        low, high = self.bounds(name)
        return f"{_number(low)} to {_number(high)}"

    def check_option(self, flag: str, name: str, value: Any) -> None:
        """An option bounded as the setting that gives its default (ConfigError naming the flag)."""
        low, high = self.bounds(name)
        if not low <= value <= high:
            raise ConfigError(f"{flag} must be from {self.range_text(name)}, got {value}")

    def _check(self, name: str, spec: Spec, value: Any, shown: str) -> None:
        if spec.choices and value not in spec.choices:
            raise _refused(spec, shown, f"set one of {', '.join(spec.choices)}")
        if spec.pattern and not re.fullmatch(spec.pattern, value, re.I):
            raise _refused(spec, shown, f"set a value matching {spec.pattern}, such as {_SPECS[name][1]}")
        if spec.string_map and value and string_map(value) is None:   # (its value may hold a token: not shown)
            raise _refused(spec, spec.env, f"set {spec.accepts}")
        low, high = self.bounds(name)
        if low is not None and not low <= value <= high:
            limits = [_SPECS[b][0].env for b in (spec.minimum, spec.maximum) if isinstance(b, str)]
            raise _refused(spec, shown, f"set {_kind(value)} from {self.range_text(name)}"
                           + (f" ({' and '.join(limits)} bounds it)" if limits else ""))


def settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings in force: as the environment has them at each call, so a changed environment (a
    test, a DAG re-parse) takes effect. The process's are parsed again only when one of their
    variables changed (a merge asks some 20 times a table: parsing each time cost 12 ms a table)."""
    if env is not None:
        return Settings.from_env(env)
    global _last
    names = _env_names()
    seen = tuple(os.environ.get(name) for name in names)
    last = _last   # one read: another thread may replace it meanwhile
    if last is None or last[0] != seen:   # parsed from the values seen, so key and settings agree
        last = _last = (seen, Settings.from_env({n: v for n, v in zip(names, seen) if v is not None}))
    return last[1]


_last: tuple[tuple, Settings] | None = None   # the settings' variables as last seen, and their settings


@functools.cache
def _env_names() -> tuple[str, ...]:
    return tuple(spec.env for _, spec, _ in specs())


def _groups() -> list[tuple[str, type]]:
    return [(g.name, g.default_factory) for g in fields(Settings)]  # type: ignore[misc]


def specs() -> Iterator[tuple[str, Spec, Any]]:
    """("group.field", spec, default) of every setting, in declaration order."""
    for group, kind in _groups():
        for f in fields(kind):
            yield f"{group}.{f.name}", f.metadata["spec"], f.default


def _parse(spec: Spec, raw: str, default: Any) -> Any:
    kind = type(default)
    if kind is str:
        return raw.strip()
    try:
        value = kind(raw.strip())
    except ValueError:
        raise _refused(spec, f"{spec.env}={raw!r}", f"set {_kind(default)}") from None
    if isinstance(value, float) and not math.isfinite(value):  # NaN passes no range check
        raise _refused(spec, f"{spec.env}={raw!r}", "set a finite number")
    return value


def string_map(text: str) -> dict[str, str] | None:
    """A JSON object whose values are all strings, as a dict (empty text: empty); None: it is not one."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return value if ok else None


def _refused(spec: Spec, shown: str, fix: str) -> ConfigError:
    return ConfigError(f"{shown} is not accepted: {fix} (it sets: {spec.help})")


def _kind(value: Any) -> str:
    return "a whole number" if isinstance(value, int) else "a number"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def markdown_table() -> str:
    """The table of tunables in docs/configuration.md: variable, meaning, default, what it accepts."""
    rows = ["| variable | meaning | default | accepts |", "|---|---|---|---|"]
    rows += [f"| `{spec.env}` | {spec.help} | {_default_text(spec, default)} | {_accepts_text(spec)} |"
             for _, spec, default in specs()]
    return "\n".join(rows)


def _default_text(spec: Spec, default: Any) -> str:
    if spec.same_as:
        return f"`{_SPECS[spec.same_as][0].env}`"
    if isinstance(default, str):
        return f"`{default}`" if default else "empty"
    return _number(default)


def _accepts_text(spec: Spec) -> str:
    if spec.accepts or spec.choices:
        return spec.accepts or ", ".join(spec.choices)
    low, high = (f"`{_SPECS[b][0].env}`" if isinstance(b, str) else _number(b) for b in (spec.minimum, spec.maximum))
    return f"{low} to {high}"


_SPECS = {name: (spec, default) for name, spec, default in specs()}


if __name__ == "__main__":  # docs/configuration.md's table: python -m dblog.settings
    print(markdown_table())
