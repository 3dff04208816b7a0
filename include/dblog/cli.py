"""`dblog`: drive the engine from a shell (the Airflow operators call the same functions)."""
from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import time
from typing import Any

from . import connections
from .coordination.checkpoint import checkpoint_position
from .capture.capture_loop import Capture
from .coordination.checkpoint import ensure_checkpoint, reset_checkpoint
from .operations.export import export
from .snapshot.dump import control_changes, create_dump, dump_status, run_dump, set_control
from .snapshot.dump_spec import DumpError, DumpSpec, check_finite, qualified
from .errors import DBLogError, UsageError
from .settings import DUMP_ID, ConfigError, settings
from .model.positions import Position
from .sources.base import SourceError
from .operations.staged_maintenance import size_text
from .stagedlog.staged_log import StagedLog
from .coordination.store import Fenced, StateStore, dump_path
from .operations.status import source_status

log = logging.getLogger("dblog")


def _store() -> StateStore:
    zk = connections.zookeeper()
    return StateStore(zk.hosts, zk.chroot, timeout=zk.session_timeout).start()


def _keys(text: str | None):
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:]) as f:
                raw = f.read()
        except OSError as exc:  # missing, unreadable, a directory: the user's input, not a crash
            raise DumpError(f"--keys {text}: cannot read {text[1:]} ({exc.strerror or exc}); give a readable "
                            "JSON file (such as the repair.keys of `dblog verify --json`) or the JSON itself") from None
    else:
        raw = text
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DumpError(f"--keys is not valid JSON ({exc.msg} at column {exc.colno}); "
                        "give a JSON array such as '[1, 2]' or '[[1, \"a\"]]', or @file.json") from None


def cmd_capture(args) -> int:
    _within("--flush-rows", "capture.flush_rows", args.flush_rows)
    _within("--flush-seconds", "capture.flush_seconds", args.flush_seconds)
    source = connections.source(_source_id(args.source, "capture"))
    # Settings a capture needs are resolved before ZooKeeper is touched: a missing one changes nothing.
    staged, warehouse = (None, None) if args.reset or args.init else (StagedLog(connections.staging_root()), _warehouse())
    with _store() as store:
        if args.reset:
            reset_checkpoint(store, source)
            print(f"{source.name}: checkpoint reset; run a full dump of every table to repair the gap")
            return 0
        if args.init:
            print(json.dumps(ensure_checkpoint(store, source).as_json(), default=str))
            return 0
        stopped = False

        def stop(*_):
            nonlocal stopped
            stopped = True
            capture.stop()

        signal.signal(signal.SIGTERM, stop)
        while True:
            assert staged is not None  # resolved above for every capture that runs
            capture = Capture(source, store, staged, flush_rows=args.flush_rows,
                              flush_seconds=args.flush_seconds, repairs=not args.no_repair, warehouse=warehouse)
            try:
                stats = capture.run(duration=args.duration, until_watermark=args.until_watermark)
                break
            except Fenced as exc:
                # Our ZooKeeper session ended (a long outage): another capture may lead now. Queue
                # for the lease again; whoever leads resumes from the fenced checkpoint.
                if stopped or args.duration is not None or args.until_watermark is not None:
                    raise
                log.warning("%s: %s; standing by to lead again", source.name, exc)
        print(json.dumps(stats.__dict__))
    return 0


class _LazyWarehouse:
    """Where a repair finds the rows a statement-logged DELETE or a TRUNCATE left behind, opened
    on first use: a capture rarely needs it, and loading the Iceberg stack into a running capture
    at start made it stall after a source restart (tests/engine/test_faults.py)."""

    def __init__(self, root: str):
        self.root = root
        self._real: Any = None

    def __getattr__(self, name: str):
        if self._real is None:
            from .warehouse.tables import Warehouse
            self._real = Warehouse(self.root)
        return getattr(self._real, name)


def _warehouse():
    return _LazyWarehouse(connections.warehouse_root())


