"""Program profiles and per-job demand of Spread-n-Share.

A profile (sections 4.1-4.2 and 5.1 of ``shared/papers/spread-n-share.md``) describes one
program, the value jobs name with ``CoshareProgram``:

- ``run_time_s``: its run time alone (exclusive nodes) at scale factors 1, 2, 4 and 8 (the
  paper's four candidate scales, section 5.1); a program that cannot run on more than one
  node (the paper's GAN and RNN) says ``"single_node": true`` and gives scale 1 only;
- ``ways``, ``ipc``, ``membw_gbps``: the IPC-LLC and BW-LLC curves, sampled at a few way
  counts (the paper samples 2, 4, 8 and 20) with linear interpolation in between; measured
  with ``cores`` processes on one node (the paper: 16);
- ``sources`` (optional): where each value came from, free text (the simulator's data file
  labels the values read off a figure there).

The class follows section 4.2: *neutral* when the run times stay within 5% across the
scales, else *scaling* when a scale above 1 is fastest and *compact* when scale 1 is.

Per-job demand (section 4.3): with slowdown threshold ``alpha`` a job needs ``w``, the
fewest ways whose IPC is at least ``alpha`` x the IPC with the full cache, and the bandwidth
``b`` at ``w``; a job of ``P`` processes at scale ``k`` on nodes of ``T`` cores takes
``n = k * ceil(P/T)`` nodes with ``ceil(P/n)`` cores each. The paper profiles the curves at
every scale (section 4.1); a coshare profile holds them at ``cores`` processes per node and
reads them for ``c`` processes by per-process working sets: ``c`` processes with ``w`` ways
behave as the profile's ``cores`` processes with ``w x cores / c`` ways, and use
``c / cores`` of the bandwidth (an assumption the paper does not state; docs/policy-sns.md).
``w`` is never below 2 (section 5.1).

Everything here is pure: :func:`parse_profile` checks a decoded JSON object and raises
:class:`ProfileError` naming the file and the field; :mod:`coshare.profiles.store` reads the
files.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from coshare.errors import InputError

#: The scale factors a profile gives run times for (section 5.1: "1, 2, 4, and 8").
SCALES = (1, 2, 4, 8)
#: The fewest ways a job is given (section 5.1: "most programs need at least 2 ways, due to
#: the dramatic loss of cache associativity when limited to a single way").
MIN_WAYS = 2
#: Run times within this factor of each other across scales: the program is neutral.
NEUTRAL_SPREAD = 0.05
#: The default slowdown threshold (section 4.3: "a default alpha value of 0.9").
DEFAULT_ALPHA = 0.9
#: Bounds on a profile's values: way counts, cores, run time, bandwidth, samples.
MAX_WAYS = 1024
MAX_CORES = 4096
MAX_RUN_S = 1e8
MAX_MEMBW_GBPS = 1e5
MAX_SAMPLES = 64
#: Program names follow ``CoshareProgram``'s rule (coshare.ledger.annotations).
PROGRAM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

ProgramClass = Literal["scaling", "compact", "neutral"]


class ProfileError(InputError):
    """A profile file that cannot be used; the message names the file and the field."""

    def __init__(self, where: str, field_name: str, problem: str) -> None:
        self.where = where
        self.field = field_name
        super().__init__(f"profile {where}: {field_name}: {problem}")


@dataclass(frozen=True)
class Profile:
    """One program's profile (see the module docstring).

    Attributes:
        program: the ``CoshareProgram`` value it is for.
        run_time_s: run time alone by scale factor (1, 2, 4, 8; or 1 alone).
        ways: the way counts the curves were sampled at, increasing.
        ipc: IPC at each of ``ways`` (never falling as ways grow).
        membw_gbps: memory bandwidth per node at each of ``ways``, at ``cores`` processes.
        cores: processes per node the curves were measured with.
        single_node: the program cannot run on more than one node.
        sources: where the values came from, by field (free text).
    """

    program: str
    run_time_s: Mapping[int, float]
    ways: tuple[int, ...]
    ipc: tuple[float, ...]
    membw_gbps: tuple[float, ...]
    cores: int = 16
    single_node: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def scales(self) -> tuple[int, ...]:
        """The scale factors it has run times for, increasing."""
        return tuple(sorted(self.run_time_s))

    def speedup(self, scale: int) -> float:
        """Run time at scale 1 over run time at ``scale`` (Fig. 13's speedup)."""
        return self.run_time_s[1] / self.run_time_s[scale]

    @property
    def best_scale(self) -> int:
        """The scale with the shortest run time alone (ties: the smaller)."""
        return min(self.scales, key=lambda k: (self.run_time_s[k], k))

    @property
    def program_class(self) -> ProgramClass:
        """``neutral``, ``scaling`` or ``compact`` (section 4.2); a single-node program is
        compact (section 6.4 counts the two that cannot leave a node among the compact)."""
        if self.single_node:
            return "compact"
        times = list(self.run_time_s.values())
        if max(times) <= min(times) * (1.0 + NEUTRAL_SPREAD):
            return "neutral"
        return "scaling" if self.best_scale > 1 else "compact"

    def scale_order(self) -> tuple[int, ...]:
        """The scales to try: fastest alone first, then by exclusive performance (section
        4.4: "in descending order of profiled exclusive run overall performance"). A neutral
        program is scaled "passively" (section 6.1: not for its performance but to use
        residual cores on several nodes): compact first, then wider."""
        if self.program_class == "neutral":
            return self.scales
        return tuple(sorted(self.scales, key=lambda k: (self.run_time_s[k], k)))

    def equivalent_ways(self, ways: float, cores: int | None = None) -> float:
        """The ways that give each of ``cores`` processes the cache ``ways`` give each of the
        profile's ``cores``: ``ways x self.cores / cores`` (per-process working sets, see
        :func:`demand`)."""
        return ways if cores is None else ways * self.cores / cores

    def ipc_at(self, ways: float, cores: int | None = None) -> float:
        """IPC with ``ways`` ways (shared by ``cores`` processes; default: the profile's),
        linear between samples, flat beyond them."""
        return _interpolate(self.ways, self.ipc, self.equivalent_ways(ways, cores))

    def membw_at(self, ways: float, cores: int | None = None) -> float:
        """Bandwidth per node at the profile's ``cores`` processes with ``ways`` ways (shared
        by ``cores`` processes; scale it by ``cores / self.cores`` for theirs)."""
        return _interpolate(self.ways, self.membw_gbps, self.equivalent_ways(ways, cores))

    @property
    def has_curves(self) -> bool:
        """Whether it has the IPC-LLC and BW-LLC curves (a profile learned from normal runs
        may have run times only, :mod:`coshare.profiles.learning`: its jobs get no way allocation
        and
        count no bandwidth)."""
        return len(self.ways) >= 2

    @property
    def full_ways(self) -> int:
        """The most ways it was measured with (the "full cache" of section 4.3)."""
        return self.ways[-1]

    def ways_for(self, alpha: float, cores: int | None = None) -> int:
        """``w``: the fewest whole ways whose IPC reaches ``alpha`` x the full-cache IPC, for
        ``cores`` processes on the node (default: the profile's); never fewer than
        :data:`MIN_WAYS`, nor than what stands for the fewest measured (nothing is known
        below them)."""
        target = alpha * self.ipc_at(self.full_ways, cores)
        low = max(MIN_WAYS, math.ceil(self.ways[0] / self.equivalent_ways(1, cores) - 1e-9))
        for w in range(min(low, self.full_ways), self.full_ways + 1):
            if self.ipc_at(w, cores) >= target - 1e-12:
                return w
        return self.full_ways


def _interpolate(xs: Sequence[int], ys: Sequence[float], x: float) -> float:
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


@dataclass(frozen=True)
class Demand:
    """What a job asks of each node at one scale factor (section 4.3).

    Attributes:
        scale: the scale factor ``k``.
        nodes: ``n = k * ceil(P/T)``.
        cores_per_node: ``c = ceil(P/n)``.
        ways: ``w`` per node (``None``: no profile, no way allocation).
        membw_gbps: ``b`` per node at ``w`` ways and ``c`` cores (``None``: no profile).
        speedup: run time at scale 1 over run time at this scale, alone.
    """

    scale: int
    nodes: int
    cores_per_node: int
    ways: int | None
    membw_gbps: float | None
    speedup: float = 1.0


def nodes_at(scale: int, processes: int, node_cores: int) -> tuple[int, int]:
    """``(n, c)``: nodes and cores per node of ``processes`` at ``scale`` on nodes of
    ``node_cores`` cores: ``n = k * ceil(P/T)``, ``c = ceil(P/n)``."""
    n = scale * -(-processes // node_cores)
    return n, -(-processes // n)


def demand(
    profile: Profile | None, alpha: float, processes: int, node_cores: int, scale: int
) -> Demand:
    """The job's :class:`Demand` at ``scale`` (no profile: cores only)."""
    n, c = nodes_at(scale, processes, node_cores)
    if profile is None:
        return Demand(scale, n, c, None, None)
    if not profile.has_curves:
        return Demand(scale, n, c, None, None, profile.speedup(scale))
    w = profile.ways_for(alpha, c)
    b = profile.membw_at(w, c) * c / profile.cores
    return Demand(scale, n, c, w, b, profile.speedup(scale))


def parse_profile(data: object, where: str, program: str | None = None) -> Profile:
    """Check a decoded profile and build it.

    Args:
        data: the decoded JSON object.
        where: the file (for messages).
        program: the program the file is named for, if any; ``program`` in the data must
            then match it.

    Raises:
        ProfileError: naming ``where`` and the first field that is wrong.
    """
    if not isinstance(data, Mapping):
        raise ProfileError(where, "(top level)", "not a JSON object")
    known = {
        "program",
        "run_time_s",
        "ways",
        "ipc",
        "membw_gbps",
        "cores",
        "single_node",
        "sources",
        "class",
    }
    for key in data:
        if key not in known:
            raise ProfileError(
                where, str(key)[:64], f"unknown field (known: {', '.join(sorted(known))})"
            )
    name = data.get("program", program)
    if not isinstance(name, str) or PROGRAM_NAME.fullmatch(name) is None:
        raise ProfileError(where, "program", "want 1-64 of A-Z a-z 0-9 _ . - (as CoshareProgram)")
    if program is not None and name != program:
        raise ProfileError(where, "program", f"{name} differs from the file's name ({program})")
    single = data.get("single_node", False)
    if not isinstance(single, bool):
        raise ProfileError(where, "single_node", "want true or false")
    cores = data.get("cores", 16)
    if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= MAX_CORES:
        raise ProfileError(where, "cores", f"want an integer 1..{MAX_CORES}")
    runs = _run_times(data.get("run_time_s"), where, single)
    ways = _samples(data.get("ways"), where, "ways", integer=True, low=1, high=MAX_WAYS)
    if any(b <= a for a, b in itertools.pairwise(ways)):
        raise ProfileError(where, "ways", "want way counts in increasing order")
    ipc = _samples(data.get("ipc"), where, "ipc", low=0.0, high=1e6, count=len(ways))
    if any(x <= 0 for x in ipc):
        raise ProfileError(where, "ipc", "want numbers above 0")
    for i in range(1, len(ipc)):
        if ipc[i] < ipc[i - 1]:
            raise ProfileError(
                where,
                f"ipc[{i}]",
                f"IPC falls from {ipc[i - 1]:g} to {ipc[i]:g} "
                f"as ways grow from {ways[i - 1]:g} to {ways[i]:g} (a larger LLC "
                "allocation never lowers IPC, section 4.1)",
            )
    membw = _samples(
        data.get("membw_gbps"), where, "membw_gbps", low=0.0, high=MAX_MEMBW_GBPS, count=len(ways)
    )
    sources = data.get("sources", {})
    if not isinstance(sources, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) <= 4096 for k, v in sources.items()
    ):
        raise ProfileError(where, "sources", "want an object of field name to text")
    profile = Profile(
        name,
        runs,
        tuple(int(w) for w in ways),
        tuple(ipc),
        tuple(membw),
        cores,
        single,
        dict(sources),
    )
    stated = data.get("class")
    if stated is not None and stated != profile.program_class:
        raise ProfileError(
            where,
            "class",
            f"says {str(stated)[:20]} but the run times make it {profile.program_class}",
        )
    return profile


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _run_times(value: object, where: str, single: bool) -> dict[int, float]:
    wanted = (1,) if single else SCALES
    if not isinstance(value, Mapping):
        raise ProfileError(
            where,
            "run_time_s",
            f"want an object of scale factor to seconds, scales {', '.join(map(str, wanted))}",
        )
    out: dict[int, float] = {}
    for key, seconds in value.items():
        text = str(key)
        if not text.isdigit() or int(text) not in SCALES:
            raise ProfileError(
                where,
                f"run_time_s.{text[:16]}",
                f"not a scale factor (allowed: {', '.join(map(str, SCALES))})",
            )
        number = _number(seconds)
        if number is None or not 0 < number <= MAX_RUN_S:
            raise ProfileError(where, f"run_time_s.{text}", f"want seconds in (0, {MAX_RUN_S:g}]")
        out[int(text)] = number
    missing = [k for k in wanted if k not in out]
    if missing:
        raise ProfileError(
            where,
            "run_time_s",
            "missing scale point"
            f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
            + (
                ' (a program that runs on one node only says "single_node": true)'
                if not single
                else ""
            ),
        )
    if single and set(out) != {1}:
        raise ProfileError(where, "run_time_s", "a single_node program has scale 1 only")
    return out


def _samples(
    value: object,
    where: str,
    name: str,
    *,
    integer: bool = False,
    low: float,
    high: float,
    count: int | None = None,
) -> list[float]:
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_SAMPLES:
        raise ProfileError(where, name, f"want a list of 2..{MAX_SAMPLES} numbers")
    if count is not None and len(value) != count:
        raise ProfileError(where, name, f"has {len(value)} values; ways has {count}")
    out = []
    for i, item in enumerate(value):
        number = _number(item)
        if number is None or not low <= number <= high or (integer and not number.is_integer()):
            kind = "an integer" if integer else "a number"
            raise ProfileError(where, f"{name}[{i}]", f"want {kind} in [{low:g}, {high:g}]")
        out.append(number)
    return out


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The profile as the JSON object :func:`parse_profile` reads."""
    out: dict[str, Any] = {
        "program": profile.program,
        "class": profile.program_class,
        "cores": profile.cores,
        "run_time_s": {str(k): profile.run_time_s[k] for k in profile.scales},
        "ways": list(profile.ways),
        "ipc": list(profile.ipc),
        "membw_gbps": list(profile.membw_gbps),
    }
    if profile.single_node:
        out["single_node"] = True
    if profile.sources:
        out["sources"] = dict(profile.sources)
    return out
