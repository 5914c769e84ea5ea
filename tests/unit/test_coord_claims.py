"""The rules of the engine's device-memory claims (coshare.coord.claims):
what several planners over the same nodes may book, pure."""

from __future__ import annotations

from coshare.coord.claims import (
    Claimed,
    Part,
    admit,
    capacities,
    plan_parts,
    seen,
    stale,
    with_claims,
    without,
)
from coshare.cycle.run import run_cycle
from coshare.model import Assignment, Device, Job, Node, Plan, RunningJob, Snapshot, Unplaced
from coshare.policies import make_policy
from coshare.ports import ApplyReport, Rejected, SourceResult
from hypothesis import given, settings
from hypothesis import strategies as st

CAP = {"n1/0": 8192, "n1/1": 8192, "n2/0": 8192}


def test_a_job_seen_and_claimed_counts_once() -> None:
    live = [Claimed("b", Part("7", "n1", "0", 4000))]
    decision = admit("a", {"8": (Part("8", "n1", "0", 4000),)}, CAP, live, {"n1/0": {"7": 4000}})
    assert decision.refused == {} and [p.job for p in decision.granted] == ["8"]


def test_claims_and_seen_jobs_add_up_and_the_refusal_names_device_and_planner() -> None:
    live = [Claimed("b", Part("7", "n1", "0", 4000))]
    decision = admit("a", {"8": (Part("8", "n1", "0", 3000),)}, CAP, live, {"n1/0": {"6": 2000}})
    assert decision.granted == ()
    assert decision.refused["8"] == (
        "job 8: another planner booked device n1/0 first: 6000 of 8192 MiB in use (claims of "
        "planner b), 3000 MiB more do not fit; it waits for the next cycle"
    )


def test_a_gang_is_granted_whole_or_not_at_all_and_later_jobs_see_earlier_ones() -> None:
    gang = (Part("g", "n1", "0", 5000), Part("g", "n2", "0", 5000))
    live = [Claimed("b", Part("x", "n2", "0", 4000))]
    decision = admit(
        "a",
        {"g": gang, "s": (Part("s", "n1", "0", 5000),), "t": (Part("t", "n1", "0", 5000),)},
        CAP,
        live,
        {},
    )
    assert set(decision.refused) == {"g", "t"}  # g: n2/0 full; t: s took n1/0 first
    assert decision.granted == (Part("s", "n1", "0", 5000),)


def test_a_planner_claiming_a_job_again_replaces_its_own_claim() -> None:
    live = [Claimed("a", Part("8", "n1", "0", 6000))]
    decision = admit("a", {"8": (Part("8", "n1", "0", 6000),)}, CAP, live, {})
    assert decision.refused == {}


