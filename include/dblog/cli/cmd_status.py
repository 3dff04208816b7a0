"""`dblog status`, `dblog export` and `dblog sync`: where the capture and the dumps are, a table's
reconciled change stream, and a wait until the capture has passed a point in the source."""
from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter

from .. import connections
from ..coordination.checkpoint import checkpoint_position, ensure_checkpoint
from ..model.positions import Position
from ..operations.export import export
from ..operations.staged_maintenance import size_text
from ..operations.status import key_text, source_status
from ..settings import ConfigError
from ..snapshot.dump import DONE
from ..snapshot.dump_spec import qualified
from ..stagedlog.staged_log import StagedLog
from . import cli_options as opts


def merge_line(merge: dict | None, now: float) -> str:
    """The continuous merge as `dblog status` says it."""
    if merge is None:
        return "continuous merge: none has run (dump runs merge themselves)"
    failing = "; ".join(f"{t}: {why}" for t, why in sorted(merge["failing"].items()))
    return (f"continuous merge: running {max(0.0, now - merge['at']):.0f}s ago"
            + ("" if merge["live"] else " (dump runs merge themselves)")
            + ("" if merge["tables"] is None else f", tables {', '.join(merge['tables'])}")
            + (f"; failing on {failing}" if failing else ""))

def cmd_status(args) -> int:
    out = {}
    staged = StagedLog(connections.staging_root())
    with opts.store() as store:
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
            print(f"  {merge_line(st['merge'], time.time())}")
            kept = st["staged"]
            print(f"  staged log: {kept['files']} file(s), {size_text(kept['bytes'])}, oldest retained position "
                  f"{kept['oldest'] or '-'}")
            keys: dict[str, str] = {}
            for d in st["dumps"]:
                print(f"  dump {d['id']}: {d['state']}; {_dump_tables(d['tables'], args.tables)}")
                keys.update({t: p["key"] for t, p in d["tables"].items() if p and p.get("key")})
            for table, key in sorted(keys.items()):
                print(f"  {table} {key_text(key)}")
            repairs = list(st["repairs"].items())
            for table, w in repairs if args.tables else repairs[:SHOWN]:
                what = "every row" if w["whole_table"] else f"{w['keys']} key(s), e.g. {w['sample'][:5]}"
                dumps = ", ".join(f"{d['id']} {d['state']}" for d in w["dumps"]) or "queued"
                print(f"  repair of {table} waits: {what} ({dumps}): {'; '.join(w['reasons'])}")
            if not args.tables and len(repairs) > SHOWN:
                print(f"  ... and {len(repairs) - SHOWN} more tables' repairs wait (--tables lists each)")
    return 0


SHOWN = 10   # tables listed by name per dump (or repairs per source) without --tables


def _dump_tables(progress: dict[str, dict | None], every: bool) -> str:
    """A dump's tables, each with its progress; past SHOWN of them, counts by status and the
    unfinished ones' names (a dump of a 1,000-table database stays one readable line)."""
    tables = {t: p for t, p in progress.items() if p}
    if every or len(tables) <= SHOWN:
        return ", ".join(f"{t} {p['status']} {p['rows']} rows/{p['chunks']} chunks"
                         + (f" ({p['fallback_chunks']} read by the Python driver: the native reader gave "
                            "up on them)" if p.get("fallback_chunks") else "") for t, p in tables.items())
    counts = Counter(p["status"] for p in tables.values())
    fallback = sum(p.get("fallback_chunks", 0) for p in tables.values())
    open_ = [t for t, p in tables.items() if p["status"] != DONE]
    line = (f"{len(tables)} tables ({', '.join(f'{n} {status}' for status, n in counts.most_common())}), "
            f"{sum(p['rows'] for p in tables.values())} rows/{sum(p['chunks'] for p in tables.values())} chunks")
    if fallback:
        line += f", {fallback} chunks read by the Python driver (the native reader gave up on them)"
    if open_:
        more = f" and {len(open_) - SHOWN} more" if len(open_) > SHOWN else ""
        line += f"; not done: {', '.join(open_[:SHOWN])}{more}"
    return line + " (--tables lists each)"


def cmd_export(args) -> int:
    source = connections.source(opts.source_id(args.source, "export"))
    table = qualified(source, args.table)
    if args.from_position is not None:
        try:
            Position.decode(args.from_position)
        except ValueError:
            raise ConfigError(f"--from {args.from_position!r} is not a position: give one as `dblog status` "
                              "shows them (three groups of 10, 20 and 10 digits joined by '-')") from None
    staged = StagedLog(connections.staging_root())
    with opts.store() as store:
        upto = checkpoint_position(store, source.name)
        out = open(args.output, "w") if args.output else sys.stdout
        try:
            lines = export(store, staged, source.name, table, out, upto, args.from_position)
        finally:
            if args.output:
                out.close()
    print(f"exported {lines} events of {table}", file=sys.stderr)
    return 0


def cmd_sync(args) -> int:
    """Write a sync watermark on each source, then wait until its capture has checkpointed past
    it: from then on every commit made before `dblog sync` started is staged."""
    from ..capture.capture_loop import await_sync, sync_point
    from ..coordination.health import capture_health, sync_timeout_reason
    from ..snapshot.repair import not_landed, waiting
    if not (math.isfinite(args.timeout) and args.timeout >= 0):
        raise ConfigError(f"--timeout must be a finite number of seconds >= 0, got {args.timeout}")
    sources = [connections.source(sid) for sid in ([args.source] if args.source else connections.source_ids())]
    staged, failed = StagedLog(connections.staging_root()), False
    with opts.store() as store:
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


def add_status(sub, tuned) -> None:
    s = sub.add_parser("status", help="capture position and lag, dumps and their progress")
    s.add_argument("--source")
    s.add_argument("--json", action="store_true")
    s.add_argument("--tables", action="store_true",
                   help=f"list every table of each dump and every waiting repair (default: past {SHOWN}, counts "
                        "by status and the unfinished ones)")
    s.set_defaults(func=cmd_status)


def add_export(sub, tuned) -> None:
    e = sub.add_parser("export", help="a table's reconciled change stream (paper's output order) as NDJSON")
    e.add_argument("--source", help=opts.SOURCE_HELP)
    e.add_argument("--table", required=True)
    e.add_argument("--from", dest="from_position", help="first position to export (as `dblog status` shows them)")
    e.add_argument("--output", help="file to write (default: standard output)")
    e.set_defaults(func=cmd_export)


def add_sync(sub, tuned) -> None:
    y = sub.add_parser("sync", help="write a sync watermark and wait until the capture has passed it")
    y.add_argument("--source", help="connection id (default: every configured source)")
    y.add_argument("--timeout", type=float, default=tuned.capture.sync_timeout_seconds,
                   help=f"seconds to wait (default {tuned.cite('capture.sync_timeout_seconds')}); then exit 1 "
                        "saying what the capture is doing")
    y.set_defaults(func=cmd_sync)
