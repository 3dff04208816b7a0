"""`dblog verify`: compare each source with its warehouse tables, key range by key range."""
from __future__ import annotations

import json
import sys

from .. import connections
from ..snapshot.dump_spec import qualified
from . import cli_options as opts
from .cli_progress import Bars


def cmd_verify(args) -> int:
    from ..operations.verify import compare_warehouse
    from ..warehouse.tables import Warehouse
    opts.within("--page", "verify.page_rows", args.page)
    warehouse = Warehouse(connections.warehouse_root())
    drift = unmerged = False
    with Bars() as bars:
        for sid in [args.source] if args.source else connections.source_ids():  # default: every configured source
            result = _verify_source(args, connections.source(sid), warehouse, compare_warehouse, bars)
            unmerged |= result is None
            drift |= bool(result)
    return 2 if unmerged else 1 if drift else 0


def _verify_source(args, source, warehouse, compare_warehouse, bars: Bars) -> bool | None:
    """Compare one source's warehouse tables; whether any drifted, None if it has none yet."""
    tables = [qualified(source, t) for t in args.table] if args.table else warehouse.tables(source.name)
    if not tables:
        print(f"dblog: error: {source.name} has no warehouse tables yet; run `dblog merge` first", file=sys.stderr)
        return None
    drift = False
    for table in tables:
        rows = bars.counter(f"verify {source.name} {table}")
        diff = compare_warehouse(source, warehouse, table, args.page, on_rows=rows)
        rows.finish()
        drift |= not diff.equal
        if args.json:
            print(json.dumps({"source": source.name, "table": table, "equal": diff.equal,
                              "source_rows": diff.source_rows, "warehouse_rows": diff.staged_rows,
                              "ranges": diff.ranges, "drifted": [vars(r) for r in diff.drifted],
                              "repair": diff.repair()}, default=str))
            continue
        if diff.whole:   # a table with no key: compared as a multiset, repaired by a whole re-read
            print(f"{source.name} {table}: {'equal' if diff.equal else 'DRIFT'} - source {diff.source_rows} rows, "
                  f"warehouse {diff.staged_rows} rows (no key: compared whole), {len(diff.missing)} missing and "
                  f"{len(diff.extra)} extra" + ("" if diff.equal else f"; repair: dblog dump --source {source.name} "
                                                                      f"--table {table}, then dblog merge"))
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


def add_verify(sub, tuned) -> None:
    v = sub.add_parser("verify", help="compare source and warehouse per key range; exit 1 on drift")
    v.add_argument("--source", help="connection id (default: every configured source)")
    v.add_argument("--table", action="append", help="table to check (repeatable; default: every warehouse table)")
    v.add_argument("--page", type=int, default=tuned.verify.page_rows,
                   help=f"rows per key range (default {tuned.cite('verify.page_rows')})")
    v.add_argument("--json", action="store_true", help="one JSON object per table, with the keys to repair")
    v.set_defaults(func=cmd_verify)
