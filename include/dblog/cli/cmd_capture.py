"""`dblog capture` and `dblog repair`: stream a source's log into the staged log, and run the
repairs it queued."""
from __future__ import annotations

import json
import logging
import signal
from typing import Any

from .. import connections
from ..coordination.checkpoint import ensure_checkpoint, reset_checkpoint
from ..coordination.store import Fenced
from ..stagedlog.staged_log import StagedLog
from . import cli_options as opts

log = logging.getLogger("dblog")


def cmd_capture(args) -> int:
    opts.within("--flush-rows", "capture.flush_rows", args.flush_rows)
    opts.within("--flush-seconds", "capture.flush_seconds", args.flush_seconds)
    source = connections.source(opts.source_id(args.source, "capture"))
    # Settings a capture needs are resolved before ZooKeeper is touched: a missing one changes nothing.
    staged, warehouse = (None, None) if args.reset or args.init else (StagedLog(connections.staging_root()), _warehouse())
    with opts.store() as store:
        if args.reset:
            reset_checkpoint(store, source)
            print(f"{source.name}: checkpoint reset; run a full dump of every table to repair the gap")
            return 0
        if args.init:
            print(json.dumps(ensure_checkpoint(store, source).as_json(), default=str))
            return 0
        from ..capture.capture_loop import Capture  # (the log readers: only a capture loads them)

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
            from ..warehouse.tables import Warehouse
            self._real = Warehouse(self.root)
        return getattr(self._real, name)


def _warehouse():
    return _LazyWarehouse(connections.warehouse_root())


def cmd_repair(args) -> int:
    from ..snapshot.repair import Repairer, waiting
    source = connections.source(opts.source_id(args.source, "repair"))
    staged, warehouse = StagedLog(connections.staging_root()), _warehouse()
    with opts.store() as store:
        ran = Repairer(store, source, staged, warehouse=warehouse).run_once()
        print(json.dumps({"ran": ran, "waiting": waiting(store, source.name)}, default=str))
    return 0


def add_capture(sub, tuned) -> None:
    c = sub.add_parser("capture", help="stream the source's log into the staged change log")
    c.add_argument("--source", help=opts.SOURCE_HELP)
    c.add_argument("--duration", type=opts.finite, help="stop after this many seconds (default: run until stopped)")
    c.add_argument("--until-watermark", help="stop once this watermark value is staged")
    c.add_argument("--flush-rows", type=int, default=tuned.capture.flush_rows,
                   help=f"events per staged batch at most (default {tuned.cite('capture.flush_rows')})")
    c.add_argument("--flush-seconds", type=opts.finite, default=tuned.capture.flush_seconds,
                   help=f"seconds a batch waits at most (default {tuned.cite('capture.flush_seconds')})")
    c.add_argument("--init", action="store_true", help="check the source and set the checkpoint, then exit")
    c.add_argument("--reset", action="store_true", help="forget the checkpoint after lost history")
    c.add_argument("--no-repair", action="store_true",
                   help="queue repairs (partial row images, statement-logged writes) but leave running them "
                        "to `dblog repair`")
    c.set_defaults(func=cmd_capture)


def add_repair(sub, tuned) -> None:
    r = sub.add_parser("repair", help="run the queued repairs once (the capture's leader runs them by itself)")
    r.add_argument("--source", help=opts.SOURCE_HELP)
    r.set_defaults(func=cmd_repair)
