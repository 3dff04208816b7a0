"""`dblog setup`: check each source, create what the capture user may create, and print what only
an administrator may do."""
from __future__ import annotations

import sys

from .. import connections
from ..sources.base import SourceError


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


def add_setup(sub, tuned) -> None:
    u = sub.add_parser("setup", help="check sources; create the watermark table, publication and slot where "
                                     "allowed, else print the statements an administrator runs")
    u.add_argument("--source")
    u.add_argument("--print-sql", action="store_true",
                   help="print the whole least-privilege set-up an administrator runs first; change nothing")
    u.set_defaults(func=cmd_setup)
