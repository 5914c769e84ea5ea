"""The ``membw`` policy (poncos): a node's jobs use at most
``policy.membw.max_share`` of its memory bandwidth together; unknown jobs are bandwidth-bound
until measured; trial co-runs are expressed in the plan."""

from __future__ import annotations

import dataclasses
import json
import random
from itertools import product
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from coshare.config import Config, build
from coshare.cycle.verify import check_plan
from coshare.errors import ConfigError
from coshare.ledger.facts import MembwFacts, NodeFacts, attach
from coshare.model import MILLI, Job, Node, Plan, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.membw import MembwPolicy, check_membw, node_uses
from coshare.schema import decode_json, parse_plan, parse_snapshot, plan_to_dict, snapshot_to_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import snapshots

#: poncos Table 1: estimated use = 1 - distgen_membw_available() (half the cores each).
TABLE1 = {"hydro": 0.473, "lama": 0.534, "mpiblast": 0.075, "heat2": 0.59, "heat9": 0.235}
SCHEMA = Path(__file__).parents[2] / "common" / "coshare" / "schemas" / "plan.schema.json"


def node(name: str = "n1", **facts: float) -> Node:
    return Node(name, 16 * MILLI, 65536, **facts)  # type: ignore[arg-type]


def cpu_job(job_id: str, program: str | None = None, **kw: object) -> Job:
    return Job(job_id, kind="cpu", device_count=0, cpu_milli=8 * MILLI, program=program, **kw)  # type: ignore[arg-type]


def running(
    job_id: str, program: str | None = None, start: float = 0.0, **kw: object
) -> RunningJob:
    return RunningJob(job_id, "n1", cpu_milli=8 * MILLI, program=program, start_time_s=start, **kw)  # type: ignore[arg-type]


def plan(snapshot: Snapshot, **kw: object) -> Plan:
    policy = MembwPolicy(**{"programs": TABLE1, **kw})  # type: ignore[arg-type]
    out = policy.plan(snapshot)
    assert check_plan(snapshot, out) == []
    assert check_membw(snapshot, out, policy) == []
    return out


@pytest.mark.parametrize(("old", "new"), list(product(TABLE1, TABLE1)))
def test_a_pair_is_co_scheduled_exactly_when_table1_uses_sum_within_90_percent(
    old: str, new: str
) -> None:
    snap = Snapshot((node(),), (running("1", old),), (cpu_job("2", new),))
    placed = plan(snap).placed == 1
    assert placed == (TABLE1[old] + TABLE1[new] <= 0.9)


def test_the_rule_excludes_heat2_not_heat9_with_hydro_and_lama() -> None:
    # Section 8's text names "Heat 9"; Table 1's numbers and the 90% rule exclude Heat 2.
    for partner in ("hydro", "lama"):
        assert plan(Snapshot((node(),), (running("1", partner),), (cpu_job("2", "heat9"),))).placed
        assert not plan(
            Snapshot((node(),), (running("1", partner),), (cpu_job("2", "heat2"),))
        ).placed


def test_a_job_alone_always_runs_even_when_it_uses_more_than_the_limit() -> None:
    out = plan(
        Snapshot((node(),), (), (cpu_job("1", "big", membw_gbps=40.0), cpu_job("2", "heat9"))),
        programs={**TABLE1, "big": 1.0},
    )
    assert [a.job for a in out.assignments] == ["1"]
    assert "n1 at 1.00" in out.unplaced[0].reason
    assert "policy.membw.max_share 0.9" in out.unplaced[0].reason


def test_jobs_of_one_cycle_count_against_each_other() -> None:
    # lama then mpiblast (0.609) then heat9 (0.844) fit; another mpiblast would make 0.919.
    pending = (
        cpu_job("1", "lama"),
        cpu_job("2", "mpiblast"),
        cpu_job("3", "heat9"),
        cpu_job("4", "mpiblast"),
    )
    big = Node("n1", 64 * MILLI, 65536)
    out = plan(Snapshot((big,), (), pending))
    assert [a.job for a in out.assignments] == ["1", "2", "3"]
    assert out.unplaced[0].job == "4" and out.unplaced[0].code == "no_room"


