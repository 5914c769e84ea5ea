"""The memory-bandwidth probe's baseline and results (pure), after libDistGen (poncos §6).

libDistGen's ``distgen_init()`` runs on an idle node and records what each set of cores can
stream at most; ``distgen_membw_available()`` then streams on given cores and reports what
it reached as a share of that maximum. The share is never 0 (the probe's own accesses always
complete) and, probed on half a node's cores while a bandwidth-bound job runs on the other
half, about 50% "means that there is a memory bandwidth limited code running" (section 7).

``coshare node probe membw --init`` records, for the node's allowed cores, what the probe
reaches on the first 1, 2, ... of them (every count up to 16, then powers of two and all of
them) and on the exact set given. A later probe on cores C compares with the baseline of C
itself, else of as many cores, else one interpolated between the nearest counts measured
(bandwidth grows with cores until the memory controllers saturate; cores of one node are
taken as alike, which :func:`baseline_for` says in its answer).

Pure: the measurement itself is :mod:`coshare.node.membw`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coshare.errors import JobSpecError, ProbeError
from coshare.node.spec import format_cpu_list, parse_cpu_list

#: Counts of cores ``--init`` measures up to one by one; beyond, powers of two.
INIT_EVERY_COUNT_UP_TO = 16
INIT_HINT = "run `coshare node probe membw --init` on an idle node"
BASELINE_VERSION = 1


@dataclass(frozen=True)
class Measurement:
    """What one probe reached.

    Attributes:
        cpus: the cores it streamed on.
        gbps: GB/s of cache lines read (10**9 bytes per second, 64 bytes per line touched).
        seconds: how long the measured passes took.
        at_s: when it ran (epoch seconds).
        array_mib: the array it streamed over (all cores together).
        method: how it streamed (``numpy``: a strided read of one byte per line).
    """

    cpus: tuple[int, ...]
    gbps: float
    seconds: float
    at_s: float
    array_mib: int
    method: str

    def to_dict(self) -> dict[str, object]:
        return {
            "cpus": format_cpu_list(self.cpus),
            "gbps": round(self.gbps, 4),
            "seconds": round(self.seconds, 4),
            "at_s": round(self.at_s, 3),
            "array_mib": self.array_mib,
            "method": self.method,
        }


def init_sets(allowed: Sequence[int], given: Sequence[int] = ()) -> list[tuple[int, ...]]:
    """The core sets ``--init`` measures: the first k allowed cores for k = 1..16, then
    powers of two, and all of them; and ``given`` when it is none of those."""
    cores = tuple(sorted(allowed))
    counts = {k for k in range(1, min(len(cores), INIT_EVERY_COUNT_UP_TO) + 1)}
    k = INIT_EVERY_COUNT_UP_TO * 2
    while k < len(cores):
        counts.add(k)
        k *= 2
    if cores:
        counts.add(len(cores))
    sets = [cores[:k] for k in sorted(counts)]
    if given and tuple(sorted(given)) not in sets:
        sets.append(tuple(sorted(given)))
    return sets


@dataclass(frozen=True)
class Baseline:
    """What the idle node reached, by core set.

    Attributes:
        by_cpus: GB/s by core set.
        at_s: when ``--init`` ran.
        method: the probe's method then (a baseline of another method is not comparable).
        array_mib: the array then.
    """

    by_cpus: Mapping[tuple[int, ...], float]
    at_s: float
    method: str
    array_mib: int

    def to_dict(self) -> dict[str, object]:
        return {
            "version": BASELINE_VERSION,
            "at_s": round(self.at_s, 3),
            "method": self.method,
            "array_mib": self.array_mib,
            "entries": [
                {"cpus": format_cpu_list(c), "gbps": round(g, 4)}
                for c, g in sorted(self.by_cpus.items())
            ],
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> Baseline:
        """Read a baseline file's content back.

        Raises:
            ProbeError: a file of another shape (it says to run ``--init`` again).
        """
        try:
            if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION:
                raise ValueError("not a baseline of this version")
            entries = {}
            for entry in data["entries"]:
                gbps = float(entry["gbps"])
                if not math.isfinite(gbps) or gbps <= 0:
                    raise ValueError(f"bandwidth {gbps!r}")
                entries[parse_cpu_list(str(entry["cpus"]))] = gbps
            return cls(entries, float(data["at_s"]), str(data["method"]), int(data["array_mib"]))
        except (KeyError, TypeError, ValueError, JobSpecError) as exc:
            raise ProbeError(
                f"the membw baseline {where} is unreadable ({exc}); {INIT_HINT}"
            ) from exc


@dataclass(frozen=True)
class Reference:
    """The baseline a probe is compared with, and where it comes from (for people)."""

    gbps: float
    source: str


def baseline_for(baseline: Baseline, cpus: Sequence[int]) -> Reference:
    """The idle bandwidth of ``cpus``: of that very set, else of as many cores, else
    interpolated between the nearest counts measured (or the largest, beyond them).

    Raises:
        ProbeError: the baseline holds nothing at all.
    """
    key = tuple(sorted(cpus))
    if key in baseline.by_cpus:
        return Reference(baseline.by_cpus[key], f"cpus {format_cpu_list(key)}")
    by_count: dict[int, float] = {}
    for cores, gbps in baseline.by_cpus.items():
        by_count.setdefault(len(cores), gbps)
    if not by_count:
        raise ProbeError(f"the membw baseline is empty; {INIT_HINT}")
    n = len(key)
    if n in by_count:
        return Reference(by_count[n], f"{n} cores (other cores of this node)")
    lower = [c for c in by_count if c < n]
    higher = [c for c in by_count if c > n]
    if not higher:
        top = max(lower)
        return Reference(by_count[top], f"{top} cores (the most measured; bandwidth saturates)")
    if not lower:
        low = min(higher)
        return Reference(by_count[low] * n / low, f"{low} cores scaled to {n}")
    a, b = max(lower), min(higher)
    gbps = by_count[a] + (by_count[b] - by_count[a]) * (n - a) / (b - a)
    return Reference(gbps, f"interpolated between {a} and {b} cores")


def check_cpus(cpus: Sequence[int], allowed: Sequence[int]) -> tuple[int, ...]:
    """``cpus`` when every one is in the node's allowed set.

    Raises:
        ProbeError: naming the cores that are not, and the allowed set.
    """
    if not cpus:
        raise ProbeError("--cpus names no core (e.g. --cpus 2-3)")
    outside = sorted(set(cpus) - set(allowed))
    if outside:
        raise ProbeError(
            f"cores {format_cpu_list(outside)} are not in this node's allowed set "
            f"{format_cpu_list(allowed) or '(none)'} (the cores coshare's parent "
            "group may use)"
        )
    return tuple(sorted(set(cpus)))


@dataclass(frozen=True)
class ProbeResult:
    """A probe compared with the baseline: what the facts publish.

    Attributes:
        measurement: what the probe reached.
        baseline_gbps: the idle node's bandwidth on those cores.
        baseline_source: where that comes from.
    """

    measurement: Measurement
    baseline_gbps: float
    baseline_source: str

    @property
    def fraction(self) -> float:
        """Available share of the idle bandwidth (libDistGen's ``membw_available``)."""
        return self.measurement.gbps / self.baseline_gbps

    def to_dict(self) -> dict[str, object]:
        # The share of the figures as written: a record read back says the same share.
        gbps, baseline = round(self.measurement.gbps, 4), round(self.baseline_gbps, 4)
        return {
            **self.measurement.to_dict(),
            "baseline_gbps": baseline,
            "baseline": self.baseline_source,
            "available": round(gbps / baseline, 4),
        }

    @classmethod
    def from_dict(cls, data: object) -> ProbeResult:
        """Read a recorded result back.

        Raises:
            ValueError: a record of another shape.
        """
        if not isinstance(data, dict):
            raise ValueError("not a probe record")
        try:
            cpus = parse_cpu_list(str(data["cpus"]))
        except JobSpecError as exc:
            raise ValueError(str(exc)) from exc
        measurement = Measurement(
            cpus,
            float(data["gbps"]),
            float(data["seconds"]),
            float(data["at_s"]),
            int(data["array_mib"]),
            str(data["method"]),
        )
        base = float(data["baseline_gbps"])
        if (
            not all(math.isfinite(v) for v in (measurement.gbps, base, measurement.at_s))
            or base <= 0
            or measurement.gbps < 0
        ):
            raise ValueError("a probe record with unusable numbers")
        return cls(measurement, base, str(data["baseline"]))


def node_peak_gbps(baseline: Baseline) -> float:
    """What the idle node streamed on the most cores the baseline measured (its whole
    bandwidth, as far as the probe knows; the best figure when two sets are as large)."""
    most = max(len(c) for c in baseline.by_cpus)
    return max(g for c, g in baseline.by_cpus.items() if len(c) == most)


def cap_percent(cap_gbps: float, node_gbps: float) -> int:
    """A bandwidth cap as the percentage of the node's bandwidth an ``MB:`` line takes,
    rounded up (never cap a job below what it was admitted with), within 1..100.

    Raises:
        ProbeError: a node bandwidth or a cap that is not a positive number.
    """
    if (
        not (math.isfinite(cap_gbps) and math.isfinite(node_gbps))
        or cap_gbps <= 0
        or node_gbps <= 0
    ):
        raise ProbeError(
            f"membw cap {cap_gbps!r} GB/s of a node of {node_gbps!r} GB/s: want numbers above 0"
        )
    return min(100, max(1, math.ceil(100 * cap_gbps / node_gbps - 1e-9)))
