"""The simulator's progress report on standard error: simulated jobs done of the
total, the rate in jobs per second and the time left.

On a terminal it is a rich progress bar, gone when the run ends. Without one (cron, a pipe,
CI logs) it prints one plain line every :data:`PLAIN_EVERY_S` seconds and a last one when the
run ends, so a long run in a log still says how far it got::

    coshare simulate table1: 4000/7000 jobs (57%), 312 jobs/s, about 10 s left

The totals count the jobs of every simulated run (a footprint search's runs are estimated
in advance, so the total can be passed or fall short by a few runs).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

Advance = Callable[[int], None]

#: Seconds between two plain lines when standard error is not a terminal.
PLAIN_EVERY_S = 5.0


class _Rate(ProgressColumn):
    """Jobs (or pods) per second."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} {self.unit}/s" if speed else f"- {self.unit}/s")


class PlainProgress:
    """Progress as a line every ``every_s`` seconds, for logs.

    Args:
        total: jobs in all (``None``: unknown, no percentage or time left).
        label: what runs.
        unit: what is counted (``jobs``, ``pods``).
        stream: where lines go.
        clock: monotonic seconds.
        every_s: seconds between lines.
    """

    def __init__(
        self,
        total: int | None,
        label: str,
        unit: str,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream, self.clock, self.every_s = stream, clock, every_s
        self.done = 0
        self.start = clock()
        self.last = self.start

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more; print a line when ``every_s`` passed since the last one."""
        self.done += n
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self.line(now)

    def line(self, now: float) -> None:
        """Print where the run stands."""
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            left = max(self.total - self.done, 0) / rate if rate > 0 else None
            when = f", about {left:.0f} s left" if left is not None else ""
            part = f"{self.done}/{self.total} {self.unit} ({min(self.done / self.total, 1):.0%})"
        else:
            when, part = "", f"{self.done} {self.unit}"
        print(
            f"coshare simulate {self.label}: {part}, {rate:,.0f} {self.unit}/s{when}",
            file=self.stream,
            flush=True,
        )

    def finish(self) -> None:
        """The last line, with the whole run's rate (only when a line was printed before, or
        the run took longer than ``every_s``)."""
        now = self.clock()
        if now - self.start >= self.every_s:
            total, self.total = self.total, None
            print(
                f"coshare simulate {self.label}: {self.done} {self.unit} in "
                f"{now - self.start:.0f} s, {self.done / (now - self.start):,.0f} "
                f"{self.unit}/s",
                file=self.stream,
                flush=True,
            )
            self.total = total


@contextmanager
def progress_bar(
    total: int | None, label: str, unit: str = "jobs", stream: TextIO | None = None
) -> Iterator[Advance]:
    """Report progress on standard error while a long run works; yields ``advance(n)``."""
    stream = stream or sys.stderr
    console = Console(file=stream)
    if not console.is_terminal:
        plain = PlainProgress(total, label, unit, stream, every_s=PLAIN_EVERY_S)
        yield plain.advance
        plain.finish()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        _Rate(unit),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance
