"""Live progress bars for long `dblog` commands in a terminal (rich), one per table.

Only when standard error is a terminal: piped or logged output (an Airflow task's log, a test,
`2> file`) gets no bar and no escape codes, and the commands' lines stay exactly what they were.
While bars are shown, log records are routed through rich's console so a line never tears a bar.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from ..operations.status import eta_seconds, progress_fraction
from ..snapshot.dump import DONE, RUNNING


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -"
    minutes, secs = divmod(int(seconds), 60)
    return f"ETA {minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class Bars:
    """`with Bars() as bars: bars.rows(...)` / `bars.step(...)`; every call is a no-op when
    `stream` is not a terminal."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._handlers: list[tuple[logging.StreamHandler, IO[str]]] = []

    def __enter__(self) -> Bars:
        if self.live:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[eta]}"),
                                      console=Console(file=self.stream), transient=False)
            self._progress.start()
            # logging's handlers hold the stream they were given, not the live display's proxy.
            for h in logging.getLogger().handlers:
                if isinstance(h, logging.StreamHandler) and h.stream is self.stream:
                    self._handlers.append((h, h.stream))
                    h.setStream(sys.stderr)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            for h, stream in self._handlers:
                h.setStream(stream)
            self._progress.stop()

    def _task(self, name: str, total: int | None) -> TaskID:
        assert self._progress is not None
        if name not in self._tasks:
            self._tasks[name] = self._progress.add_task(name, total=total, rate="", eta="")
        return self._tasks[name]

    def rows(self, name: str, rows: int, estimated: int | None, rate: float | None, done: bool = False) -> None:
        """A table's rows done of its estimate (the DBLog page's figures: `progress_fraction`,
        `eta_seconds`): an estimate is a catalog statistic, so the bar holds short of full until done."""
        if self._progress is None:
            return
        fraction = progress_fraction(rows, estimated, DONE if done else RUNNING)
        total = rows if done else max(rows, estimated or 0) or None
        completed = rows if fraction is None or total is None else fraction * total
        self._progress.update(self._task(name, total), total=total, completed=completed,
                              rate=f"{rate:,.0f} rows/s" if rate else "",
                              eta="" if done else _eta(eta_seconds(rows, estimated, rate, None, None)))

    def step(self, name: str, done: int, total: int) -> None:
        """Tables done of those a command goes through (a merge, `maintain`, `verify`)."""
        if self._progress is not None:
            self._progress.update(self._task(name, total), total=total, completed=done)

    def counter(self, name: str) -> TableRows:
        """A rows bar for one table fed by an engine callback `(rows, estimated)`, its rate
        measured from the first call."""
        return TableRows(self, name)

    def stepper(self, name: str) -> Callable[[int, int], None]:
        """`step` for one bar, as an engine callback `(done, total)`."""
        return lambda done, total: self.step(name, done, total)


class TableRows:
    """`Bars.counter`: call it with `(rows, estimated)` as rows are done, then `finish()`."""

    def __init__(self, bars: Bars, name: str):
        self.bars, self.name, self.started = bars, name, time.monotonic()
        self.done, self.estimated = 0, 0

    def __call__(self, rows: int, estimated: int) -> None:
        self.done, self.estimated = rows, estimated
        self.bars.rows(self.name, rows, estimated, self.rate())

    def rate(self) -> float | None:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 and self.done else None

    def finish(self) -> None:
        self.bars.rows(self.name, self.done, self.estimated, self.rate(), done=True)