def test_an_unknown_program_is_bandwidth_bound_and_waits_for_an_empty_node() -> None:
    snap = Snapshot(
        (node("n1"), node("n2")),
        (running("1", "mpiblast"),),
        (cpu_job("2", "mystery"), cpu_job("3", "other")),
    )
    out = plan(snap)
    # mystery takes the empty n2 alone; other has no empty node and no measurement.
    assert [(a.job, a.node) for a in out.assignments] == [("2", "n2")]
    (u,) = out.unplaced
    assert "'other' has no measurement" in u.reason
    assert "trial co-runs are off (policy.membw.trials)" in u.reason
    assert out.trials == ()


def test_beside_an_unmeasured_running_job_nothing_is_placed() -> None:
    snap = Snapshot((node(),), (running("1", "mystery"),), (cpu_job("2", "mpiblast"),))
    (u,) = plan(snap).unplaced
    assert "unmeasured 1" in u.reason


def test_with_trials_an_unknown_job_is_tried_beside_known_ones_and_the_plan_says_so() -> None:
    snap = Snapshot((node(),), (running("1", "lama"),), (cpu_job("2", "mystery"),))
    out = plan(snap, trials=True)
    assert [a.job for a in out.assignments] == ["2"]
    assert [(t.job, t.node, t.partners) for t in out.trials] == [("2", "n1", ("1",))]
    # Never two trials, nor a trial beside an unmeasured job, on one node.
    two = Snapshot(
        (Node("n1", 64 * MILLI, 65536),),
        (running("1", "lama"),),
        (cpu_job("2", "mystery"), cpu_job("3", "enigma")),
    )
    assert plan(two, trials=True).placed == 1
    beside = Snapshot((node(),), (running("1", "mystery"),), (cpu_job("2", "enigma"),))
    assert plan(beside, trials=True).placed == 0


def test_the_probe_measures_the_jobs_that_ran_past_their_initialization() -> None:
    # An unknown job running since t=0, probed at t=600: the node uses 1 - 30/40 = 0.25.
    facts = {"membw_avail_gbps": 30.0, "membw_baseline_gbps": 40.0, "facts_at_s": 600.0}
    snap = Snapshot(
        (node(**facts),), (running("1", "mystery", start=0.0),), (cpu_job("2", "heat2"),)
    )
    assert plan(snap).placed == 1  # 0.25 + 0.59
    # Started 30 s before the probe (init_s 60): not in the figure, still bandwidth-bound.
    late = dataclasses.replace(snap, running=(running("1", "mystery", start=570.0),))
    assert plan(late).placed == 0
    # The probe ran at t=300, before the facts line's time: a job started at 400 is not in it.
    older = dataclasses.replace(
        snap,
        nodes=(node(**facts, membw_at_s=300.0),),
        running=(running("1", "mystery", start=400.0),),
    )
    assert plan(older).placed == 0
    # A busy node measured 0.60 used: heat2 (0.59) does not fit beside it, heat9 does.
    busy = {**facts, "membw_avail_gbps": 16.0}
    snap = Snapshot(
        (node(**busy),), (running("1", "mpiblast"),), (cpu_job("2", "heat2"), cpu_job("3", "heat9"))
    )
    assert [a.job for a in plan(snap).assignments] == ["3"]
    assert node_uses(snap, TABLE1, 60.0)[0].measured == pytest.approx(0.6)


def test_facts_attached_as_the_adapters_do_are_what_the_policy_reads() -> None:
    snap = Snapshot((node(),), (running("1", "mystery", start=0.0),), (cpu_job("2", "heat2"),))
    probe = MembwFacts(avail_gbps=10.0, baseline_gbps=40.0, cores=8, at_s=500.0)
    with_facts = attach(snap, {"n1": NodeFacts(600.0, probe, None, None, ())})
    assert with_facts.nodes[0].membw_at_s == 500.0
    (u,) = plan(with_facts).unplaced  # 0.75 used: heat2 does not fit
    assert "0.75 measured" in u.reason