def cmd_repair(args) -> int:
    from .snapshot.repair import Repairer, waiting
    source = connections.source(_source_id(args.source, "repair"))
    staged, warehouse = StagedLog(connections.staging_root()), _warehouse()
    with _store() as store:
        ran = Repairer(store, source, staged, warehouse=warehouse).run_once()
        print(json.dumps({"ran": ran, "waiting": waiting(store, source.name)}, default=str))
    return 0


def _source_id(given: str | None, command: str) -> str:
    """`--source`, else the one configured source: with several, guessing one could act on the
    wrong database, so the user says which."""
    if given:
        return given
    ids = connections.source_ids()
    if len(ids) == 1:
        return ids[0]
    raise ConfigError(f"`dblog {command}` needs --source ID: the configured sources (DBLOG_SOURCES) are "
                             f"{', '.join(ids) or 'none'}")


def _dump_spec(args) -> DumpSpec | None:
    """The dump `dblog dump start` asks for (None: `run` resumes an existing one)."""
    if args.action == "run":
        if not args.dump_id:
            raise DumpError("`dblog dump run` needs the dump id (see `dblog status`)")
        return None
    if args.all and args.table:
        raise DumpError("give either --all or --table, not both")
    if not args.all and not args.table:
        raise DumpError("say what to dump: --table T (repeatable), --all, or --table T --keys JSON")
    if args.exclude and not args.all:
        raise DumpError("--exclude goes with --all (with --table, name only the tables to dump)")
    return DumpSpec(tables=args.table or [], keys=_keys(args.keys), chunk_size=args.chunk_size,
                    delay_s=0.0 if args.delay is None else args.delay, parallelism=args.parallelism,
                    dump_id=args.dump_id,
                    exclude=_listed(args.exclude))


def cmd_dump(args) -> int:
    source = connections.source(_source_id(args.source, "dump"))
    if args.action in ("pause", "resume", "cancel", "throttle"):
        if not args.dump_id:
            raise DumpError(f"`dblog dump {args.action}` needs the dump id (see `dblog status`)")
        if not DUMP_ID.match(args.dump_id):
            raise DumpError(f"{args.dump_id!r} is not a dump id: dump ids are 1-64 letters, digits, '.', '_' or "
                            "'-' (`dblog status` lists them)")
        changes = control_changes(args.action, args.chunk_size, args.delay,  # checked before ZooKeeper
                                  args.parallelism)
        with _store() as store:
            print(json.dumps(set_control(store, source.name, args.dump_id, **changes)))
        return 0
    # Every check of the input comes before the first write: a checkpoint, a slot or a dump that
    # bad input created would outlive the error (a slot holds WAL for ever).
    spec = _dump_spec(args)
    staged = StagedLog(connections.staging_root())
    with _store() as store:
        if spec is None:
            dump_id = args.dump_id
            if store.get(dump_path(source.name, dump_id)) is None:
                raise DumpError(f"no dump {dump_id} on {source.name}; `dblog status` lists the dumps")
            ensure_checkpoint(store, source)  # fail closed if the source broke or lost history since
        else:
            dump_id = create_dump(store, source, spec)  # validates, then sets up the checkpoint
            print(f"dump {dump_id} created on {source.name}", file=sys.stderr)
            for skipped in dump_status(store, source.name, dump_id)["skipped"]:
                print(f"dblog: skipped {skipped['table']}: {skipped['reason']}", file=sys.stderr)
            if args.create_only:
                print(dump_id)
                return 0

        def report(p, n):
            log.info("%s %s: chunk %d, %d rows (%d total, %.0f rows/s)", dump_id, p.table, p.chunks, n, p.rows,
                     p.rows_per_s)
        # A resumed run waits for a crashed worker's lease to expire with its ZooKeeper session.
        wait = connections.zookeeper().takeover_wait if args.action == "run" else 0
        run_dump(store, source, staged, dump_id, args.table if args.action == "run" else None, report, wait)
        print(json.dumps(dump_status(store, source.name, dump_id), default=str))
    return 0


