"""`dblog maintain` and `dblog warehouse`: upkeep of the warehouse tables and the staged log, and
a look at (or the removal of) a warehouse table."""
from __future__ import annotations

import json

from .. import connections
from ..snapshot.dump_spec import qualified
from ..stagedlog.staged_log import StagedLog
from . import cli_options as opts
from .cli_progress import Bars

MAINTAIN_FLAGS = [("--keep-seconds", "warehouse.keep_seconds"), ("--orphan-grace", "warehouse.orphan_grace_seconds"),
                  ("--compact-min-files", "warehouse.compact_min_files"),
                  ("--log-retention", "retention.window_seconds")]


def _table_of(source_id: str, table: str) -> str:
    """`qualified`, reading the source's connection only for a bare table name (a warehouse
    command on `schema.table` works without it)."""
    return table if "." in table else qualified(connections.source(source_id), table)


def cmd_maintain(args) -> int:
    """Expire old snapshots, compact buckets of many files and sweep unreferenced files, per table
    under its merge lease (`dblog.warehouse.table_maintenance`); then the source's staged log: retention,
    finished dumps, compaction (`dblog.operations.staged_maintenance`)."""
    from ..operations.staged_maintenance import maintain_staged
    from ..warehouse.table_maintenance import maintain_source
    from ..warehouse.tables import Warehouse
    given = {"keep_seconds": args.keep_seconds, "orphan_grace_seconds": args.orphan_grace,
             "compact_min_files": args.compact_min_files}
    for (flag, setting), value in zip(MAINTAIN_FLAGS, [*given.values(), args.log_retention]):
        if value is not None:
            opts.within(flag, setting, value)
    warehouse, staged = Warehouse(connections.warehouse_root()), StagedLog(connections.staging_root())
    with opts.store() as store, Bars() as bars:
        for sid in [args.source] if args.source else connections.source_ids():  # default: every configured source
            tables = [_table_of(sid, t) for t in args.table] if args.table else None
            for report in maintain_source(store, warehouse, sid, tables, dry_run=args.dry_run,
                                          on_table=bars.stepper(f"maintain {sid}"), **given):
                print(report.line())
            print(maintain_staged(store, staged, warehouse, sid, tables=tables, window_seconds=args.log_retention,
                                  dry_run=args.dry_run).line())
    return 0


def cmd_warehouse(args) -> int:
    """`ls`: each warehouse table's Iceberg identifier, snapshot, rows and metadata file; `drop`: one
    table and its files, under its merge lease (a running merge cannot commit into it)."""
    from ..warehouse.tables import Warehouse, live_rows
    warehouse = Warehouse(connections.warehouse_root())
    if args.action == "drop":
        from ..coordination import loaded_tables
        from ..warehouse.table_maintenance import merge_lease
        table = _table_of(args.source, args.table)
        with opts.store() as store, merge_lease(store, args.source, table):
            loaded_tables.clear(store, args.source, table)   # its next dump is a first load (cleared first: a
            dropped = warehouse.drop(args.source, table)       # crash between the two leaves no stale mark)
        print(f"{args.source} {table}: " + ("dropped, with its files" if dropped else "no such warehouse table"))
        return 0 if dropped else 1
    for sid in [args.source] if args.source else connections.source_ids():
        for table in warehouse.tables(sid):
            t = warehouse.load(sid, table)
            head = t.current_snapshot() if t is not None else None
            if head is None:
                continue   # dropped since it was listed
            print(f"{sid} {table}: identifier {json.dumps(list(warehouse.identifier(sid, table)))}, snapshot "
                  f"{head.snapshot_id}, {live_rows(head)} rows, metadata {t.metadata_location}")
    return 0


def add_maintain(sub, tuned) -> None:
    mt = sub.add_parser("maintain", help="warehouse upkeep: expire old snapshots, compact buckets of many files, "
                                         "delete files no snapshot references (per table, under its merge lock); "
                                         "staged log upkeep: retention, finished dumps, compaction of small segments")
    mt.add_argument("--source", help="connection id (default: every configured source)")
    mt.add_argument("--table", action="append", help="table to maintain (repeatable; default: every warehouse table, "
                                                     "the whole staged log and its finished dumps)")
    mt.add_argument("--keep-seconds", type=opts.finite, help="expire snapshots older than this "
                    f"({tuned.range_text('warehouse.keep_seconds')}; default {tuned.cite('warehouse.keep_seconds')})")
    mt.add_argument("--orphan-grace", type=opts.finite, help="delete unreferenced files older than this many seconds "
                    f"({tuned.range_text('warehouse.orphan_grace_seconds')}; default "
                    f"{tuned.cite('warehouse.orphan_grace_seconds')})")
    mt.add_argument("--compact-min-files", type=int, help="compact a bucket holding more data files than this "
                    f"(default {tuned.cite('warehouse.compact_min_files')})")
    mt.add_argument("--log-retention", type=opts.finite, help="keep merged changes in the staged log this many seconds, "
                    "the reach of `dblog export --from`, and finished dumps' chunks as long "
                    f"({tuned.range_text('retention.window_seconds')}; default {tuned.cite('retention.window_seconds')})")
    mt.add_argument("--dry-run", action="store_true", help="report what would be done, change nothing")
    mt.set_defaults(func=cmd_maintain)


def add_warehouse(sub, tuned) -> None:
    w = sub.add_parser("warehouse", help="the warehouse's Iceberg tables: list them, or drop one")
    wsub = w.add_subparsers(dest="action", required=True)
    wl = wsub.add_parser("ls", help="identifier, current snapshot, rows and metadata file of each table")
    wl.add_argument("--source", help="connection id (default: every configured source)")
    wd = wsub.add_parser("drop", help="remove a table and its files (a full dump rebuilds it)")
    wd.add_argument("--source", required=True, help="connection id")
    wd.add_argument("--table", required=True, help="schema.table or table")
    w.set_defaults(func=cmd_warehouse)
