"""Footprint: the smallest cluster on which a policy matches the baseline's makespan.

The paper's Tables II and III: for MCC and MCCK, the cluster size (nodes, one device each)
needed to finish the job set within the makespan the exclusive baseline needs on 8 nodes.

The search starts from the size the policy's own speed-up suggests (``ceil(N * m(N) /
target)``, ``m(N)`` its makespan on the baseline's ``N`` nodes), then walks down while the
target is met and up while it is not, so it usually simulates two sizes. It assumes a
larger cluster is never slower, which holds on every size it simulates (all are reported).
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Footprint:
    """The result of a footprint search.

    Attributes:
        nodes: the smallest size found that meets the target; ``None`` if even
            ``max_nodes`` does not.
        target_s: the makespan to match.
        makespans: every size simulated, with its makespan.
    """

    nodes: int | None
    target_s: float
    makespans: dict[int, float] = field(default_factory=dict)


def search_footprint(
    makespan_at: Callable[[int], float],
    target_s: float,
    baseline_nodes: int,
    max_nodes: int | None = None,
) -> Footprint:
    """The smallest node count whose makespan is at most ``target_s``.

    Args:
        makespan_at: simulates the job set on a cluster of that many nodes.
        target_s: the makespan to match (the baseline's, on ``baseline_nodes``).
        baseline_nodes: where to start; its makespan is simulated first.
        max_nodes: the largest size tried (default: ``baseline_nodes``).
    """
    top = max_nodes if max_nodes is not None else baseline_nodes
    seen: dict[int, float] = {}

    def ok(n: int) -> bool:
        if n not in seen:
            seen[n] = makespan_at(n)
        return seen[n] <= target_s * (1 + 1e-9)

    base_ok = ok(baseline_nodes)
    guess = max(1, min(top, math.ceil(baseline_nodes * seen[baseline_nodes] / target_s)))
    if not base_ok and guess <= baseline_nodes:
        guess = baseline_nodes + 1
    n = guess
    if n <= top and ok(n):
        while n > 1 and ok(n - 1):
            n -= 1
        return Footprint(n, target_s, dict(sorted(seen.items())))
    while n < top:
        n += 1
        if ok(n):
            return Footprint(n, target_s, dict(sorted(seen.items())))
    return Footprint(None, target_s, dict(sorted(seen.items())))
