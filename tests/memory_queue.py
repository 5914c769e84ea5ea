"""A Source and Editor in memory, for whole cycles in unit tests: what the cycle reads, and
every plan it would write."""

from __future__ import annotations

from collections.abc import Sequence

from coshare.model import Plan, Snapshot
from coshare.ports import ApplyReport, Rejected, SourceResult


class MemoryQueue:
    """Reads ``snapshot``; records each plan applied and reports its placements written."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.written: list[Plan] = []

    def read(self) -> SourceResult:
        return SourceResult(self.snapshot)

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        self.written.append(plan)
        return ApplyReport(applied=tuple(sorted(plan.placed_jobs)), dry_run=dry_run)
