"""The way sweep of a program's profile (``coshare profile ways``; Spread-n-Share 4.1, 5.1).

For each way count ``k`` of the sweep (the paper's 2, 4, 8 and all 20 ways), the program (an
argument list, never a shell string) runs once, whole, in a resctrl group whose ``schemata``
holds ``k`` contiguous ways on every L3 domain, under ``perf stat -x, -e
instructions,cycles`` (:mod:`coshare.node.perfstat` says why the CLI), and:

- IPC is its instructions over its cycles (the paper: "Instructions Retired, UnHalted Core
  Cycles");
- memory bandwidth is what the group moved to and from memory, resctrl's MBM counter
  ``mbm_total_bytes`` summed over the L3 domains, over the run's wall time (the paper reads
  the Home Agent's REQUESTS; MBM counts the same traffic per group). Without MBM the curve
  has no bandwidth and the command says so: nothing is made up.

The paper changes the allocation every 5 s *during* one run and interpolates between its
samples (section 5.1); coshare runs the program once per way count instead, which needs a
program that runs in minutes, not hours, and measures each count over a whole run (no
phase mix, no cache refill after each shrink). The process joins the group by writing its
pid to ``tasks`` before perf forks the program, and goes back to the default group after:
perf and the program are born in the group.

Nothing is pretended: no resctrl, no L3 allocation, no perf, or a counter perf says
``<not supported>`` raise :class:`~coshare.errors.Unsupported` naming what was looked at.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coshare.errors import CgroupError, CommandFailed, InputError, Unsupported
from coshare.node.perfstat import Count, ipc_of, parse_perf_stat_csv, why_not_counted
from coshare.node.resctrl import CacheInfo, Resctrl
from coshare.system.programs import CommandRunner, run

#: The events whose ratio is IPC.
EVENTS = ("instructions", "cycles")
#: The sweep's group (a job id: ``<prefix>.job-profile.<program>``).
GROUP_PREFIX = "profile."


@dataclass(frozen=True)
class WayPoint:
    """One way count of the sweep.

    Attributes:
        ways: LLC ways the program had.
        ipc: instructions per cycle (the median of the repeats).
        membw_gbps: GB/s the group moved to and from memory (median); ``None``: no MBM.
        seconds: wall time of the runs, each.
    """

    ways: int
    ipc: float
    membw_gbps: float | None
    seconds: tuple[float, ...]


@dataclass(frozen=True)
class Sweep:
    """The curves of one program on one node.

    Attributes:
        points: one per way count, increasing.
        node_ways: the node's LLC ways.
        membw_unsupported: why the bandwidth curve is missing (``None``: measured).
    """

    points: tuple[WayPoint, ...]
    node_ways: int
    membw_unsupported: str | None

    def falls(self) -> list[str]:
        """Where IPC falls as ways grow (a profile refuses that: section 4.1)."""
        return [
            f"IPC falls from {a.ipc:.4g} at {a.ways} ways to {b.ipc:.4g} at {b.ways}"
            for a, b in zip(self.points, self.points[1:], strict=False)
            if b.ipc < a.ipc
        ]


def default_way_counts(node_ways: int) -> tuple[int, ...]:
    """The paper's samples, 2, 4 and 8 ways, below the node's ways, and all of them (on the
    paper's 20-way Xeon: 2, 4, 8, 20; section 5.1)."""
    return (*(k for k in (2, 4, 8) if k < node_ways), node_ways)


def check_way_counts(counts: Sequence[int], cache: CacheInfo) -> tuple[int, ...]:
    """The sweep's way counts, increasing, each within what the node's L3 can give.

    Raises:
        InputError: a count outside ``min_cbm_bits..ways``, or fewer than two counts.
    """
    low = max(cache.min_bits, 1)
    out = tuple(sorted(set(counts)))
    bad = [k for k in out if not low <= k <= cache.ways]
    if bad:
        raise InputError(
            f"--ways {','.join(map(str, bad))}: this node's L3 has {cache.ways} "
            f"ways and a group takes at least {low} (allowed: {low}..{cache.ways})"
        )
    if len(out) < 2:
        raise InputError("--ways: a curve needs at least two way counts")
    return out


def sweep(
    resctrl: Resctrl,
    program: str,
    argv: Sequence[str],
    way_counts: Sequence[int] | None = None,
    *,
    perf: str = "perf",
    repeat: int = 1,
    timeout_s: float = 3600.0,
    runner: CommandRunner = run,
    clock: Callable[[], float] = time.monotonic,
    pid: int | None = None,
) -> Sweep:
    """Run ``argv`` at each way count and measure its IPC and bandwidth (module docstring).

    Args:
        resctrl: the node's resctrl mount.
        program: the program's name (the group is named after it).
        argv: the command, an argument list.
        way_counts: the counts (default: :func:`default_way_counts`).
        perf: the perf program.
        repeat: runs per way count (the median is taken).
        timeout_s: each run's limit.
        runner: the command runner.
        clock: wall time for the bandwidth.
        pid: the process that joins the group before perf starts (default: this one).

    Raises:
        Unsupported: no resctrl L3 allocation, no perf, or counters perf cannot count.
        InputError: bad way counts, other coshare groups holding ways (profile on an idle
            node), or the program failed.
        CgroupError: the kernel refused a write.
    """
    cache = resctrl.cache()  # Unsupported, naming info/L3/cbm_mask, where there is none
    counts = check_way_counts(way_counts or default_way_counts(cache.ways), cache)
    others = [j for j in resctrl.jobs() if j != GROUP_PREFIX + program]
    if others:
        raise InputError(
            f"jobs {', '.join(others[:4])} have resctrl groups on this node: "
            "profile on an idle node (the sweep measures the program alone)"
        )
    job = GROUP_PREFIX + program
    me = os.getpid() if pid is None else pid
    membw_why: str | None = None
    points = []
    try:
        for ways in counts:
            resctrl.remove(job)
            resctrl.create(job, ways, None)
            ipcs, rates, seconds = [], [], []
            for _ in range(max(1, repeat)):
                before = _mbm(resctrl, job)
                with resctrl.joined(job, me):
                    start = clock()
                    counted = _perf_stat(perf, argv, runner, timeout_s)
                    took = clock() - start
                after = _mbm(resctrl, job)
                ipc = ipc_of(counted)
                why = why_not_counted(counted, EVENTS)
                if ipc is None or why is not None:
                    raise Unsupported(
                        "hardware counters (IPC)",
                        f"{perf} stat -e {','.join(EVENTS)}",
                        why or "no IPC",
                    )
                ipcs.append(ipc)
                seconds.append(took)
                if isinstance(before, str) or isinstance(after, str):
                    membw_why = before if isinstance(before, str) else str(after)
                elif took > 0:
                    rates.append((after - before) / took / 1e9)
            bandwidth = statistics.median(rates) if rates and membw_why is None else None
            points.append(WayPoint(ways, statistics.median(ipcs), bandwidth, tuple(seconds)))
    finally:
        resctrl.remove(job)
    return Sweep(tuple(points), cache.ways, membw_why)


def _mbm(resctrl: Resctrl, job: str) -> int | str:
    """The group's MBM byte count, or why there is none."""
    try:
        return resctrl.mbm_total_bytes(job)
    except Unsupported as exc:
        return str(exc)
    except CgroupError as exc:  # the kernel's "Unavailable" or "Error" for a domain
        return f"resctrl MBM: {exc}"


def _perf_stat(
    perf: str, argv: Sequence[str], runner: CommandRunner, timeout_s: float
) -> dict[str, Count]:
    """One run of ``argv`` under ``perf stat -x,``: its counts (perf writes them with
    ``-o`` to a file of their own, apart from the program's output)."""
    with tempfile.TemporaryDirectory(prefix="coshare-perf-") as tmp:
        out = Path(tmp) / "stat.csv"
        command = [perf, "stat", "-x,", "-o", str(out), "-e", ",".join(EVENTS), "--", *argv]
        try:
            runner(command, timeout_s=timeout_s)
        except CommandFailed as exc:
            if exc.returncode is None and "cannot run" in exc.stderr and not out.exists():
                raise Unsupported(
                    "hardware counters (IPC)", perf, f"no perf program: {exc.stderr.strip()[:200]}"
                ) from exc
            raise InputError(
                f"the program failed under perf (status {exc.returncode}): "
                f"{' '.join(argv)[:200]}: {exc.stderr.strip()[-300:]}"
            ) from exc
        try:
            text = out.read_text()
        except OSError as exc:
            raise Unsupported(
                "hardware counters (IPC)", perf, f"perf wrote no counts to {out}"
            ) from exc
    try:
        return dict(parse_perf_stat_csv(text, EVENTS))
    except ValueError as exc:
        raise Unsupported("hardware counters (IPC)", perf, str(exc)) from exc