def test_an_unknown_device_refuses_the_job() -> None:
    decision = admit("a", {"8": (Part("8", "n9", "0", 1),)}, CAP, [], {})
    assert "n9/0 is not known" in decision.refused["8"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.sampled_from(sorted(CAP)),
            st.integers(1, 9000),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_interleaved_planners_never_book_a_device_beyond_its_memory(
    steps: list[tuple[str, str, int, bool]],
) -> None:
    """Planners claim and release in any interleaving, each seeing some of the jobs already
    placed (their read may be older): the live claims plus the jobs nobody claims any more
    never exceed a device's memory."""
    live: list[Claimed] = []
    placed: dict[str, tuple[str, int]] = {}  # job -> unit, memory: in the scheduler's queue
    for n, (planner, unit, mib, release) in enumerate(steps):
        if release and live:
            gone = live.pop(n % len(live))  # a claim released: its job ended
            placed.pop(gone.part.job, None)
            continue
        node, device = unit.split("/")
        job = f"j{n}"
        # The planner's read saw every other placed job (written before it read).
        view = {}
        for other, (u, m) in placed.items():
            view.setdefault(u, {})[other] = m
        decision = admit(planner, {job: (Part(job, node, device, mib),)}, CAP, live, view)
        for part in decision.granted:
            live.append(Claimed(planner, part))
            placed[part.job] = (part.unit, part.memory_mib)
        for u, cap in CAP.items():
            assert sum(m for un, m in placed.values() if un == u) <= cap


def snapshot() -> Snapshot:
    nodes = (
        Node("n1", 8000, 16384, (Device("0", 8192, 240), Device("1", 8192, 240))),
        Node("n2", 8000, 16384, (Device("0", 8192, 240),)),
    )
    running = (RunningJob("7", "n1", ("0",), 3000, 60, state="planned"),)
    pending = (Job("8", 5000, 60, memory_mib=512), Job("9", 2000, 60, memory_mib=512))
    return Snapshot(nodes, running, pending)


def test_capacities_seen_and_plan_parts() -> None:
    snap = snapshot()
    assert capacities(snap) == CAP
    assert seen(snap) == {"n1/0": {"7": 3000}}
    plan = Plan(
        "x",
        (Assignment("8", "n1", ("1",)), Assignment("9", "n2", ())),
        (Unplaced("10", "no room"),),
    )
    assert plan_parts(snap, plan) == {"8": (Part("8", "n1", "1", 5000),)}


def test_without_moves_refused_jobs_to_unplaced() -> None:
    plan = Plan("x", (Assignment("8", "n1", ("1",)), Assignment("9", "n2", ("0",))))
    out = without(plan, {"8": "lost"})
    assert [a.job for a in out.assignments] == ["9"]
    assert out.unplaced == (Unplaced("8", "lost", "no_room"),)
    assert out.pending == plan.pending


def test_with_claims_adds_only_other_planners_claims_the_read_does_not_show() -> None:
    snap = snapshot()
    live = [
        Claimed("b", Part("7", "n1", "0", 3000)),  # shown by the read already
        Claimed("a", Part("5", "n1", "1", 1000)),  # our own
        Claimed("b", Part("6", "n1", "1", 2500)),  # another planner's, not shown yet
        Claimed("b", Part("4", "n9", "0", 100)),
    ]  # a node this planner does not plan
    out = with_claims(snap, "a", live)
    added = out.running[len(snap.running) :]
    assert [(r.id, r.node, r.devices, r.device_memory_mib, r.state) for r in added] == [
        ("6", "n1", ("1",), 2500, "planned")
    ]


def test_stale_claims_are_those_of_jobs_the_read_no_longer_shows_holding() -> None:
    assert stale(["7", "8", "8"], snapshot()) == ("8",)


class _Cluster:
    """A one-shot Source and Editor: what the cycle wrote."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.written: list[str] = []

    def read(self) -> SourceResult:
        return SourceResult(self.snap, ())

    def apply(self, plan: Plan, rejected: tuple[Rejected, ...], *, dry_run: bool) -> ApplyReport:
        self.written = sorted(plan.placed_jobs)
        return ApplyReport(applied=tuple(self.written), dry_run=dry_run)


class _Gate:
    """The PlanGate on an in-memory list of claims (the engine's rules, no engine)."""

    def __init__(self, planner: str, live: list[Claimed]) -> None:
        self.planner = planner
        self.live = live
        self.calls: list[str] = []

    def settle(self, snap: Snapshot) -> Snapshot:
        self.calls.append("settle")
        return with_claims(snap, self.planner, self.live)

    def admit(self, snap: Snapshot, plan: Plan) -> Plan:
        self.calls.append("admit")
        decision = admit(
            self.planner, plan_parts(snap, plan), capacities(snap), self.live, seen(snap)
        )
        self.live += [Claimed(self.planner, p) for p in decision.granted]
        return without(plan, decision.refused)


def test_a_cycle_plans_around_other_claims_and_writes_only_what_it_booked() -> None:
    # Planner b claimed all of n1/1 and n2/0 (its jobs not written yet): a's plan avoids
    # them and puts 8 and 9 beside job 7 only where they fit.
    live = [Claimed("b", Part("b1", "n1", "1", 8192)), Claimed("b", Part("b2", "n2", "0", 8000))]
    cluster = _Cluster(snapshot())
    gate = _Gate("a", live)
    report = run_cycle(cluster, make_policy("knapsack"), cluster, gate=gate)
    assert gate.calls == ["settle", "admit"]
    assert cluster.written == ["8"] or cluster.written == ["9"]
    assert {a.devices for a in report.plan.assignments} == {("0",)}
    assert len(report.plan.unplaced) == 1
    # The dry run needs no gate: it writes nothing.
    gate.calls.clear()
    run_cycle(cluster, make_policy("knapsack"), cluster, gate=gate, dry_run=True)
    assert gate.calls == []


def test_a_claim_lost_between_plan_and_write_is_not_written() -> None:
    """Another planner books the device after this cycle settled: admit refuses the job
    and the editor never sees it."""
    live: list[Claimed] = []
    cluster = _Cluster(snapshot())
    gate = _Gate("a", live)
    real_admit = gate.admit

    def late(snap: Snapshot, plan: Plan) -> Plan:
        live.extend(
            Claimed("b", Part(f"b{d}", n, d, 8192))
            for n, d in (("n1", "0"), ("n1", "1"), ("n2", "0"))
        )
        return real_admit(snap, plan)

    gate.admit = late  # type: ignore[method-assign]
    report = run_cycle(cluster, make_policy("knapsack"), cluster, gate=gate)
    assert cluster.written == []
    assert {u.job for u in report.plan.unplaced} == {"8", "9"}
    assert all("another planner booked device" in u.reason for u in report.plan.unplaced)


def test_without_global_ids_another_planners_claim_is_never_taken_for_a_job_read_here() -> None:
    # HTCondor: schedd b's job 12.0 is not schedd a's job 12.0 on the same device.
    live = [
        Claimed("b", Part("12.0", "n1", "0", 4000)),
        Claimed("a", Part("13.0", "n1", "0", 1000)),
    ]
    seen_here = {"n1/0": {"12.0": 3000, "13.0": 1000}}
    wanted = {"14.0": (Part("14.0", "n1", "0", 1000),)}
    assert admit("a", wanted, CAP, live, seen_here).refused == {}  # wrongly one job
    refused = admit("a", wanted, CAP, live, seen_here, global_ids=False).refused
    assert "8000 of 8192 MiB in use" in refused["14.0"]  # 4000 + 3000 + 1000 (13.0 once)
    snap = with_claims(
        snapshot(), "a", [Claimed("b", Part("7", "n1", "0", 3000))], global_ids=False
    )
    assert [(r.id, r.device_memory_mib) for r in snap.running] == [("7", 3000), ("b:7", 3000)]


def test_rekey_renames_every_job_of_the_snapshot() -> None:
    from coshare.coord.claims import rekey

    out = rekey(snapshot(), lambda job: f"s#{job}")
    assert [r.id for r in out.running] == ["s#7"] and [j.id for j in out.pending] == ["s#8", "s#9"]
