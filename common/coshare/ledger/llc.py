"""Spare LLC ways shared among the jobs of a node (pure; Spread-n-Share section 4.4).

"To not waste cache resources, though SNS keeps record of available LLC ways beyond the
total 'allocated' amount to all active jobs running on a node, it gives away such unused
resources to these jobs in equal shares, reclaiming them whenever a new job is dispatched to
the same node." The one rule, used by the ``sns`` policy (what a plan says each placed job
gets on top of its ways) and by the node (:func:`coshare.node.ways.layout_masks`, which
writes the masks): the ways no job is allocated are split equally among the jobs that hold
ways there; the remainder, fewer than one way per job, goes one way each to the first jobs
in the node's order (the lowest in the cache), so a plan, which does not know that order,
reports the equal floor share.
"""

from __future__ import annotations

from collections.abc import Sequence


def spare_ways(total_ways: int, allocations: Sequence[tuple[str, int]]) -> int:
    """Ways of a node of ``total_ways`` that no job of ``allocations`` (job, ways) holds."""
    return max(0, total_ways - sum(w for _, w in allocations))


def spare_shares(total_ways: int, allocations: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Each job's share of the spare ways, in ``allocations``' order (equal, the remainder
    one each to the first); empty when no job holds ways."""
    if not allocations:
        return {}
    each, rest = divmod(spare_ways(total_ways, allocations), len(allocations))
    return {job: each + (1 if i < rest else 0) for i, (job, _) in enumerate(allocations)}


def floor_share(total_ways: int, allocations: Sequence[tuple[str, int]]) -> int:
    """The share every job of ``allocations`` gets at least (what a plan reports)."""
    return spare_ways(total_ways, allocations) // len(allocations) if allocations else 0