def test_a_declared_rate_becomes_a_share_of_the_node_baseline() -> None:
    n = node(membw_baseline_gbps=40.0)
    fits = Snapshot((n,), (running("1", "lama"),), (cpu_job("2", membw_gbps=14.0),))
    assert plan(fits).placed == 1  # 0.534 + 0.35
    over = dataclasses.replace(fits, pending=(cpu_job("2", membw_gbps=16.0),))
    assert plan(over).placed == 0  # 0.534 + 0.40
    # A recorded measurement of the program wins over the declaration.
    measured = dataclasses.replace(fits, pending=(cpu_job("2", "hydro", membw_gbps=1.0),))
    assert plan(measured).placed == 0
    # Without a baseline or peak a rate means nothing: unknown.
    assert plan(dataclasses.replace(fits, nodes=(node(),))).placed == 0


def test_device_jobs_are_placed_on_devices_within_the_rule() -> None:
    from coshare.model import Device

    n = Node("n1", 16 * MILLI, 65536, (Device("0", 16384, 240), Device("1", 16384, 240)))
    job = Job("2", 1024, 60, program="heat9")
    out = plan(Snapshot((n,), (running("1", "lama"),), (job,)))
    assert out.assignments[0].devices in (("0",), ("1",))


def test_a_node_with_a_trial_this_cycle_takes_no_other_job() -> None:
    # Hypothesis found it: at max_share 1.0 a job of no bandwidth at all (0 + 1.0 <= 1.0)
    # followed a trial onto its node, so the trial's probe would measure a partner the trial
    # does not name. The trial is its node's last job of the cycle.
    # The probe saw the running job (it ran long before it) and no use at all.
    snap = Snapshot(
        (node(membw_baseline_gbps=40.0, membw_avail_gbps=40.0, facts_at_s=1000.0),),
        (RunningJob("1", "n1", cpu_milli=4 * MILLI, program="mpiblast", start_time_s=0.0),),
        (
            cpu_job("2", "mystery"),
            Job("3", kind="cpu", device_count=0, cpu_milli=2 * MILLI, membw_gbps=0.0),
        ),
    )
    out = plan(snap, trials=True, max_share=1.0)
    assert [(t.job, t.partners) for t in out.trials] == [("2", ("1",))]
    assert out.placed_jobs == {"2"}
    assert [u.job for u in out.unplaced] == ["3"]


def test_plans_with_trials_keep_the_contract_both_ways() -> None:
    snap = Snapshot((node(),), (running("1", "lama"),), (cpu_job("2", "mystery"),))
    out = plan(snap, trials=True)
    data = plan_to_dict(out)
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert data["trials"] == [{"job": "2", "node": "n1", "partners": ["1"]}]
    assert parse_plan(data).trials == out.trials
    # Other plans print no trials key, and old plans parse.
    assert "trials" not in plan_to_dict(plan(snap))
    assert parse_plan({"policy": "x", "assignments": [], "unplaced": []}).trials == ()
    with pytest.raises(Exception, match="partner 0"):
        parse_plan(
            {
                "policy": "x",
                "assignments": [],
                "unplaced": [],
                "trials": [{"job": "2", "node": "n1", "partners": ["a,b"]}],
            }
        )


def test_the_probe_time_travels_in_the_snapshot() -> None:
    snap = Snapshot(
        (node(membw_avail_gbps=1.0, membw_baseline_gbps=2.0, facts_at_s=9.0, membw_at_s=5.0),)
    )
    text = json.dumps(snapshot_to_dict(snap))
    assert decode_json(text, "x", parse_snapshot).nodes[0].membw_at_s == 5.0


