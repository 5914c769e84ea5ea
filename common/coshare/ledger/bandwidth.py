"""A job's share of its node's memory bandwidth, as poncos counts it: a recorded measurement
of its program, else what it declares over the node's baseline, else unknown (planned as
bandwidth-bound); and what the node's own probe found in use. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from coshare.model import Node

#: The use a job of unknown bandwidth is planned with: all of it ("bandwidth-bound until
#: measured"), so nothing is co-scheduled beside it.
UNKNOWN_SHARE = 1.0


def job_share(
    program: str | None, membw_gbps: float | None, node: Node, programs: Mapping[str, float]
) -> float | None:
    """A job's estimated share of ``node``'s memory bandwidth; ``None`` when unknown.

    A recorded measurement of its program wins over what the job declares (a measurement is
    what poncos trusts); a declared rate needs the node's baseline (or peak) to become a share.
    """
    if program is not None and program in programs:
        return programs[program]
    if membw_gbps is None:
        return None
    base = node.membw_baseline_gbps or node.membw_gbps
    if not base:
        return None
    return min(membw_gbps / base, 1.0)


def measured_use(node: Node) -> tuple[float, float] | None:
    """``(use, probe time)`` from the node's facts, or ``None`` without a usable probe.

    The use is ``1 - available / baseline``, clamped to [0, 1] (a noisy probe can read a
    little above its baseline)."""
    at = node.membw_at_s if node.membw_at_s is not None else node.facts_at_s
    avail, base = node.membw_avail_gbps, node.membw_baseline_gbps
    if avail is None or not base or at is None:
        return None
    return min(max(1.0 - avail / base, 0.0), 1.0), at
