"""The one calibrated input: the offload share that gives the paper's measured utilization.

The paper measured one thing about its jobs' behaviour: under the exclusive baseline (MC) the
Xeon Phi cores were busy about 50% of the time on the Table I set (section III), and 38% to
63% on the synthetic sets. The offload share ``f`` (the part of a job's run time spent in
offloads) is set so the simulated MC reaches the 50%; nothing else is fitted.

This is exact and cheap: under MC a job has its device alone, so it runs for its run time
whatever ``f`` is, the MC schedule does not depend on ``f``, and its utilization is
``f * U1``, where ``U1`` is the utilization with ``f = 1``. One MC run with fixed run times
gives ``U1``, hence ``f = target / U1``, and the same run *is* the MC result (its busy
thread-seconds scaled by ``f``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from coshare.errors import CoshareError
from coshare.model import Node
from coshare.policies import make_policy
from coshare.sim.device import FixedModel
from coshare.sim.engine import SimOptions, SimResult, simulate
from coshare.sim.workloads import JobDraw, realize

#: The exclusive baseline's average device core utilization on the Table I set (section III).
PAPER_MC_UTILIZATION = 0.50


@dataclass(frozen=True)
class Calibration:
    """The calibrated offload share and the MC run it came from.

    Attributes:
        offload_share: ``f``, the part of a job's run time spent offloading.
        target_utilization: the MC utilization it reproduces.
        baseline: the exclusive run on the calibration cluster, with ``f`` applied.
    """

    offload_share: float
    target_utilization: float
    baseline: SimResult


def calibrate(
    nodes: Sequence[Node],
    draws: Sequence[JobDraw],
    target: float = PAPER_MC_UTILIZATION,
    options: SimOptions | None = None,
) -> Calibration:
    """The offload share at which exclusive (MC) on ``nodes`` has ``target`` utilization.

    Raises:
        CoshareError: the jobs cannot reach ``target`` even offloading all the time.
    """
    jobs = realize(draws, 1.0)
    run = simulate(nodes, jobs, make_policy("exclusive"), options=options, model=FixedModel())
    full = run.utilization
    if full < target:
        raise CoshareError(
            f"exclusive utilization is {full:.1%} even with offloads all the time; "
            f"cannot calibrate to {target:.0%}"
        )
    share = target / full
    scaled = replace(run, busy_thread_s=tuple(b * share for b in run.busy_thread_s))
    return Calibration(share, target, scaled)
