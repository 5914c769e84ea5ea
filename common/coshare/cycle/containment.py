"""Containment: one job's or one node's input never stops planning for everyone else.

A policy is code, and code has bugs that only some input shows: a job whose values no test
had, a node of a shape nobody planned for. When the policy raises, or the plan it makes fails
the cycle's check (:func:`coshare.cycle.verify.check_plan`), the cycle used to end with nothing
written for anyone. :func:`plan_contained` finds the input that triggers the failure instead,
plans the rest, and says what it left out::

    plan(snapshot)  --ok-->  the plan
        | fails
        v
    bisect the pending jobs: the fewest jobs whose presence makes it fail (a plan of no
    pending jobs must pass; else the nodes are bisected the same way, with every job)
        |
        v
    leave them (or those nodes) out, plan again; repeat while it still fails,
    at most MAX_ROUNDS times (then the failure stands, and nothing is written)

The search as a whole plans at most :data:`MAX_WORK` times the snapshot's pending jobs,
summed over its runs: a failure that needs many jobs together (no half fails alone)
would otherwise have it plan large parts of the snapshot again and again, for minutes, while
the cycle holds its lock. Past that the failure stands too.

A job left out waits with code ``policy_failed`` and a reason that says so (it reaches
``show``, ``explain`` and the job's own wait reason like every other reason); a node left out
is planned on by no one this cycle and named in a note. Each failure comes back as a
:class:`Contained`, with the smallest snapshot that reproduces it, for the cycle to log and
write to a file an admin can hand to ``coshare plan`` (:func:`coshare.cli.cycles.run_once`).

Bisection costs a few more policy runs only when a policy fails: about ``2 log2(n)`` runs to
find one job among ``n``; none on the usual path. Errors that are not the input's fault
(:class:`MemoryError`, an interrupt) are never contained.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from coshare.model import Job, Node, Plan, Snapshot, Unplaced

#: Rounds of bisection at most (each leaves out at least one job or node); past them the
#: policy is taken to fail on everything, and the failure stands.
MAX_ROUNDS = 8
#: The search plans at most this many times the snapshot's pending jobs, summed over its
#: runs: a round that finds one job costs about four (halving, then the rest without it),
#: so :data:`MAX_ROUNDS` such rounds fit.
MAX_WORK = 48
#: A failure's text in a reason or a note is cut to this many characters.
MAX_ERROR_CHARS = 200

Check = Callable[[Snapshot, Plan], list[str]]
"""The cycle's plan check: the violations of a plan for a snapshot (empty: sound)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Contained:
    """One failure of the policy that the cycle planned around.

    Attributes:
        error: what the policy raised, or what the plan check found, for a person.
        jobs: the pending jobs left out (they wait with code ``policy_failed``).
        nodes: the nodes left out of this cycle's plan.
        snapshot: the smallest input found that reproduces the failure: the culprits with
            the cluster (every node, for culprit jobs; the culprit nodes with their running
            jobs and every pending job, for culprit nodes).
    """

    error: str
    jobs: tuple[str, ...]
    nodes: tuple[str, ...]
    snapshot: Snapshot


@dataclass(frozen=True)
class ContainedPlan:
    """A plan made around the policy's failures.

    Attributes:
        plan: the plan of the rest, with the jobs left out among its ``unplaced`` (code
            ``policy_failed``) and one note per node left out.
        contained: each failure planned around (empty on the usual path).
    """

    plan: Plan
    contained: tuple[Contained, ...] = ()