def cmd_status(args) -> int:
    out = {}
    staged = StagedLog(connections.staging_root())
    with _store() as store:
        for sid in ([args.source] if args.source else connections.source_ids()):
            out[sid] = source_status(store, connections.source(sid), staged)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        for sid, st in out.items():
            cap = st["capture"]
            standby = f", standby {', '.join(cap['standby'])}" if cap["standby"] else ""
            lag = "unknown (no checkpoint yet)" if cap["lag_s"] is None else f"{cap['lag_s']}s"
            print(f"{sid}: capture {cap['state']}, leader {cap['leader'] or '-'}{standby}, position "
                  f"{cap['readable_position'] or '-'}, lag {lag}")
            kept = st["staged"]
            print(f"  staged log: {kept['files']} file(s), {size_text(kept['bytes'])}, oldest retained position "
                  f"{kept['oldest'] or '-'}")
            for d in st["dumps"]:
                tables = ", ".join(f"{t} {p['status']} {p['rows']} rows/{p['chunks']} chunks"
                                   + (f" ({p['fallback_chunks']} read by the Python driver: the native reader gave "
                                      "up on them)" if p.get("fallback_chunks") else "")
                                   for t, p in d["tables"].items() if p)
                print(f"  dump {d['id']}: {d['state']}; {tables}")
            for table, w in st["repairs"].items():
                what = "every row" if w["whole_table"] else f"{w['keys']} key(s), e.g. {w['sample'][:5]}"
                dumps = ", ".join(f"{d['id']} {d['state']}" for d in w["dumps"]) or "queued"
                print(f"  repair of {table} waits: {what} ({dumps}): {'; '.join(w['reasons'])}")
    return 0


def cmd_export(args) -> int:
    source = connections.source(_source_id(args.source, "export"))
    table = qualified(source, args.table)
    if args.from_position is not None:
        try:
            Position.decode(args.from_position)
        except ValueError:
            raise ConfigError(f"--from {args.from_position!r} is not a position: give one as `dblog status` "
                                     "shows them (three groups of 10, 20 and 10 digits joined by '-')") from None
    staged = StagedLog(connections.staging_root())
    with _store() as store:
        upto = checkpoint_position(store, source.name)
        out = open(args.output, "w") if args.output else sys.stdout
        try:
            lines = export(store, staged, source.name, table, out, upto, args.from_position)
        finally:
            if args.output:
                out.close()
    print(f"exported {lines} events of {table}", file=sys.stderr)
    return 0


def _known_tables(source, staged: StagedLog, tables: list[str]) -> None:
    """Refuse tables neither the source nor the staged log knows, before anything is started or
    written (a merge lock, a catalog entry, a Spark session)."""
    from .merge.job import staged_tables   # the module only: no Spark session starts
    known = set(staged_tables(staged, source.name))
    unknown = [t for t in tables if t not in known]
    if unknown:
        try:
            known |= set(source.tables())
        finally:
            source.close()
        unknown = [t for t in unknown if t not in known]
    if unknown:
        raise ConfigError(f"{source.name}: no table {', '.join(unknown)}; known tables: "
                                 f"{', '.join(sorted(known)) or 'none'}")


def _table_of(source_id: str, table: str) -> str:
    """`qualified`, reading the source's connection only for a bare table name (a warehouse
    command on `schema.table` works without it)."""
    return table if "." in table else qualified(connections.source(source_id), table)