def test_the_policy_is_built_from_the_configuration() -> None:
    from coshare.cli.main import policy_options
    from coshare.policies.gang import GangPlanner

    config = build(
        Config,
        {
            "policy": {
                "name": "membw",
                "membw": {"max_share": 0.5, "init_s": 5, "programs": {"lama": 0.534}},
            }
        },
    )
    policy = make_policy("membw", policy_options(config))
    assert isinstance(policy, GangPlanner)  # every policy is wrapped (gangs: refused here)
    assert policy.inner == MembwPolicy(max_share=0.5, programs={"lama": 0.534}, init_s=5.0)
    assert policy.refuse_gangs is not None
    default = make_policy("membw", PolicyOptions())
    assert isinstance(default, GangPlanner) and default.inner == MembwPolicy()


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"max_share": 1.5}, "policy.membw.max_share"),
        ({"max_share": -0.1}, "policy.membw.max_share"),
        ({"max_share": float("nan")}, "policy.membw.max_share"),
        ({"programs": {"lama": 1.2}}, "policy.membw.programs.lama"),
        ({"programs": {"lama": -0.5}}, "policy.membw.programs.lama"),
        ({"programs": {"lama": float("inf")}}, "policy.membw.programs.lama"),
        ({"programs": {"a b": 0.5}}, "policy.membw.programs"),
        ({"init_s": -1}, "policy.membw.init_s"),
        ({"probe_via": "ssh"}, "policy.membw.probe_via"),
        ({"facts_wait_s": 0}, "policy.membw.facts_wait_s"),
        ({"facts_wait_s": float("nan")}, "policy.membw.facts_wait_s"),
        ({"probe_command": "coshare; rm -rf /"}, "policy.membw.probe_command"),
        ({"probe_command": ""}, "policy.membw.probe_command"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build(Config, {"policy": {"membw": section}})


PROGRAMS = (*TABLE1, "mystery", None)


@st.composite
def membw_snapshots(draw: st.DrawFn) -> Snapshot:
    """Random snapshots whose jobs carry programs (known, unknown, none), declared rates,
    start times, and whose nodes carry probes of any age. The bandwidth traits come from one
    drawn seed: a draw per job made generation ten times slower than planning."""
    base = draw(snapshots())
    rnd = random.Random(draw(st.integers(0, 2**32)))

    def rate() -> float | None:
        return rnd.choice((None, 0.0, rnd.uniform(0.0, 50.0)))

    nodes = []
    for n in base.nodes:
        if rnd.random() < 0.5:
            at = float(rnd.randint(0, 1000))
            n = dataclasses.replace(
                n,
                membw_baseline_gbps=40.0,
                facts_at_s=at,
                membw_avail_gbps=rnd.uniform(0.0, 45.0),
                membw_at_s=rnd.choice((None, at - 100.0)),
            )
        nodes.append(n)
    running = [
        dataclasses.replace(
            r,
            program=rnd.choice(PROGRAMS),
            membw_gbps=rate(),
            start_time_s=float(rnd.randint(0, 1000)),
        )
        for r in base.running
    ]
    pending = [
        dataclasses.replace(j, program=rnd.choice(PROGRAMS), membw_gbps=rate())
        for j in base.pending
    ]
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), base.now_s)


