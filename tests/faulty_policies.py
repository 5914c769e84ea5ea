"""Policies with a bug that one input shows, for the containment tests (unit and live): they
wrap a real policy and fail only where the test says, the way a policy's bug does."""

from __future__ import annotations

from dataclasses import dataclass, replace

from coshare.model import Assignment, Plan, Snapshot
from coshare.policies.base import Policy


@dataclass(frozen=True)
class Wrapped:
    """A real policy under the name it plans as."""

    inner: Policy

    @property
    def name(self) -> str:
        return self.inner.name


@dataclass(frozen=True)
class CrashesOnJob(Wrapped):
    """Raises, as a policy's indexing bug does, whenever job ``job`` is pending."""

    job: str

    def plan(self, snapshot: Snapshot) -> Plan:
        if any(j.id == self.job for j in snapshot.pending):
            raise IndexError("index 0 is out of bounds for axis 0 with size 0")
        return self.inner.plan(snapshot)


@dataclass(frozen=True)
class MisplacesJob(Wrapped):
    """Plans as ``inner`` does, but puts job ``job`` on a device its node does not have: a
    plan the cycle's check refuses."""

    job: str

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = self.inner.plan(snapshot)
        if not any(j.id == self.job for j in snapshot.pending) or not snapshot.nodes:
            return plan
        node = snapshot.nodes[0].name
        return replace(
            plan,
            assignments=(
                *(a for a in plan.assignments if a.job != self.job),
                Assignment(self.job, node, ("no-such-device",)),
            ),
            unplaced=tuple(u for u in plan.unplaced if u.job != self.job),
        )


@dataclass(frozen=True)
class CrashesOnNode(Wrapped):
    """Raises whenever node ``node`` is in the snapshot and a job is pending."""

    node: str

    def plan(self, snapshot: Snapshot) -> Plan:
        if snapshot.pending and any(n.name == self.node for n in snapshot.nodes):
            raise ZeroDivisionError("float division by zero")
        return self.inner.plan(snapshot)