def cmd_merge(args) -> int:
    from .merge.job import merge_source
    from .spark.session import LONG_RUNNING, session
    from .warehouse.tables import Warehouse
    _within("--bucket-rows", "merge.bucket_rows", args.bucket_rows)
    if args.continuous:
        if args.every is not None:
            _within("--every", "merge.continuous_every_seconds", args.every)
        if args.duration is not None and args.duration <= 0:
            raise UsageError(f"--duration must be > 0 seconds, got {args.duration:g} (leave it out to run until stopped)")
    elif args.duration is not None or args.every is not None:
        raise UsageError("--duration and --every need --continuous (a single merge ends when it is done)")
    sources = [connections.source(s) for s in (_listed(args.source) or connections.source_ids())]
    tables = {src.name: [qualified(src, t) for t in _listed(args.table)] or None for src in sources}
    staged, warehouse = StagedLog(connections.staging_root()), Warehouse(connections.warehouse_root())
    for src in sources:
        _known_tables(src, staged, tables[src.name] or [])
    spark = session("dblog-merge", args.master, LONG_RUNNING if args.continuous else None)
    results: list[dict] = []
    with _store() as store:
        if args.continuous:
            return _merge_continuously(args, spark, store, staged, warehouse, tables)
        for source, chosen in tables.items():
            for r in merge_source(spark, store, staged, warehouse, source, chosen, bucket_rows=args.bucket_rows):
                results.append(r.report())
                print(r.summary())
    _write_report(args.report, results)
    return 0


def _merge_continuously(args, spark, store, staged, warehouse, tables) -> int:
    """`dblog merge --continuous`: merge every few seconds until --duration ends or SIGTERM/SIGINT
    (the cycle under way finishes first)."""
    import threading

    from .merge.continuous import ContinuousMerge
    stop = threading.Event()

    def on_signal(*_):
        if stop.is_set():   # asked twice: do not wait for the cycle under way
            raise KeyboardInterrupt
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    every = args.every if args.every is not None else settings().merge.continuous_every_seconds
    print(f"continuous merge of {', '.join(tables)} every {every:g}s"
          + ("" if args.duration is None else f" for {args.duration:g}s"), flush=True)
    merge = ContinuousMerge(spark, store, staged, warehouse, tables, every=every, bucket_rows=args.bucket_rows,
                            say=lambda line: print(line, flush=True), stop=stop)
    report = merge.run(args.duration)
    cycles = sorted(report.cycle_seconds)
    print(f"slice done: {report.cycles} cycles, {report.busy_cycles} merged something (cycle time p50 "
          f"{cycles[len(cycles) // 2] if cycles else 0:.1f}s, max {cycles[-1] if cycles else 0:.1f}s); "
          + "; ".join(f"{t['source']} {t['table']}: {t['commits']} snapshots, {t['log_events']} log events, "
                      f"{t['chunks']} chunks" for t in report.results()), flush=True)
    _write_report(args.report, report.results())
    if report.failures:   # the report keeps every table's result: what committed still counts
        for (source, table), why in report.failures.items():
            print(f"dblog: error: the continuous merge of {source} {table} kept failing: {why}", file=sys.stderr)
        return SLICE_FAILED
    return 0


SLICE_FAILED = 3   # `dblog merge --continuous`: some table's last merge failed; its report says which


def _write_report(path: str | None, results: list[dict]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, default=str)


