"""The engine's errors: one base, so the `dblog` command reports what the engine refuses or cannot
reach as `dblog: error: …` and lets anything else (a bug) show its traceback.

Each package keeps its own error classes beside the code that raises them; they derive from
`DBLogError` (and from the built-in class callers already catch, such as ValueError).
"""
from __future__ import annotations


class DBLogError(Exception):
    """An error the engine reports to its user: bad input, a refused operation, a service it cannot use."""

    transient = False  # True: the same call may succeed later (a lost connection, a busy lease)


class TransientError(DBLogError):
    """Retrying later may succeed: the service was unreachable or busy, nothing was decided."""

    transient = True


class UsageError(DBLogError, ValueError):
    """Command-line options that cannot work together."""


class WarehouseError(DBLogError, ValueError):
    """A warehouse table that is not as dblog needs it (missing, foreign files, an unknown format)."""


class InvalidValue(DBLogError, ValueError):
    """A value that does not fit where it is given: a key for its column, a position, a staged file name."""
