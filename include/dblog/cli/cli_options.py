"""What the `dblog` commands share: the state store, which source a command acts on, and option
values checked as the settings that give their defaults."""
from __future__ import annotations

import argparse

from .. import connections
from ..coordination.store import StateStore, open_store
from ..settings import ConfigError, settings
from ..snapshot.dump_spec import DumpError, check_finite

SOURCE_HELP = "connection id (default: the configured source, when DBLOG_SOURCES lists exactly one)"


def store() -> StateStore:
    return open_store()


def source_id(given: str | None, command: str) -> str:
    """`--source`, else the one configured source: with several, guessing one could act on the
    wrong database, so the user says which."""
    if given:
        return given
    ids = connections.source_ids()
    if len(ids) == 1:
        return ids[0]
    raise ConfigError(f"`dblog {command}` needs --source ID: the configured sources (DBLOG_SOURCES) are "
                      f"{', '.join(ids) or 'none'}")


def listed(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated option values (`--source a,b --source c`)."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def within(flag: str, setting: str, value: float) -> None:
    """An option bounded as the setting that gives its default."""
    settings().check_option(flag, setting, value)


def finite(text: str) -> float:
    """A number of seconds for argparse: NaN would compare false against every deadline (a capture
    slice that never ends), so it is refused as the dump's numbers are (`check_finite`)."""
    value = float(text)
    try:
        check_finite(value, "a number of seconds")
    except DumpError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value
