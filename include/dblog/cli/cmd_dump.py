"""`dblog dump`: start, run, pause, resume, cancel or throttle a watermark chunk dump."""
from __future__ import annotations

import json
import logging
import sys

from .. import connections
from ..coordination.checkpoint import ensure_checkpoint
from ..coordination.store import dump_path
from ..settings import DUMP_ID
from ..snapshot.dump import DONE, control_changes, create_dump, dump_status, run_dump, set_control
from ..snapshot.dump_spec import DumpError, DumpSpec
from ..stagedlog.staged_log import StagedLog
from . import cli_options as opts
from .cli_progress import Bars

log = logging.getLogger("dblog")


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
                    exclude=opts.listed(args.exclude))


def cmd_dump(args) -> int:
    source = connections.source(opts.source_id(args.source, "dump"))
    if args.action in ("pause", "resume", "cancel", "throttle"):
        if not args.dump_id:
            raise DumpError(f"`dblog dump {args.action}` needs the dump id (see `dblog status`)")
        if not DUMP_ID.match(args.dump_id):
            raise DumpError(f"{args.dump_id!r} is not a dump id: dump ids are 1-64 letters, digits, '.', '_' or "
                            "'-' (`dblog status` lists them)")
        changes = control_changes(args.action, args.chunk_size, args.delay,  # checked before ZooKeeper
                                  args.parallelism)
        with opts.store() as store:
            print(json.dumps(set_control(store, source.name, args.dump_id, **changes)))
        return 0
    # Every check of the input comes before the first write: a checkpoint, a slot or a dump that
    # bad input created would outlive the error (a slot holds WAL for ever).
    spec = _dump_spec(args)
    staged = StagedLog(connections.staging_root())
    with opts.store() as store:
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

        with Bars() as bars:
            def report(p, n):
                if bars.live:   # the bar says it, without a line per chunk
                    bars.rows(f"{dump_id} {p.table}", p.rows, p.estimated_rows, p.recent_rows_per_s)
                    return
                log.info("%s %s: chunk %d, %d rows (%d total, %.0f rows/s)", dump_id, p.table, p.chunks, n, p.rows,
                         p.rows_per_s)
            # A resumed run waits for a crashed worker's lease to expire with its ZooKeeper session.
            wait = connections.zookeeper().takeover_wait if args.action == "run" else 0
            for p in run_dump(store, source, staged, dump_id, args.table if args.action == "run" else None, report,
                              wait):
                bars.rows(f"{dump_id} {p.table}", p.rows, p.estimated_rows, p.recent_rows_per_s, done=p.status == DONE)
        print(json.dumps(dump_status(store, source.name, dump_id), default=str))
    return 0


def add_dump(sub, tuned) -> None:
    d = sub.add_parser("dump", help="watermark chunk dumps: start, run, pause, resume, cancel, throttle")
    d.add_argument("action", nargs="?", default="start",
                   choices=["start", "run", "pause", "resume", "cancel", "throttle"])
    d.add_argument("dump_id", nargs="?", help="the dump's id (for run/pause/resume/cancel/throttle; optional for start)")
    d.add_argument("--source", help=opts.SOURCE_HELP)
    d.add_argument("--table", action="append", help="table to dump (repeatable); schema.table or table")
    d.add_argument("--all", action="store_true", help="every table of the source (tables it cannot dump, "
                                                      "such as one without a primary key, are skipped and listed)")
    d.add_argument("--exclude", action="append", help="with --all: a table to leave out (repeatable or comma-separated)")
    d.add_argument("--keys", help="JSON array of primary keys (or @file.json), with one --table")
    d.add_argument("--chunk-size", type=int, help=f"rows per chunk, {tuned.range_text('dump.chunk_size')} "
                                                  f"(default {tuned.cite('dump.chunk_size')}; a range dump's "
                                                  f"chunks grow while the source takes no writes, up to "
                                                  f"{tuned.cite('dump.quiet_chunk_size')})")
    d.add_argument("--delay", type=float,
                   help=f"seconds between chunks, 0 to {tuned.dump.max_delay_seconds} (default 0)")
    d.add_argument("--parallelism", type=int,
                   help=f"key ranges a window reads at once, each on its own connection (a window reads about "
                        f"chunk size x parallelism rows), {tuned.range_text('dump.parallelism')} "
                        f"(default {tuned.cite('dump.parallelism')})")
    d.add_argument("--create-only", action="store_true", help="register the dump, print its id, do not run it")
    d.set_defaults(func=cmd_dump)