class _Runner:
    """Plans a snapshot and says whether (and how) the plan failed."""

    def __init__(self, plan: Callable[[Snapshot], Plan], check: Check, budget: int) -> None:
        self._plan = plan
        self._check = check
        #: pending jobs the runs may still plan (:data:`MAX_WORK`)
        self.budget = budget
        #: What the policy raised the first time it raised (re-raised when nothing helps).
        self.first_exception: Exception | None = None
        #: The violations of the first plan that failed the check (the whole snapshot's).
        self.first_problems: tuple[str, ...] = ()

    def failure(self, snapshot: Snapshot) -> tuple[Plan | None, str | None]:
        """The plan and ``None``, or ``None`` (when the policy raised) and why it failed.

        Raises:
            _OutOfWork: the runs have planned all the budget allows.
        """
        if self.budget <= 0:
            raise _OutOfWork
        self.budget -= _work(snapshot)
        try:
            plan = self._plan(snapshot)
        except MemoryError:
            raise
        except Exception as exc:  # a policy's bug, whatever its kind: contained
            if self.first_exception is None:
                self.first_exception = exc
            return None, _cut(f"{type(exc).__name__}: {exc}")
        problems = self._check(snapshot, plan)
        if problems:
            if not self.first_problems:
                self.first_problems = tuple(problems)
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            return plan, _cut("the plan check found: " + "; ".join(problems[:3]) + more)
        return plan, None

    def fails(self, snapshot: Snapshot) -> bool:
        return self.failure(snapshot)[1] is not None


def plan_contained(
    policy_plan: Callable[[Snapshot], Plan], snapshot: Snapshot, check: Check, policy_name: str
) -> ContainedPlan:
    """Plan ``snapshot`` with ``policy_plan``, containing the policy's failures.

    Args:
        policy_plan: the policy's ``plan`` (timed by the caller if it wants).
        snapshot: what to plan.
        check: the cycle's plan check.
        policy_name: for the reasons and notes.

    Returns:
        The plan: ``policy_plan(snapshot)`` itself when it passes the check; else the plan of
        what remains once the culprits are left out, with what was left out.

    Raises:
        PolicyFailed: the policy fails even on no pending job and no node, or after
            :data:`MAX_ROUNDS` rounds of leaving culprits out (it fails on everything), or
            the search has planned :data:`MAX_WORK` snapshots' worth.
    """
    runner = _Runner(policy_plan, check, (MAX_WORK + 1) * _work(snapshot))
    plan, error = runner.failure(snapshot)
    if error is None:
        assert plan is not None
        return ContainedPlan(plan)
    first_error = error
    current = snapshot
    contained: list[Contained] = []
    try:
        for _ in range(MAX_ROUNDS):
            found = _culprits(runner, current)
            if found is None:
                break
            jobs, nodes, reproduce = found
            contained.append(
                Contained(
                    error or first_error,
                    tuple(j.id for j in jobs),
                    tuple(n.name for n in nodes),
                    reproduce,
                )
            )
            current = _without(current, {j.id for j in jobs}, {n.name for n in nodes})
            plan, error = runner.failure(current)
            if error is None:
                assert plan is not None
                left_out = _with_left_out(plan, contained, policy_name)
                return ContainedPlan(left_out, tuple(contained))
    except _OutOfWork:
        pass  # the failure stands, as after the last round
    raise PolicyFailed(policy_name, first_error, runner.first_exception, runner.first_problems)


class _OutOfWork(Exception):
    """The search for culprits has planned all :data:`MAX_WORK` allows."""


def _work(snapshot: Snapshot) -> int:
    """What one run on ``snapshot`` counts against the budget: its pending jobs, and one for
    the run (the nodes' halving plans few jobs on each part of the cluster)."""
    return len(snapshot.pending) + 1


class PolicyFailed(Exception):
    """The policy failed and no culprit could be left out to plan the rest (see
    :func:`plan_contained`): it fails on everything, as a wrong setting makes it.

    Attributes:
        policy: the policy's name.
        error: the first failure, for a person.
        raised: what the policy raised, when it raised (the caller re-raises it: a failure
            of every input is the policy's or its settings' own, as before containment).
        problems: the plan check's violations of the first plan that failed it.
    """

    def __init__(
        self, policy: str, error: str, raised: Exception | None, problems: tuple[str, ...] = ()
    ) -> None:
        self.policy = policy
        self.error = error
        self.raised = raised
        self.problems = problems
        super().__init__(f"policy {policy} failed on every input tried: {error}")


