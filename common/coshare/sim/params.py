"""What ``coshare simulate --sweep KEY=V1,V2,...`` may vary, and the grid of points it runs.

A sweep varies any parameter of a workload or of the policies: several ``--sweep`` options
make a grid (every combination, in the order given). The parameters:

- **workload**: ``jobs`` (jobs in the set; a trace replays its own), ``nodes`` (cluster
  size; a trace: its first N nodes), ``scaling_share`` (the ``sns`` workload's share of
  scaling jobs, Spread-n-Share section 6.3);
- **engine**: ``cycle_delay_s``, ``offload_share`` (paper workloads);
- **policy**: ``threads``, ``age_limit_s``, ``memory_grid_mib``, and every other keyword
  option of :class:`coshare.policies.PolicyOptions` (read from its signature, so a policy
  option added there can be swept at once), parsed by the type of its default.

A key that names none of them is refused with the list of valid ones. Every value is
checked (finite, within its range) before anything runs. Pure: no I/O.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from coshare.errors import InputError
from coshare.ledger.bounds import MAX_SIM_JOBS, MAX_SIM_NODES, MAX_SIM_SIZES, parse_number, shorten
from coshare.policies import PolicyOptions
from coshare.sim.experiments import Setup

#: How many points one sweep may have (the product of its keys' value counts).
MAX_SWEEP_POINTS = MAX_SIM_SIZES
#: The longest duration a sweep may set: a year, as the config's settings (coshare.config).
MAX_SETTING_S = 365 * 24 * 3600.0
#: The largest value of a policy option that names no bound of its own.
MAX_OPTION = 2**31
#: Setup fields a sweep sets directly (the others of PolicyOptions go to policy_params).
_SETUP_FIELDS = {"threads", "age_limit_s", "memory_grid_mib", "cycle_delay_s", "offload_share"}
#: PolicyOptions keywords that are not parameters: derived per run, or the seed itself.
_NOT_PARAMETERS = {"seed", "fgd_workload", "bestfit_scale", "sns_profiles"}

Point = tuple[tuple[str, Any], ...]
"""One point of a sweep: (key, value) per swept key, in the order the keys were given."""


@dataclass(frozen=True)
class Param:
    """A parameter a sweep may vary.

    Attributes:
        name: its key.
        kind: ``workload``, ``engine`` or ``policy``.
        parse: text -> value, raising ``ValueError`` with what is allowed.
    """

    name: str
    kind: str
    parse: Callable[[str], Any]


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = parse_number(text)
        if number is None or not number.is_integer() or not low <= number <= high:
            raise ValueError(f"an integer {low}..{high}")
        return int(number)

    return parse


def _real(
    low: float, high: float, *, low_open: bool = False, none: bool = False
) -> Callable[[str], float | None]:
    def parse(text: str) -> float | None:
        if none and text.strip().lower() in ("none", "null"):
            return None
        number = parse_number(text)
        if (
            number is None
            or not math.isfinite(number)
            or not low <= number <= high
            or (low_open and number == low)
        ):
            what = f"a number {'above' if low_open else 'from'} {low:g} to {high:g}"
            raise ValueError(what + (" or none" if none else ""))
        return number

    return parse


def _choice(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            raise ValueError("one of " + ", ".join(names))
        return text

    return parse


def _policy_option(default: object) -> Callable[[str], Any]:
    """A parser for a PolicyOptions keyword by the type of its default."""
    if isinstance(default, bool):
        return _choice("true", "false")
    if isinstance(default, int):
        return _integer(0, MAX_OPTION)
    if isinstance(default, float) or default is None:
        return _real(0, float(MAX_OPTION), none=default is None)
    return lambda text: text


def parameters() -> dict[str, Param]:
    """Every parameter a sweep may vary, by key."""
    params = {
        "jobs": Param("jobs", "workload", _integer(1, MAX_SIM_JOBS)),
        "nodes": Param("nodes", "workload", _integer(1, MAX_SIM_NODES)),
        "cycle_delay_s": Param("cycle_delay_s", "engine", _real(0, MAX_SETTING_S)),
        "offload_share": Param("offload_share", "engine", _real(0, 1, low_open=True)),
        "threads": Param("threads", "policy", _choice("soft", "strict")),
        "age_limit_s": Param("age_limit_s", "policy", _real(0, MAX_SETTING_S, none=True)),
        "memory_grid_mib": Param("memory_grid_mib", "policy", _integer(1, 1 << 20)),
    }
    for name, p in inspect.signature(PolicyOptions).parameters.items():
        if p.kind is p.KEYWORD_ONLY and name not in params and name not in _NOT_PARAMETERS:
            params[name] = Param(name, "policy", _policy_option(p.default))
    # the sns workload's share of scaling jobs (Spread-n-Share section 6.3), listed last
    params["scaling_share"] = Param("scaling_share", "workload", _real(0, 1))
    return params


def parse_sweeps(texts: Sequence[str], allowed: Sequence[str] | None = None) -> list[Point]:
    """The grid of points of ``--sweep KEY=V1,V2`` options (each key once).

    Args:
        texts: the options' values.
        allowed: the keys this workload can vary (``None``: all).

    Raises:
        InputError: a malformed option, a key that names no parameter (listing the valid
            ones), a value out of its range, a key given twice, or too many points.
    """
    params = parameters()
    valid = [k for k in params if allowed is None or k in allowed]
    axes: list[tuple[str, list[Any]]] = []
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            raise InputError(
                f"--sweep {shorten(text)}: want KEY=V1,V2,... (keys: {', '.join(valid)})"
            )
        if key not in valid:
            raise InputError(
                f"--sweep: {shorten(key)} names no parameter (valid: {', '.join(valid)})"
            )
        if key in (k for k, _ in axes):
            raise InputError(f"--sweep: {key} given twice")
        parts = [v.strip() for v in values.split(",")[: MAX_SWEEP_POINTS + 1]]
        if len(parts) > MAX_SWEEP_POINTS:
            raise InputError(f"--sweep {key}: more than {MAX_SWEEP_POINTS} values")
        parsed = []
        for part in parts:
            try:
                parsed.append(params[key].parse(part))
            except ValueError as exc:
                raise InputError(
                    f"--sweep {key}: {shorten(part)} is not allowed (allowed: {exc})"
                ) from exc
        axes.append((key, list(dict.fromkeys(parsed))))
    count = math.prod(len(values) for _, values in axes)
    if count > MAX_SWEEP_POINTS:
        raise InputError(f"--sweep: {count} points; at most {MAX_SWEEP_POINTS}")
    return [
        tuple(zip([k for k, _ in axes], combo, strict=True))
        for combo in itertools.product(*[values for _, values in axes])
    ]


def apply(point: Point, setup: Setup) -> Setup:
    """``setup`` with the point's engine and policy parameters."""
    direct = {k: v for k, v in point if k in _SETUP_FIELDS}
    extra = {
        k: v
        for k, v in point
        if k not in _SETUP_FIELDS and k not in ("jobs", "nodes", "scaling_share")
    }
    if extra:
        merged = {**dict(setup.policy_params), **extra}
        direct["policy_params"] = tuple(sorted(merged.items()))
    return replace(setup, **direct) if direct else setup


def value_of(point: Point, key: str, default: Any) -> Any:
    """The point's value of ``key``, else ``default``."""
    return next((v for k, v in point if k == key), default)


def label(point: Point) -> str:
    """``jobs=500 threads=soft``: how messages and tables name a point."""
    return " ".join(f"{k}={v}" for k, v in point)