def _listed(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated option values (`--source a,b --source c`)."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def cmd_verify(args) -> int:
    from .operations.verify import compare_warehouse
    from .warehouse.tables import Warehouse
    _within("--page", "verify.page_rows", args.page)
    warehouse = Warehouse(connections.warehouse_root())
    drift = unmerged = False
    for sid in [args.source] if args.source else connections.source_ids():  # default: every configured source
        result = _verify_source(args, connections.source(sid), warehouse, compare_warehouse)
        unmerged |= result is None
        drift |= bool(result)
    return 2 if unmerged else 1 if drift else 0


def _verify_source(args, source, warehouse, compare_warehouse) -> bool | None:
    """Compare one source's warehouse tables; whether any drifted, None if it has none yet."""
    tables = [qualified(source, t) for t in args.table] if args.table else warehouse.tables(source.name)
    if not tables:
        print(f"dblog: error: {source.name} has no warehouse tables yet; run `dblog merge` first", file=sys.stderr)
        return None
    drift = False
    for table in tables:
        diff = compare_warehouse(source, warehouse, table, args.page)
        drift |= not diff.equal
        if args.json:
            print(json.dumps({"source": source.name, "table": table, "equal": diff.equal,
                              "source_rows": diff.source_rows, "warehouse_rows": diff.staged_rows,
                              "ranges": diff.ranges, "drifted": [vars(r) for r in diff.drifted],
                              "repair": diff.repair()}, default=str))
            continue
        print(f"{source.name} {table}: {'equal' if diff.equal else 'DRIFT'} - source {diff.source_rows} rows, "
              f"warehouse {diff.staged_rows} rows, {len(diff.drifted)} of {diff.ranges} key ranges differ")
        for r in diff.drifted:
            print(f"  keys {r.first} .. {r.last}: source {r.source_rows} rows (hash {r.source_hash}), "
                  f"warehouse {r.copy_rows} rows (hash {r.copy_hash})")
        if diff.extra:
            print(f"  {len(diff.extra)} keys only in the warehouse, e.g. {diff.extra[:5]}")
        if not diff.equal:
            print(f"  repair: dblog dump --source {source.name} --table {table} --keys @keys.json "
                  "(the repair.keys of `dblog verify --json`), then dblog merge")
    return drift


def cmd_maintain(args) -> int:
    """Expire old snapshots, compact buckets of many files and sweep unreferenced files, per table
    under its merge lease (`dblog.warehouse.table_maintenance`); then the source's staged log: retention,
    finished dumps, compaction (`dblog.operations.staged_maintenance`)."""
    from .operations.staged_maintenance import maintain_staged
    from .warehouse.table_maintenance import maintain_source
    from .warehouse.tables import Warehouse
    opts = {"keep_seconds": args.keep_seconds, "orphan_grace_seconds": args.orphan_grace,
            "compact_min_files": args.compact_min_files}
    for (flag, setting), value in zip(MAINTAIN_FLAGS, [*opts.values(), args.log_retention]):
        if value is not None:
            _within(flag, setting, value)
    warehouse, staged = Warehouse(connections.warehouse_root()), StagedLog(connections.staging_root())
    with _store() as store:
        for sid in [args.source] if args.source else connections.source_ids():  # default: every configured source
            tables = [_table_of(sid, t) for t in args.table] if args.table else None
            for report in maintain_source(store, warehouse, sid, tables, dry_run=args.dry_run, **opts):
                print(report.line())
            print(maintain_staged(store, staged, warehouse, sid, tables=tables, window_seconds=args.log_retention,
                                  dry_run=args.dry_run).line())
    return 0


MAINTAIN_FLAGS = [("--keep-seconds", "warehouse.keep_seconds"), ("--orphan-grace", "warehouse.orphan_grace_seconds"),
                  ("--compact-min-files", "warehouse.compact_min_files"),
                  ("--log-retention", "retention.window_seconds")]


def cmd_warehouse(args) -> int:
    """`ls`: each warehouse table's Iceberg identifier, snapshot, rows and metadata file; `drop`: one
    table and its files, under its merge lease (a running merge cannot commit into it)."""
    from .warehouse.tables import Warehouse
    warehouse = Warehouse(connections.warehouse_root())
    if args.action == "drop":
        from .warehouse.table_maintenance import merge_lease
        table = _table_of(args.source, args.table)
        with _store() as store, merge_lease(store, args.source, table):
            dropped = warehouse.drop(args.source, table)
        print(f"{args.source} {table}: " + ("dropped, with its files" if dropped else "no such warehouse table"))
        return 0 if dropped else 1
    for sid in [args.source] if args.source else connections.source_ids():
        for table in warehouse.tables(sid):
            t = warehouse.load(sid, table)
            head = t.current_snapshot() if t is not None else None
            if head is None:
                continue   # dropped since it was listed
            print(f"{sid} {table}: identifier {json.dumps(list(warehouse.identifier(sid, table)))}, snapshot "
                  f"{head.snapshot_id}, {head.summary['total-records'] or 0} rows, metadata {t.metadata_location}")
    return 0


def cmd_setup(args) -> int:
    """Check every source and create what the capture user may create; what only an administrator
    may do is printed as the exact statements. `--print-sql`: the whole set-up, changing nothing."""
    failed = False
    for sid in ([args.source] if args.source else connections.source_ids()):
        source = connections.source(sid)
        try:
            if args.print_sql:
                print("\n".join(source.setup_sql()) + "\n")
                continue
            notes = source.preflight(create=True)
            print(f"{sid}: ready" + (f" ({'; '.join(notes)})" if notes else ""))
        except SourceError as exc:  # report every source, not just the first that is not ready
            print(f"dblog: error: {exc}", file=sys.stderr)
            failed = True
        finally:
            source.close()
    return 2 if failed else 0


def cmd_sync(args) -> int:
    """Write a sync watermark on each source, then wait until its capture has checkpointed past
    it: from then on every commit made before `dblog sync` started is staged."""
    from .capture.capture_loop import await_sync, sync_point
    from .coordination.health import capture_health, sync_timeout_reason
    from .snapshot.repair import not_landed, waiting
    if not (math.isfinite(args.timeout) and args.timeout >= 0):
        raise ConfigError(f"--timeout must be a finite number of seconds >= 0, got {args.timeout}")
    sources = [connections.source(sid) for sid in ([args.source] if args.source else connections.source_ids())]
    staged, failed = StagedLog(connections.staging_root()), False
    with _store() as store:
        started = time.monotonic()
        marks = []
        for source in sources:
            # As a dump does: on first use the checkpoint starts at the log's end before the mark
            # is written, so a capture starting at the head later still reads the mark.
            ensure_checkpoint(store, source)
            marks.append((source.name, sync_point(source)))
            source.close()
        for name, mark in marks:
            position = await_sync(store, staged, name, mark, max(0.0, started + args.timeout - time.monotonic()))
            health = capture_health(store, name)
            if position is None:
                print("dblog: error: " + sync_timeout_reason(
                    health, time.monotonic() - started, start=f"start it (`dblog capture --source {name}`)",
                    behind="see its log (if it says it skips the watermarks of another deployment, give every "
                           "process of this deployment the same ZooKeeper chroot and DBLOG_DEPLOYMENT), or raise "
                           "--timeout"), file=sys.stderr)
                failed = True
                continue
            print(f"{name}: synced at position {position} (checkpoint {health.readable_position})")
            # Staged is not merged: a table whose repair has not landed is not in sync yet, say so.
            for table, w in waiting(store, name).items():
                print(f"  {table} is not in sync yet: {not_landed(w)}")
    return 1 if failed else 0


def _within(flag: str, setting: str, value: float) -> None:
    """An option bounded as the setting that gives its default."""
    tuned = settings()
    low, high = tuned.bounds(setting)
    if not low <= value <= high:
        raise ConfigError(f"{flag} must be from {tuned.range_text(setting)}, got {value}")


def _finite(text: str) -> float:
    """A number of seconds for argparse: NaN would compare false against every deadline (a capture
    slice that never ends), so it is refused as the dump's numbers are (`check_finite`)."""
    value = float(text)
    try:
        check_finite(value, "a number of seconds")
    except DumpError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


SOURCE_HELP = "connection id (default: the configured source, when DBLOG_SOURCES lists exactly one)"


def parser() -> argparse.ArgumentParser:
    tuned = settings()  # every option's default
    p = argparse.ArgumentParser(prog="dblog", description="DBLog watermark change-data capture")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("capture", help="stream the source's log into the staged change log")
    c.add_argument("--source", help=SOURCE_HELP)
    c.add_argument("--duration", type=_finite, help="stop after this many seconds (default: run until stopped)")
    c.add_argument("--until-watermark", help="stop once this watermark value is staged")
    c.add_argument("--flush-rows", type=int, default=tuned.capture.flush_rows,
                   help=f"events per staged batch at most (default {tuned.cite('capture.flush_rows')})")
    c.add_argument("--flush-seconds", type=_finite, default=tuned.capture.flush_seconds,
                   help=f"seconds a batch waits at most (default {tuned.cite('capture.flush_seconds')})")
    c.add_argument("--init", action="store_true", help="check the source and set the checkpoint, then exit")
    c.add_argument("--reset", action="store_true", help="forget the checkpoint after lost history")
    c.add_argument("--no-repair", action="store_true",
                   help="queue repairs (partial row images, statement-logged writes) but leave running them "
                        "to `dblog repair`")
    c.set_defaults(func=cmd_capture)

    r = sub.add_parser("repair", help="run the queued repairs once (the capture's leader runs them by itself)")
    r.add_argument("--source", help=SOURCE_HELP)
    r.set_defaults(func=cmd_repair)

    d = sub.add_parser("dump", help="watermark chunk dumps: start, run, pause, resume, cancel, throttle")
    d.add_argument("action", nargs="?", default="start",
                   choices=["start", "run", "pause", "resume", "cancel", "throttle"])
    d.add_argument("dump_id", nargs="?", help="the dump's id (for run/pause/resume/cancel/throttle; optional for start)")
    d.add_argument("--source", help=SOURCE_HELP)
    d.add_argument("--table", action="append", help="table to dump (repeatable); schema.table or table")
    d.add_argument("--all", action="store_true", help="every table of the source (tables it cannot dump, "
                                                      "such as one without a primary key, are skipped and listed)")
    d.add_argument("--exclude", action="append", help="with --all: a table to leave out (repeatable or comma-separated)")
    d.add_argument("--keys", help="JSON array of primary keys (or @file.json), with one --table")
    d.add_argument("--chunk-size", type=int, help=f"rows per chunk, {tuned.range_text('dump.chunk_size')} "
                                                  f"(default {tuned.cite('dump.chunk_size')})")
    d.add_argument("--delay", type=float,
                   help=f"seconds between chunks, 0 to {tuned.dump.max_delay_seconds} (default 0)")
    d.add_argument("--parallelism", type=int,
                   help=f"key ranges a window reads at once, each on its own connection (a window reads about "
                        f"chunk size x parallelism rows), {tuned.range_text('dump.parallelism')} "
                        f"(default {tuned.cite('dump.parallelism')})")
    d.add_argument("--create-only", action="store_true", help="register the dump, print its id, do not run it")
    d.set_defaults(func=cmd_dump)

    s = sub.add_parser("status", help="capture position and lag, dumps and their progress")
    s.add_argument("--source")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    e = sub.add_parser("export", help="a table's reconciled change stream (paper's output order) as NDJSON")
    e.add_argument("--source", help=SOURCE_HELP)
    e.add_argument("--table", required=True)
    e.add_argument("--from", dest="from_position", help="first position to export (as `dblog status` shows them)")
    e.add_argument("--output", help="file to write (default: standard output)")
    e.set_defaults(func=cmd_export)

    m = sub.add_parser("merge", help="merge staged changes and dump chunks into the warehouse (Spark)")
    m.add_argument("--source", action="append", help="connection id (repeatable or comma-separated; default: every configured source)")
    m.add_argument("--table", action="append", help="table to merge (repeatable; default: every staged table)")
    m.add_argument("--bucket-rows", type=int, default=tuned.merge.bucket_rows,
                   help=f"rows per warehouse bucket before it splits (default {tuned.cite('merge.bucket_rows')})")
    m.add_argument("--master", help="Spark master (default: spark-submit's, else DBLOG_SPARK_MASTER, else local[*])")
    m.add_argument("--report", help="write the per-table results to this file as JSON")
    m.add_argument("--continuous", action="store_true", help="keep merging every --every seconds in one Spark "
                   "session, until --duration ends or SIGTERM")
    m.add_argument("--every", type=_finite, help="seconds between continuous merge cycles "
                   f"({tuned.range_text('merge.continuous_every_seconds')}; default "
                   f"{tuned.cite('merge.continuous_every_seconds')})")
    m.add_argument("--duration", type=_finite, help="with --continuous: stop after this many seconds "
                   "(default: run until stopped)")
    m.set_defaults(func=cmd_merge)

    v = sub.add_parser("verify", help="compare source and warehouse per key range; exit 1 on drift")
    v.add_argument("--source", help="connection id (default: every configured source)")
    v.add_argument("--table", action="append", help="table to check (repeatable; default: every warehouse table)")
    v.add_argument("--page", type=int, default=tuned.verify.page_rows,
                   help=f"rows per key range (default {tuned.cite('verify.page_rows')})")
    v.add_argument("--json", action="store_true", help="one JSON object per table, with the keys to repair")
    v.set_defaults(func=cmd_verify)

    mt = sub.add_parser("maintain", help="warehouse upkeep: expire old snapshots, compact buckets of many files, "
                                         "delete files no snapshot references (per table, under its merge lock); "
                                         "staged log upkeep: retention, finished dumps, compaction of small segments")
    mt.add_argument("--source", help="connection id (default: every configured source)")
    mt.add_argument("--table", action="append", help="table to maintain (repeatable; default: every warehouse table, "
                                                     "the whole staged log and its finished dumps)")
    mt.add_argument("--keep-seconds", type=_finite, help="expire snapshots older than this "
                    f"({tuned.range_text('warehouse.keep_seconds')}; default {tuned.cite('warehouse.keep_seconds')})")
    mt.add_argument("--orphan-grace", type=_finite, help="delete unreferenced files older than this many seconds "
                    f"({tuned.range_text('warehouse.orphan_grace_seconds')}; default "
                    f"{tuned.cite('warehouse.orphan_grace_seconds')})")
    mt.add_argument("--compact-min-files", type=int, help="compact a bucket holding more data files than this "
                    f"(default {tuned.cite('warehouse.compact_min_files')})")
    mt.add_argument("--log-retention", type=_finite, help="keep merged changes in the staged log this many seconds, "
                    "the reach of `dblog export --from`, and finished dumps' chunks as long "
                    f"({tuned.range_text('retention.window_seconds')}; default {tuned.cite('retention.window_seconds')})")
    mt.add_argument("--dry-run", action="store_true", help="report what would be done, change nothing")
    mt.set_defaults(func=cmd_maintain)

    w = sub.add_parser("warehouse", help="the warehouse's Iceberg tables: list them, or drop one")
    wsub = w.add_subparsers(dest="action", required=True)
    wl = wsub.add_parser("ls", help="identifier, current snapshot, rows and metadata file of each table")
    wl.add_argument("--source", help="connection id (default: every configured source)")
    wd = wsub.add_parser("drop", help="remove a table and its files (a full dump rebuilds it)")
    wd.add_argument("--source", required=True, help="connection id")
    wd.add_argument("--table", required=True, help="schema.table or table")
    w.set_defaults(func=cmd_warehouse)

    u = sub.add_parser("setup", help="check sources; create the watermark table, publication and slot where "
                                     "allowed, else print the statements an administrator runs")
    u.add_argument("--source")
    u.add_argument("--print-sql", action="store_true",
                   help="print the whole least-privilege set-up an administrator runs first; change nothing")
    u.set_defaults(func=cmd_setup)

    y = sub.add_parser("sync", help="write a sync watermark and wait until the capture has passed it")
    y.add_argument("--source", help="connection id (default: every configured source)")
    y.add_argument("--timeout", type=float, default=tuned.capture.sync_timeout_seconds,
                   help=f"seconds to wait (default {tuned.cite('capture.sync_timeout_seconds')}); then exit 1 "
                        "saying what the capture is doing")
    y.set_defaults(func=cmd_sync)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        cli = parser()
    except ConfigError as exc:  # a bad DBLOG_* setting: the options' defaults come from them
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        return args.func(args)
    except DBLogError as exc:  # what the engine refuses or cannot reach; anything else is a bug: its traceback shows
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
