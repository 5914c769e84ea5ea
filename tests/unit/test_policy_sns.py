"""Spread-n-Share: program profiles checked on load, per-job demand, the ``sns``
and ``cs`` policies, the plan's spreads, the live refusal of way allocation, ``coshare
profile`` and the ``sns`` simulator workload."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.cycle.run import run_cycle
from coshare.cycle.verify import check_plan
from coshare.errors import PlanInvariantError
from coshare.model import MILLI, Job, Node, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.sns import SnsPolicy
from coshare.ports import ApplyReport, SourceResult
from coshare.profiles.programs import Profile, ProfileError, demand, parse_profile
from coshare.profiles.store import load_store, write_profile
from coshare.schema import decode_json, parse_plan, plan_to_dict
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMA = Path(__file__).parents[2] / "common" / "coshare" / "schemas" / "plan.schema.json"


def raw(program: str = "MG", **over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "program": program,
        "run_time_s": {"1": 100.0, "2": 89.0, "4": 82.0, "8": 76.0},
        "ways": [2, 3, 20],
        "ipc": [0.8, 0.9, 1.0],
        "membw_gbps": [100.0, 96.0, 80.0],
    }
    data.update(over)
    return data


def profile(program: str = "MG", **over: Any) -> Profile:
    return parse_profile(raw(program, **over), f"{program}.json")


MG = profile()
BFS = profile(
    "BFS",
    run_time_s={"1": 100.0, "2": 120.0, "4": 130.0, "8": 150.0},
    ways=[2, 18, 20],
    ipc=[0.5, 0.9, 1.0],
    membw_gbps=[1.0, 1.0, 1.0],
)
EP = profile(
    "EP",
    run_time_s={"1": 100.0, "2": 99.0, "4": 98.0, "8": 97.0},
    ways=[2, 20],
    ipc=[0.95, 1.0],
    membw_gbps=[0.1, 0.1],
)
PROFILES = {"MG": MG, "BFS": BFS, "EP": EP}


def nodes(
    count: int = 4, cores: int = 28, ways: int | None = 20, membw: float | None = 118.0
) -> tuple[Node, ...]:
    return tuple(
        Node(f"n{i}", cores * MILLI, 1 << 17, llc_ways=ways, membw_gbps=membw) for i in range(count)
    )


def job(
    job_id: str, program: str | None = "MG", processes: int = 16, nodes_max: int = 8, **kw: Any
) -> Job:
    return Job(
        job_id,
        kind="cpu",
        device_count=0,
        processes=processes,
        program=program,
        nodes=1,
        nodes_max=nodes_max,
        memory_mib=100,
        **kw,
    )


def sns(**kw: Any) -> SnsPolicy:
    return SnsPolicy(PROFILES, **kw)


# -- profiles --------------------------------------------------------------------------------


def test_a_profile_classifies_and_orders_its_scales_as_section_4_2_says() -> None:
    assert (MG.program_class, MG.best_scale, MG.scale_order()) == ("scaling", 8, (8, 4, 2, 1))
    assert BFS.program_class == "compact" and BFS.scale_order()[0] == 1
    assert EP.program_class == "neutral"
    assert EP.scale_order() == (1, 2, 4, 8)  # neutral: spread passively, compact first


def test_demand_follows_section_4_3() -> None:
    # w: the fewest ways whose IPC reaches alpha x full-cache IPC; b at w, scaled to c cores
    assert MG.ways_for(0.9) == 3 and MG.ways_for(0.8) == 2 and MG.ways_for(1.0) == 20
    assert MG.ways_for(0.95) == 12  # 0.9 + 0.1 * (w - 3) / 17 >= 0.95 first at 11.5 -> 12
    d = demand(MG, 0.9, 28, 28, 2)  # 14 processes a node: 3 ways act as 3 x 16/14 for 16
    assert (d.nodes, d.cores_per_node, d.ways) == (2, 14, 3)
    assert MG.membw_at(3, 14) == pytest.approx(MG.membw_at(3 * 16 / 14))
    assert MG.membw_at(3, 14) < 96.0
    assert d.membw_gbps == pytest.approx(MG.membw_at(3, 14) * 14 / 16)
    # 28 processes need more: 0.9 x IPC(20 x 16/28) first reached at 5 ways; 2 a node need
    # the floor of 2 (section 5.1)
    assert demand(MG, 0.9, 28, 28, 1).ways == 5
    assert demand(MG, 0.9, 16, 28, 8).ways == 2
    d = demand(MG, 0.9, 40, 28, 4)  # n = 4 * ceil(40/28) = 8, c = ceil(40/8) = 5
    assert (d.nodes, d.cores_per_node) == (8, 5)
    assert demand(None, 0.9, 16, 28, 1).ways is None


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"ipc": [0.8, 0.7, 1.0]}, "ipc[1]"),
        ({"run_time_s": {"1": 100.0, "2": 90.0, "4": 80.0}}, "run_time_s"),
        ({"run_time_s": {"1": 100.0, "3": 90.0, "2": 1, "4": 1, "8": 1}}, "run_time_s.3"),
        ({"ways": [2, 2, 20]}, "ways"),
        ({"ipc": [0.8, 0.9]}, "ipc"),
        ({"membw_gbps": [1.0, float("nan"), 1.0]}, "membw_gbps[1]"),
        ({"run_time_s": {"1": -1, "2": 1, "4": 1, "8": 1}}, "run_time_s.1"),
        ({"cores": 0}, "cores"),
        ({"program": "a b"}, "program"),
        ({"class": "compact"}, "class"),
        ({"colour": 1}, "colour"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file_and_field(
    over: dict[str, Any], field: str
) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(raw(**over), "store/MG.json")
    assert caught.value.where == "store/MG.json"
    assert caught.value.field == field
    assert str(caught.value).startswith(f"profile store/MG.json: {field}: ")


def test_a_single_node_program_gives_scale_1_only() -> None:
    p = profile("GAN", run_time_s={"1": 50.0}, single_node=True)
    assert p.scales == (1,)
    with pytest.raises(ProfileError, match="single_node"):
        profile("GAN", run_time_s={"1": 50.0})


def test_the_store_round_trips_and_a_bad_file_stops_the_load_naming_it(tmp_path: Path) -> None:
    write_profile(tmp_path, MG)
    write_profile(tmp_path, BFS)
    (tmp_path / "draft.txt").write_text("not read")
    assert load_store(tmp_path) == {"BFS": BFS, "MG": MG}
    (tmp_path / "EP.json").write_text(json.dumps(raw("EP", ipc=[1.0, 0.5, 1.0])))
    with pytest.raises(ProfileError, match=r"EP\.json: ipc\[1\]: IPC falls"):
        load_store(tmp_path)
    (tmp_path / "EP.json").write_text(json.dumps(raw("MG")))
    with pytest.raises(ProfileError, match="differs from the file's name"):
        load_store(tmp_path)
    (tmp_path / "EP.json").write_text('{"program": NaN}')
    with pytest.raises(ProfileError, match=r"EP\.json: \(file\): not JSON"):
        load_store(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_a_profile_that_is_no_regular_file_is_refused_without_waiting(
    tmp_path: Path, kind: str
) -> None:
    import os
    import socket
    import subprocess
    import sys

    write_profile(tmp_path, MG)
    path = tmp_path / "EP.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer that never comes
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(path))  # the socket file stays after the socket is closed
    else:
        path.mkdir()
    # in a process of its own: a reader that waits would hang the suite, not fail it
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from coshare.profiles.store import load_store; load_store(Path(sys.argv[1]))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 1
    what = {"fifo": "a FIFO", "socket": "a socket", "directory": "a directory"}[kind]
    assert f"EP.json: (file): cannot read: not a regular file ({what})" in probe.stderr


# -- the sns policy ---------------------------------------------------------------------------


def spreads(plan: Any) -> dict[str, Any]:
    return {s.job: s for s in plan.spreads}


def test_sns_spreads_a_scaling_job_at_its_best_scale_with_its_ways() -> None:
    snap = Snapshot(nodes(8), (), (job("a"),), 0.0)
    plan = make_policy("sns", PolicyOptions(sns_profiles=PROFILES)).plan(snap)
    assert check_plan(snap, plan) == []
    s = spreads(plan)["a"]
    assert (s.scale, s.nodes, s.cores_per_node, s.ways) == (8, 8, 2, 2)
    assert {a.llc_ways for a in plan.assignments} == {2}
    assert all(a.processes == 2 for a in plan.assignments)


def test_sns_falls_back_to_slower_scales_in_order_of_run_time_alone() -> None:
    # 4 nodes: scale 8 needs 8; scale 4 (82 s) comes before 2 (89 s) and 1
    snap = Snapshot(nodes(4), (), (job("a"),), 0.0)
    assert spreads(sns().plan(snap))["a"].scale == 4
    busy = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=26 * MILLI) for i in range(2))
    snap = Snapshot(nodes(4), busy, (job("a"),), 0.0)  # two nodes have 2 cores, two 28
    assert spreads(sns().plan(snap))["a"].scale == 2  # 2 nodes x 8 cores


def test_a_compact_program_stays_compact_and_is_never_spread_past_alpha() -> None:
    busy = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=20 * MILLI) for i in range(4))
    snap = Snapshot(nodes(4), busy, (job("b", "BFS"),), 0.0)
    plan = sns().plan(snap)  # scale 1 does not fit (8 cores free); scale 2 is 1/1.2 < 0.9
    assert plan.placed == 0 and plan.unplaced[0].code == "no_room"
    snap = Snapshot(nodes(4), (), (job("b", "BFS"),), 0.0)
    assert spreads(sns().plan(snap))["b"].scale == 1


def test_an_unknown_program_runs_compact_with_the_reason() -> None:
    snap = Snapshot(nodes(8), (), (job("x", "NOPE"), job("y", None)), 0.0)
    plan = sns().plan(snap)
    s = spreads(plan)
    assert (s["x"].scale, s["x"].ways) == (1, None)
    assert s["x"].note == "no profile for NOPE: runs compact at scale 1"
    assert "no CoshareProgram" in s["y"].note
    assert all(a.llc_ways is None for a in plan.assignments)


def test_ways_and_bandwidth_are_admitted_per_node() -> None:
    # each node holds 18 ways: BFS (18 ways at alpha 0.9) fits nowhere, EP (2) does
    held = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=MILLI, llc_ways=18) for i in range(4))
    snap = Snapshot(nodes(4), held, (job("b", "BFS"), job("e", "EP")), 0.0)
    plan = sns().plan(snap)
    assert check_plan(snap, plan) == []
    assert "b" not in plan.placed_jobs and "e" in plan.placed_jobs
    assert "18 ways" in plan.unplaced[0].reason
    # bandwidth: a node carrying 100 of 118 GB/s takes no 16-core MG part (84 GB/s at 3 ways)
    full = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=MILLI, membw_gbps=100.0) for i in range(4))
    plan = sns().plan(Snapshot(nodes(4), full, (job("a", processes=16, nodes_max=1),), 0.0))
    assert plan.placed == 0


def test_more_ways_than_any_node_has_never_fits_naming_both() -> None:
    snap = Snapshot(nodes(4, ways=11), (), (job("b", "BFS"),), 0.0)
    plan = sns().plan(snap)
    assert plan.unplaced[0].code == "never_fits"
    assert "needs 18 LLC ways per node" in plan.unplaced[0].reason
    assert "at most 11" in plan.unplaced[0].reason


def test_nodes_without_resctrl_run_jobs_without_way_allocation_and_the_plan_says_so() -> None:
    snap = Snapshot(nodes(8, ways=None), (), (job("a"),), 0.0)
    plan = sns().plan(snap)
    assert spreads(plan)["a"].ways is None
    assert all(a.llc_ways is None for a in plan.assignments)
    # one note names them all, bounded: a cluster of thousands without resctrl is one fact
    assert [n for n in plan.notes if "resctrl" in n] == [
        "nodes n0, n1, n2, n3, n4 and 3 more have no resctrl (llc_ways unknown): jobs there "
        "run without way allocation"
    ]
    mixed = (*nodes(2), Node("bare", 28 * MILLI, 1 << 17, membw_gbps=118.0))
    plan = sns().plan(Snapshot(mixed, (), (job("a", processes=60, nodes_max=3),), 0.0))
    s = spreads(plan)["a"]
    assert s.ways is None and "bare without resctrl" in s.note


def test_an_aged_job_is_never_overtaken() -> None:
    busy = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=20 * MILLI) for i in range(4))
    old = job("old", "BFS", submit_time_s=0.0)  # needs 16 cores on one node: none free
    young = job("young", "EP", processes=4, submit_time_s=50.0)
    snap = Snapshot(nodes(4), busy, (old, young), now_s=100.0)
    assert "young" in sns(age_limit_s=1000.0).plan(snap).placed_jobs
    plan = sns(age_limit_s=60.0).plan(snap)
    assert plan.placed == 0
    assert [u.code for u in plan.unplaced] == ["no_room", "not_chosen"]
    assert "waits behind job old" in plan.unplaced[1].reason


def test_cs_shares_nodes_at_the_lowest_scale_without_ways() -> None:
    busy = tuple(RunningJob(f"r{n}", n, cpu_milli=14 * MILLI) for n in ("n0", "n2"))
    snap = Snapshot(nodes(3), busy, (job("a"), job("b", processes=28)), 0.0)
    plan = make_policy("cs").plan(snap)
    assert check_plan(snap, plan) == []
    s = spreads(plan)
    assert (s["a"].scale, s["a"].ways) == (1, None)  # 16 cores on n1, the one that has them
    assert s["b"].scale == 2  # no node has 28 free: the lowest scale that fits now
    assert sorted(a.node for a in plan.assignments if a.job == "b") == ["n0", "n2"]
    assert all(a.llc_ways is None and a.membw_gbps is None for a in plan.assignments)


def test_device_jobs_are_refused_and_the_others_planned() -> None:
    gpu = Job("g", 100, 10)
    plan = sns().plan(Snapshot(nodes(2), (), (gpu, job("a", nodes_max=2)), 0.0))
    assert [(u.job, u.code) for u in plan.unplaced] == [("g", "unsupported")]
    assert "a" in plan.placed_jobs


def test_alpha_changes_the_ways() -> None:
    snap = Snapshot(
        nodes(8), (), (job("a", alpha=0.95, nodes_max=1), job("b", alpha=0.8, nodes_max=1)), 0.0
    )
    s = spreads(sns().plan(snap))
    assert (s["a"].ways, s["b"].ways) == (12, 2)


@st.composite
def sns_snapshots(draw: st.DrawFn) -> Snapshot:
    count = draw(st.integers(1, 6))
    ways = draw(st.sampled_from([None, 11, 20]))
    cluster = nodes(
        count,
        cores=draw(st.sampled_from([8, 28])),
        ways=ways,
        membw=draw(st.sampled_from([None, 118.0])),
    )
    running = []
    for i, n in enumerate(cluster):
        if draw(st.booleans()):
            program = draw(st.sampled_from(["MG", "EP", None]))
            running.append(
                RunningJob(
                    f"r{i}",
                    n.name,
                    cpu_milli=draw(st.integers(0, 8)) * MILLI,
                    llc_ways=draw(st.none() | st.integers(1, ways or 20)),
                    program=program,
                )
            )
    jobs = [
        job(
            f"j{k}",
            draw(st.sampled_from(["MG", "BFS", "EP", "X", None])),
            processes=draw(st.integers(1, 40)),
            nodes_max=draw(st.integers(1, 8)),
            alpha=draw(st.sampled_from([None, 0.5, 0.9, 1.0])),
            submit_time_s=float(draw(st.integers(0, 100))),
        )
        for k in range(draw(st.integers(0, 8)))
    ]
    return Snapshot(cluster, tuple(running), tuple(jobs), now_s=100.0)


@settings(max_examples=max(30, settings.default.max_examples // 3), deadline=None)
@given(
    snapshot=sns_snapshots(), mode=st.sampled_from(["sns", "cs"]), age=st.sampled_from([None, 10.0])
)
def test_no_node_is_oversubscribed_in_cores_or_ways(
    snapshot: Snapshot, mode: str, age: float | None
) -> None:
    policy = SnsPolicy(PROFILES, mode, age_limit_s=age)  # type: ignore[arg-type]
    plan = policy.plan(snapshot)
    assert check_plan(snapshot, plan) == []
    cores: dict[str, int] = defaultdict(int)
    ways: dict[str, int] = defaultdict(int)
    for r in snapshot.running:
        cores[r.node] += r.cpu_milli
        ways[r.node] += r.llc_ways or 0
    pending = {j.id: j for j in snapshot.pending}
    for a in plan.assignments:
        j = pending[a.job]
        cores[a.node] += j.cpu_milli * (a.processes or j.processes)
        ways[a.node] += a.llc_ways or 0
        if mode == "cs":
            assert a.llc_ways is None
    for n in snapshot.nodes:
        assert cores[n.name] <= n.cpu_milli
        if n.llc_ways is not None:
            before = sum(r.llc_ways or 0 for r in snapshot.running if r.node == n.name)
            assert ways[n.name] <= max(n.llc_ways, before)
        else:
            assert not any(a.llc_ways for a in plan.assignments if a.node == n.name)
    for s in plan.spreads:  # n = k * ceil(P/T) nodes, ceil(P/n) cores on the widest
        parts = [a for a in plan.assignments if a.job == s.job]
        assert len(parts) == s.nodes
        assert max(a.processes or pending[s.job].processes for a in parts) == s.cores_per_node


# -- the plan contract and the live cycle ------------------------------------------------------


def test_spreads_round_trip_and_match_the_schema() -> None:
    snap = Snapshot(nodes(8), (), (job("a"), job("x", "NOPE")), 0.0)
    plan = sns().plan(snap)
    data = plan_to_dict(plan)
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    back = decode_json(json.dumps(data), "t", parse_plan)
    assert back.spreads == plan.spreads
    assert [(a.llc_ways, a.membw_gbps) for a in back.assignments] == [
        (a.llc_ways, a.membw_gbps) for a in plan.assignments
    ]
    assert "spreads" not in plan_to_dict(make_policy("exclusive").plan(snap))


class _Source:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def read(self) -> SourceResult:
        return SourceResult(self.snapshot)


class _Editor:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, plan: Any, rejected: Any, dry_run: bool = False) -> ApplyReport:
        self.applied += 1
        return ApplyReport()


def test_a_live_cycle_refuses_a_plan_that_allocates_ways_writing_nothing() -> None:
    editor = _Editor()
    snap = Snapshot(nodes(8), (), (job("a"),), 0.0)
    with pytest.raises(PlanInvariantError, match=r"allocates LLC ways \(a\)"):
        run_cycle(_Source(snap), sns(), editor)
    assert editor.applied == 0
    # without resctrl nothing is allocated: cs and a node set without ways go through
    report = run_cycle(_Source(Snapshot(nodes(8, ways=None), (), (job("a"),), 0.0)), sns(), editor)
    assert report.plan.placed == 1 and editor.applied == 1
    run_cycle(_Source(snap), make_policy("cs"), editor)
    assert editor.applied == 2


# -- coshare profile ----------------------------------------------------------------------------


def test_profile_import_check_run_and_ways(tmp_path: Path) -> None:
    runner = CliRunner()
    good = tmp_path / "in.json"
    good.write_text(json.dumps(raw("LU")))
    store = tmp_path / "store"
    out = runner.invoke(cli, ["profile", "import", str(good), "--store", str(store)])
    assert out.exit_code == 0, out.output
    assert (store / "LU.json").exists() and "LU (scaling, best scale 8" in out.output
    out = runner.invoke(cli, ["profile", "check", "--store", str(store)])
    assert out.exit_code == 0 and "1 profiles ok" in out.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw("LU", run_time_s={"1": 1.0})))
    out = runner.invoke(cli, ["profile", "import", str(bad), "--store", str(store)])
    assert out.exit_code == 2
    assert f"profile {bad}: run_time_s: missing scale points 2, 4, 8" in out.output
    draft = tmp_path / "LU.draft"
    out = runner.invoke(
        cli, ["profile", "run", "LU", "--scale", "2", "--into", str(draft), "--", "true"]
    )
    assert out.exit_code == 0, out.output
    assert set(json.loads(draft.read_text())["run_time_s"]) == {"2"}
    out = runner.invoke(
        cli, ["profile", "run", "LU", "--scale", "4", "--into", str(draft), "--", "false"]
    )
    assert out.exit_code == 1 and set(json.loads(draft.read_text())["run_time_s"]) == {"2"}
    out = runner.invoke(
        cli,
        [
            "profile",
            "ways",
            "LU",
            "--resctrl",
            str(tmp_path / "none"),
            "--cores",
            "16",
            "--into",
            str(draft),
            "--",
            "true",
        ],
    )
    assert out.exit_code == 1
    assert "unsupported: resctrl L3" in out.output and str(tmp_path / "none") in out.output
    assert "ipc" not in json.loads(draft.read_text())  # nothing recorded


def test_each_assignment_says_its_share_of_the_spare_ways_section_4_4() -> None:
    # one node of 20 ways: a running job holds 5; two MG jobs of 8 processes take 2 each
    # (8 processes need half the ways of the profile's 16), leaving 11 spare ways for the
    # three holders: 3 each (the node gives the remainder, 2, to the lowest two)
    held = (RunningJob("r", "n0", cpu_milli=4 * MILLI, llc_ways=5),)
    pending = (job("a", processes=8, nodes_max=1), job("b", processes=8, nodes_max=1))
    snap = Snapshot(nodes(1), held, pending, 0.0)
    plan = sns().plan(snap)
    assert check_plan(snap, plan) == []
    got = {a.job: (a.llc_ways, a.llc_ways_spare) for a in plan.assignments}
    assert got == {"a": (2, 3), "b": (2, 3)}  # (20 - 5 - 2 - 2) // 3
    data = plan_to_dict(plan)
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert decode_json(json.dumps(data), "t", parse_plan).assignments == plan.assignments
    # without resctrl (llc_ways unknown) and under cs: no ways, no share
    plan = sns().plan(Snapshot(nodes(1, ways=None), (), pending, 0.0))
    assert {a.llc_ways_spare for a in plan.assignments} == {None}
    plan = sns(mode="cs").plan(snap)
    assert {a.llc_ways_spare for a in plan.assignments} == {None}


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "nan", "inf"])
def test_an_alpha_outside_0_1_is_refused_naming_the_job_and_key(value: str) -> None:
    from coshare.errors import AnnotationError
    from coshare.ledger.annotations import parse_job

    with pytest.raises(AnnotationError, match=r"CoshareAlpha.*\(0, 1\]") as caught:
        parse_job("7", {"CoshareKind": "cpu", "CoshareProgram": "MG", "CoshareAlpha": value})
    assert "7" in str(caught.value)


def test_one_bad_job_never_stops_the_plan_for_the_others() -> None:
    bad = Job("bad", kind="cpu", device_count=0, processes=3, nodes=4, program="MG")  # < nodes
    snap = Snapshot(nodes(8), (), (bad, job("a")), 0.0)
    plan = sns().plan(snap)
    assert check_plan(snap, plan) == []
    assert [(u.job, u.code) for u in plan.unplaced] == [("bad", "invalid")]
    assert "a" in plan.placed_jobs


@pytest.mark.parametrize("mode", ["sns", "cs"])
def test_jobs_that_wait_for_the_same_reason_share_one_reason(mode: str) -> None:
    # Twenty-six jobs of one shape that can never fit: one group in plan's table, not 26.
    snap = Snapshot(
        nodes(2), (), tuple(job(f"j{k}", processes=400, nodes_max=2) for k in range(26)), now_s=0.0
    )
    plan = SnsPolicy(PROFILES, mode).plan(snap)  # type: ignore[arg-type]
    assert len(plan.unplaced) == 26
    assert len({(u.code, u.reason) for u in plan.unplaced}) == 1, plan.unplaced[:2]
    assert not any(u.job in u.reason for u in plan.unplaced)