def _culprits(runner: _Runner, snapshot: Snapshot) -> tuple[list[Job], list[Node], Snapshot] | None:
    """The jobs or else the nodes to leave out of a failing ``snapshot``, and the smallest
    snapshot that reproduces the failure; ``None`` when neither can be found.

    Jobs first: the fewest pending jobs that fail; when leaving them out lets the rest pass,
    they are the culprits (a job left out costs one user a cycle; a node, everyone). When
    the rest still fails (any job fails: a node's input is at fault), the fewest nodes that
    fail with those jobs are left out instead.
    """
    jobs: list[Job] = []
    if snapshot.pending and not runner.fails(replace(snapshot, pending=())):
        jobs = _smallest_failing(
            list(snapshot.pending),
            [],
            lambda js: runner.fails(replace(snapshot, pending=tuple(js))),
        )
        if not runner.fails(_without(snapshot, {j.id for j in jobs}, set())):
            return jobs, [], replace(snapshot, pending=tuple(jobs))
    probe = replace(snapshot, pending=tuple(jobs)) if jobs else snapshot
    if snapshot.nodes and not runner.fails(_only_nodes(probe, [])):
        nodes = _smallest_failing(
            list(snapshot.nodes), [], lambda ns: runner.fails(_only_nodes(probe, ns))
        )
        return [], nodes, _only_nodes(probe, nodes)
    if jobs:
        return jobs, [], replace(snapshot, pending=tuple(jobs))
    return None


def _smallest_failing(items: list[T], base: list[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A small part of ``items`` that fails together with ``base`` (which passes alone), by
    halving: when neither half fails alone with ``base``, the failure needs parts of both,
    and each half's part is found with the other's."""
    if len(items) == 1:
        return items
    half = len(items) // 2
    first, second = items[:half], items[half:]
    if fails(base + first):
        return _smallest_failing(first, base, fails)
    if fails(base + second):
        return _smallest_failing(second, base, fails)
    second_part = _smallest_failing(second, base + first, fails)
    first_part = _smallest_failing(first, base + second_part, fails)
    return first_part + second_part


def _only_nodes(snapshot: Snapshot, nodes: Sequence[Node]) -> Snapshot:
    names = {n.name for n in nodes}
    return replace(
        snapshot, nodes=tuple(nodes), running=tuple(r for r in snapshot.running if r.node in names)
    )


def _without(snapshot: Snapshot, jobs: set[str], nodes: set[str]) -> Snapshot:
    return replace(
        snapshot,
        pending=tuple(j for j in snapshot.pending if j.id not in jobs),
        nodes=tuple(n for n in snapshot.nodes if n.name not in nodes),
        running=tuple(r for r in snapshot.running if r.node not in nodes),
    )


def _with_left_out(plan: Plan, contained: Sequence[Contained], policy: str) -> Plan:
    """``plan`` with the jobs left out waiting (``policy_failed``) and a note per node."""
    waits: list[Unplaced] = []
    notes: list[str] = []
    for c in contained:
        for job in c.jobs:
            waits.append(
                Unplaced(
                    job,
                    f"the {policy} policy failed while planning this job "
                    f"({c.error}); the cycle planned the other jobs and left "
                    "this one for an admin (the cycle's log names the snapshot "
                    "that reproduces it)",
                    "policy_failed",
                )
            )
        if c.nodes:
            shown = ", ".join(c.nodes[:5]) + (
                f" and {len(c.nodes) - 5} more" if len(c.nodes) > 5 else ""
            )
            notes.append(
                f"nodes {shown} left out of this cycle's plan: the {policy} policy "
                f"failed on them ({c.error})"
            )
    return replace(plan, unplaced=plan.unplaced + tuple(waits), notes=plan.notes + tuple(notes))


def _cut(text: str) -> str:
    """``text`` on one line, printable, at most :data:`MAX_ERROR_CHARS` characters."""
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