# A third of the profile's examples: each one plans 9 times (about 0.1 s), and the suite's
# time is shared (1000 examples would add two minutes to `make test`).
@settings(max_examples=max(30, settings.default.max_examples // 3))
@given(snapshot=membw_snapshots())
def test_plans_keep_the_bandwidth_rule_and_every_other_limit(snapshot: Snapshot) -> None:
    # One snapshot, every setting: generating snapshots costs ten times planning them.
    for trials, max_share in product((False, True), (0.0, 0.5, 0.9, 1.0)):
        policy = MembwPolicy(max_share=max_share, programs=TABLE1, trials=trials)
        out = policy.plan(snapshot)
        assert check_plan(snapshot, out) == []
        assert check_membw(snapshot, out, policy) == []
        ids = sorted([u.job for u in out.unplaced] + sorted(out.placed_jobs))
        assert ids == sorted(j.id for j in snapshot.pending)
        assert policy.plan(snapshot) == out  # deterministic
        if not trials:
            assert out.trials == ()
        for t in out.trials:
            assert t.job in out.placed_jobs and t.partners
    # The oracle is not vacuous: the same snapshot planned with no limit at all, wherever
    # that co-schedules jobs whose known uses sum above 0.9, must be caught.
    out = MembwPolicy(max_share=1e9, programs=TABLE1).plan(snapshot)
    uses = node_uses(snapshot, TABLE1, 60.0)
    pending = {j.id: j for j in snapshot.pending}
    over = False
    for i, n in enumerate(snapshot.nodes):
        new = [pending[a.job] for a in out.assignments if a.node == n.name]
        if not new or (not uses[i].jobs and len(new) == 1):
            continue
        shares = [TABLE1.get(j.program or "") for j in new]
        if all(s is not None for s in shares) and not uses[i].unknown:
            over |= uses[i].used + sum(s for s in shares if s is not None) > 0.9 + 1e-9
    assert bool(check_membw(snapshot, out, MembwPolicy(programs=TABLE1))) >= over


def test_a_placed_job_not_started_yet_counts_with_its_program_on_both_schedulers() -> None:
    # The ledger (one rule for HTCondor and Slurm) counts a placed job with what it declared,
    # so the next cycle does not put a bandwidth-bound job beside it before it starts.
    from coshare.ledger.book import Placed, Queued, counted

    job = cpu_job("2", "mpiblast", membw_gbps=3.0)
    held = counted(Queued("2", {}, placed=Placed("n1", (), 100.0), gate_open=True), job)
    assert (held.program, held.membw_gbps, held.state) == ("mpiblast", 3.0, "planned")
    snap = Snapshot((node(),), (held,), (cpu_job("3", "heat2"),))
    assert plan(snap).placed == 1  # 0.075 + 0.59; unknown (bandwidth-bound) without it


def test_a_live_cycle_never_starts_a_trial_co_run() -> None:
    # Layer 3 (freeze, probe, thaw; suspend through the scheduler) is not built: a plan that
    # names trials is refused before anything is written, whatever the policy was built with.
    from coshare.cycle.run import run_cycle
    from coshare.errors import PlanInvariantError
    from coshare.ports import ApplyReport, SourceResult

    snap = Snapshot((node(),), (running("1", "lama"),), (cpu_job("2", "mystery"),))
    written: list[Plan] = []

    class Source:
        def read(self) -> SourceResult:
            return SourceResult(snap)

    class Editor:
        def apply(self, plan: Plan, rejected: object, dry_run: bool = False) -> ApplyReport:
            written.append(plan)
            return ApplyReport()

    with pytest.raises(PlanInvariantError, match=r"trial co-runs \(2\)"):
        run_cycle(Source(), MembwPolicy(programs=TABLE1, trials=True), Editor())  # type: ignore[arg-type]
    assert written == []
    run_cycle(Source(), MembwPolicy(programs=TABLE1), Editor())  # type: ignore[arg-type]
    assert written and written[0].trials == ()


def test_plan_drops_a_probe_dated_in_the_future_as_the_adapters_do(tmp_path: Path) -> None:
    # One node of 100 GB/s running an 80 GB/s job; its probe, dated 1e9 s ahead, says idle.
    # Trusted, a second 80 GB/s job would join it: 1.6 of the node against the 0.9 limit.
    from click.testing import CliRunner
    from coshare.cli.main import cli

    now = 1_700_000_000.0
    snapshot = {
        "now": now,
        "nodes": [
            {
                "name": "n1",
                "cores": 32,
                "memory_mib": 65536,
                "membw_gbps": 100.0,
                "membw_avail_gbps": 100.0,
                "membw_baseline_gbps": 100.0,
                "facts_at_s": now,
                "membw_at_s": now + 1e9,
                "devices": [],
            }
        ],
        "running": [
            {
                "id": "r",
                "node": "n1",
                "cores": 4,
                "memory_mib": 1024,
                "membw_gbps": 80.0,
                "start_time": now - 3600,
            }
        ],
        "pending": [{"id": "p", "kind": "cpu", "cores": 4, "memory_mib": 1024, "membw_gbps": 80.0}],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snapshot))
    ran = CliRunner().invoke(
        cli,
        ["plan", str(path), "--policy", "membw", "--output", "json"],
        env={"COSHARE_CONFIG": "/dev/null"},
    )
    assert ran.exit_code == 0, ran.output
    plan = json.loads(ran.stdout)
    assert plan["assignments"] == [] and [u["job"] for u in plan["unplaced"]] == ["p"]
    assert "node n1: membw probe dated 1000000000 s in the future" in ran.stderr


@pytest.mark.parametrize("trials", [False, True])
def test_nothing_joins_a_job_of_unknown_use_placed_alone_this_cycle(trials: bool) -> None:
    # One node; a job of unknown use goes first (alone: allowed), then a job that declares no
    # bandwidth use (a share of 0 fits beside the unknown one's estimate of 1.0 at
    # max_share 1.0): it must not join, as the unknown job is no trial (hypothesis found it).
    node = Node("n1", 8 * MILLI, 8192, membw_gbps=40.0)
    jobs = (
        Job("a", kind="cpu", device_count=0, cpu_milli=250, program="mystery"),
        Job("b", kind="cpu", device_count=0, cpu_milli=250, membw_gbps=0.0, submit_time_s=1.0),
    )
    snapshot = Snapshot((node,), (), jobs, now_s=100.0)
    policy = MembwPolicy(max_share=1.0, programs=TABLE1, trials=trials)
    plan = policy.plan(snapshot)
    assert check_membw(snapshot, plan, policy) == []
    assert [a.job for a in plan.assignments] == ["a"]


def test_plan_drops_a_future_probe_of_a_snapshot_without_now_and_keeps_an_old_one(
    tmp_path: Path,
) -> None:
    # The same node and jobs with no "now": the snapshot may be an old one planned again, so
    # an old probe stays; but no probe ran after this moment, so one dated 1e9 s ahead of this
    # machine's clock goes, as a cycle's read drops it.
    import time

    from click.testing import CliRunner
    from coshare.cli.main import cli

    def planned(probe_at: float) -> tuple[dict[str, Any], str]:
        snapshot = {
            "nodes": [
                {
                    "name": "n1",
                    "cores": 32,
                    "memory_mib": 65536,
                    "membw_gbps": 100.0,
                    "membw_avail_gbps": 100.0,
                    "membw_baseline_gbps": 100.0,
                    "facts_at_s": probe_at,
                    "membw_at_s": probe_at,
                    "devices": [],
                }
            ],
            "running": [
                {
                    "id": "r",
                    "node": "n1",
                    "cores": 4,
                    "memory_mib": 1024,
                    "membw_gbps": 80.0,
                    "start_time": 1_000_000.0,
                }
            ],
            "pending": [
                {"id": "p", "kind": "cpu", "cores": 4, "memory_mib": 1024, "membw_gbps": 80.0}
            ],
        }
        path = tmp_path / "s.json"
        path.write_text(json.dumps(snapshot))
        ran = CliRunner().invoke(
            cli,
            ["plan", str(path), "--policy", "membw", "--output", "json"],
            env={"COSHARE_CONFIG": "/dev/null"},
        )
        assert ran.exit_code == 0, ran.output
        return json.loads(ran.stdout), ran.stderr

    plan, notes = planned(time.time() + 1e9)
    assert plan["assignments"] == [] and [u["job"] for u in plan["unplaced"]] == ["p"]
    assert "node n1: membw probe dated 1000000" in notes and "in the future" in notes
    plan, notes = planned(1_000_000.0 + 7200)  # the probe says idle, its age unknown: trusted
    assert [a["job"] for a in plan["assignments"]] == ["p"] and "membw probe" not in notes
