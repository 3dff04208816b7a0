"""`dblog`: drive the engine from a shell (the Airflow operators call the same functions).

One module per command group (`cmd_*`), each with its command and its parser; here the parser
that puts them in order, and `main`, which reports what the engine refuses as `dblog: error:`."""
from __future__ import annotations

import argparse
import logging
import sys

from ..errors import DBLogError
from ..settings import ConfigError, settings
from . import cmd_capture, cmd_dump, cmd_merge, cmd_setup, cmd_status, cmd_verify, cmd_warehouse

# The order `dblog --help` lists the commands in.
COMMANDS = [cmd_capture.add_capture, cmd_capture.add_repair, cmd_dump.add_dump, cmd_status.add_status,
            cmd_status.add_export, cmd_merge.add_merge, cmd_verify.add_verify, cmd_warehouse.add_maintain,
            cmd_warehouse.add_warehouse, cmd_setup.add_setup, cmd_status.add_sync]


def parser() -> argparse.ArgumentParser:
    tuned = settings()  # every option's default
    p = argparse.ArgumentParser(prog="dblog", description="DBLog watermark change-data capture")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub, tuned)
    return p


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    try:
        cli = parser()
    except ConfigError as exc:  # a bad DBLOG_* setting: the options' defaults come from them
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2
    args = cli.parse_args(argv)
    setup_logging(args.verbose)
    try:
        return args.func(args)
    except DBLogError as exc:  # what the engine refuses or cannot reach; anything else is a bug: its traceback shows
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2
