"""``perf stat -x,`` output (pure): the hardware counts behind a program's IPC.

The way sweep of ``coshare profile ways`` (Spread-n-Share section 5.1: "the PMU events
Instructions Retired, UnHalted Core Cycles ... are used to obtain the IPC") counts
``instructions`` and ``cycles`` of a whole run with the ``perf stat`` command line
(perf-stat(1)), not a Python binding: perf ships with the kernel (``linux-perf``), knows each
processor's event encodings and hybrid PMUs, and its machine-readable ``-x`` output is
documented; the Python bindings on PyPI wrap ``perf_event_open(2)`` with raw encodings and
are not kept in step with the kernel.

perf-stat(1), "CSV FORMAT": with ``-x,`` each counter is one line of ``[timestamp,]
[cpu,][cpus,] value, unit, event, run time, percentage running[, variance][, metric value,
metric unit]``; the value is ``<not supported>`` when the kernel or the (virtual) processor
has no such counter, ``<not counted>`` when it never ran; lines starting with ``#`` (``#
started on ...``) and blank lines are not counts; "additional metrics may be printed with
all earlier fields being empty". On a hybrid processor one event has a line per PMU
(``cpu_core/instructions/``, ``cpu_atom/instructions/``): they add up. Recorded outputs are in
``tests/fixtures/perf/``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: What perf prints in place of a value it has not got.
NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"
#: ``pmu/event/`` (hybrid) or ``event:modifiers``: the event's own name is the middle.
_PMU_EVENT = re.compile(r"(?:[A-Za-z0-9_]+/)?([A-Za-z0-9_.-]+)/?(?::[A-Za-z]+)?")


@dataclass(frozen=True)
class Count:
    """One event's count over the run.

    Attributes:
        event: the event's name without PMU or modifiers (``instructions``).
        value: the count (summed over PMUs); ``None`` when perf had none.
        status: ``counted``, ``not supported`` or ``not counted``.
        running_percent: the share of the run the counter ran (below 100: multiplexed and
            scaled by perf).
    """

    event: str
    value: float | None
    status: str
    running_percent: float


def event_name(text: str) -> str:
    """``cpu_core/instructions/`` or ``instructions:u`` -> ``instructions``."""
    found = _PMU_EVENT.fullmatch(text.strip())
    return found.group(1) if found else text.strip()


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_perf_stat_csv(text: str, events: tuple[str, ...]) -> dict[str, Count]:
    """The counts of ``events`` in ``perf stat -x,`` output (without ``-I``).

    Args:
        text: what perf wrote (``-o FILE``).
        events: the events asked for (``instructions``, ``cycles``), which find their lines
            (the line's first fields may be a CPU and a count of CPUs).

    Returns:
        each event found, by name; an event with a counted line and a ``<not counted>`` one
        (a hybrid PMU that never ran it) is counted.

    Raises:
        ValueError: a line naming an asked event whose value is neither a number nor one of
            perf's two markers.
    """
    wanted = set(events)
    out: dict[str, Count] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        # The event's field is the first, counting from the value, that names an asked
        # event; the value is two before it (value, unit, event).
        for i in range(2, len(fields)):
            name = event_name(fields[i])
            if name in wanted:
                break
        else:
            continue
        value_text = fields[i - 2].strip()
        running = _float(fields[i + 2]) if len(fields) > i + 2 else None
        if value_text in (NOT_SUPPORTED, NOT_COUNTED):
            status, value = value_text.strip("<>"), None
        else:
            value = _float(value_text)
            if value is None or value < 0:
                raise ValueError(
                    f"perf stat line {line[:80]!r}: {value_text[:30]!r} is not a count"
                )
            status = "counted"
        old = out.get(name)
        if old is None or old.value is None:
            out[name] = Count(name, value, status, running if running is not None else 0.0)
        elif value is not None:  # a second PMU's line of the same event (hybrid): they add up
            out[name] = Count(
                name,
                old.value + value,
                "counted",
                min(old.running_percent, 100.0 if running is None else running),
            )
    return out


def ipc_of(counts: Mapping[str, Count]) -> float | None:
    """Instructions per cycle, ``None`` unless both were counted and cycles are above 0."""
    ins, cyc = counts.get("instructions"), counts.get("cycles")
    if ins is None or cyc is None or ins.value is None or cyc.value is None or cyc.value <= 0:
        return None
    return ins.value / cyc.value


def why_not_counted(counts: Mapping[str, Count], events: tuple[str, ...]) -> str | None:
    """Why an IPC cannot be had from ``counts`` (``None``: it can)."""
    for event in events:
        count = counts.get(event)
        if count is None:
            return f"perf printed no {event} count"
        if count.value is None:
            return f"perf says <{count.status}> for {event}"
    cycles = counts.get("cycles")
    if cycles is not None and cycles.value == 0:
        return "perf counted 0 cycles"
    return None
