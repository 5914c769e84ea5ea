"""How one read of Slurm becomes the cycle's snapshot (slurm_addon.view.build_view)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from coshare.config import DeviceKind
from coshare.cycle.verify import check_plan
from coshare.policies import make_policy

from slurm_addon.jobs import SlurmJob, parse_squeue_json
from slurm_addon.nodes import GresEntry, SlurmNode, parse_sinfo_json
from slurm_addon.view import build_view

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm/22.05"
KINDS = {"fakephi": DeviceKind(memory_mib=8192, threads=240)}
NOW = 1_800_000_000.0
PLACED = "coshare-placement;v=1;node=n1;devices=1;at={at};mem_mib=1024;threads=60"


def node(name: str = "n1", devices: int = 2, kind: str = "fakephi", **kw: object) -> SlurmNode:
    return SlurmNode(
        name,
        "idle",
        cpus=8,
        memory_mib=16384,
        gres=(GresEntry("gpu", kind, devices),),
        partitions=("main",),
        **kw,
    )  # type: ignore[arg-type]


def job(job_id: str, **kw: object) -> SlurmJob:
    base: dict[str, object] = dict(
        phase="pending",
        state="PENDING",
        held=True,
        partition="main",
        comment="coshare: device-memory=1G device-threads=60",
        submit_time_s=NOW - 10,
    )
    base.update(kw)
    return SlurmJob(job_id, **base)  # type: ignore[arg-type]


def view(nodes: list[SlurmNode], jobs: list[SlurmJob], **kw: object):  # type: ignore[no-untyped-def]
    return build_view(nodes, jobs, device_kinds=KINDS, now_s=NOW, **kw)  # type: ignore[arg-type]


def recorded():  # type: ignore[no-untyped-def]
    nodes = parse_sinfo_json((FIXTURES / "sinfo-drain-down.json").read_text())
    jobs = parse_squeue_json((FIXTURES / "squeue-mixed.json").read_text())
    ids = dict(p.split("=") for p in (FIXTURES / "squeue-mixed.ids").read_text().split())
    return nodes, jobs, ids


def test_recorded_cluster() -> None:
    nodes, jobs, ids = recorded()
    v = build_view(nodes, jobs, device_kinds=KINDS, now_s=float(jobs[0].submit_time_s) + 60)
    snap = v.snapshot
    # csl-n3 is drained and csl-n4 down: only two nodes take jobs.
    assert [n.name for n in snap.nodes] == ["csl-n1", "csl-n2"]
    assert [n.name for n in v.unusable_nodes] == ["csl-n3", "csl-n4"]
    assert [d.id for d in snap.nodes[0].devices] == ["0", "1"]
    pending = {j.id for j in snap.pending}
    # held with or without a placement: planned (again); the sbatch -N 2 job as a gang
    assert pending == {ids["good"], ids["placed"], ids["multi"]}
    gang = next(j for j in snap.pending if j.id == ids["multi"])
    # Slurm's -N 2 (tasks 2, DefMemPerCPU 256): two processes of 1 core and 256 MiB each
    assert (gang.nodes, gang.nodes_max, gang.processes, gang.processes_per_node) == (
        2,
        None,
        2,
        None,
    )
    assert (gang.cpu_milli, gang.memory_mib, gang.device_count) == (1000, 256, 1)
    refused = {r.job: r.reason for r in v.rejected}
    assert "device-memory='abc' is not a number" in refused[ids["bad"]]
    assert "job arrays are not supported" in refused[ids["array"]]
    assert ids["multi"] not in refused
    waiting = {w.job: w.reason for w in v.waiting}
    assert waiting == {
        ids["dep"]: f"waits for its dependency on job {ids['good']}",
        ids["begin"]: "waits for its begin time",
    }
    running = {(r.id, r.node): r for r in snap.running}
    placed_run = running[(ids["running"], "csl-n1")]
    assert (placed_run.devices, placed_run.device_memory_mib, placed_run.device_threads) == (
        ("0",),
        512,
        30,
    )
    gres_run = running[(ids["gpu"], "csl-n1")]  # Slurm gave it device 0: all of it
    assert (gres_run.devices, gres_run.device_memory_mib, gres_run.device_threads) == (
        ("0",),
        8192,
        240,
    )
    plain = running[(ids["plain"], "csl-n1")]
    assert (plain.devices, plain.cpu_milli, plain.memory_mib) == ((), 1000, 100)
    assert ids["done"] not in {r.id for r in snap.running}
    assert not v.to_close


def test_jobs_without_coshare_in_their_comment_are_never_planned() -> None:
    v = view([node()], [job("1", comment="my own notes"), job("2", comment="", held=False)])
    assert v.snapshot.pending == () and v.rejected == () and not v.to_close


def test_released_placement_holds_its_device_until_it_expires() -> None:
    fresh = job("1", held=False, admin_comment=PLACED.format(at=int(NOW) - 10), cpus=2)
    old = job("2", held=False, admin_comment=PLACED.format(at=int(NOW) - 1000))
    v = view([node()], [fresh, old], replan_after_s=300)
    planned = {r.id: r for r in v.snapshot.running}
    assert planned["1"].state == "planned" and planned["1"].devices == ("1",)
    assert (planned["1"].device_memory_mib, planned["1"].cpu_milli) == (1024, 2000)
    # Expired: pending again in this very cycle and counted nowhere; the Editor holds it
    # (and confirms that) before it releases any other job (coshare.ledger.book).
    assert "2" not in planned and [j.id for j in v.snapshot.pending] == ["2"]
    assert v.to_close == {"2": "placed but not started within cycle.replan_after_s"}


def test_placement_on_a_node_that_takes_no_jobs_is_held_and_not_counted() -> None:
    drained = node("n1", flags=("DRAIN",))
    placed = job("1", held=False, admin_comment=PLACED.format(at=int(NOW)))
    v = view([drained, node("n2")], [placed])
    assert "1" in v.to_close and v.snapshot.running == ()
    assert [j.id for j in v.snapshot.pending] == ["1"]  # planned again, on n2 if it fits
    assert any("cannot take it now" in n for n in v.notes)


def test_unheld_unplaced_job_is_planned_and_marked_for_holding() -> None:
    v = view([node()], [job("1", held=False)])
    assert [j.id for j in v.snapshot.pending] == ["1"] and set(v.to_close) == {"1"}


def test_unreadable_placement_is_planned_again_with_a_note() -> None:
    v = view([node()], [job("1", admin_comment="coshare-placement;v=1;junk")])
    assert [j.id for j in v.snapshot.pending] == ["1"]
    assert any("unreadable placement" in n for n in v.notes)


def test_unknown_device_kind_is_reported_and_not_shared() -> None:
    v = view([node(kind="mystery")], [])
    assert v.snapshot.nodes[0].devices == ()
    assert any("type mystery" in n and "device_kinds" in n for n in v.notes)


def test_partition_filter_refuses_jobs_of_other_partitions() -> None:
    other = replace(node("n2"), partitions=("cpu",))
    v = view([node(), other], [job("1", partition="cpu")], partition="main")
    assert [n.name for n in v.snapshot.nodes] == ["n1"]
    assert "partition cpu is not managed" in v.rejected[0].reason


def test_device_job_too_big_for_every_device_is_refused_with_the_range() -> None:
    v = view([node()], [job("1", comment="coshare: device-memory=9G device-threads=60")])
    assert "exceeds every device (largest: 8192 MiB)" in v.rejected[0].reason


def test_running_annotated_job_without_placement_is_noted() -> None:
    v = view([node()], [job("1", phase="active", state="RUNNING", held=False, nodes=("n1",))])
    assert v.snapshot.running[0].devices == ()
    assert any("without a coshare placement" in n for n in v.notes)


def test_planned_and_running_jobs_are_respected_by_the_plan() -> None:
    jobs = [
        job(
            "1",
            phase="active",
            state="RUNNING",
            held=False,
            nodes=("n1",),
            admin_comment="coshare-placement;v=1;node=n1;devices=0;at=1;mem_mib=8000;threads=60",
        ),
        job("2", held=False, admin_comment=PLACED.format(at=int(NOW)).replace("1024", "8000")),
        job("3", comment="coshare: device-memory=1000 device-threads=10"),
    ]
    v = view([node()], jobs)
    plan = make_policy("knapsack").plan(v.snapshot)
    assert check_plan(v.snapshot, plan) == []
    assert plan.unplaced and plan.unplaced[0].job == "3"  # both devices are nearly full


def test_processes_share_the_jobs_slurm_request() -> None:
    comment = "coshare: device-memory=1G device-threads=60 processes=4"
    v = view([node()], [job("1", cpus=4, memory_mib=1024, comment=comment)])
    j = v.snapshot.pending[0]
    assert (j.processes, j.cpu_milli, j.memory_mib) == (4, 1000, 256)


def test_gres_types_match_kinds_ignoring_case_and_separators() -> None:
    v = build_view(
        [node(kind="V100M16")],
        [],
        now_s=NOW,
        device_kinds={"v100-m16": DeviceKind(memory_mib=16384, threads=163840)},
    )
    assert [(d.memory_mib, d.model) for d in v.snapshot.nodes[0].devices] == [
        (16384, "V100M16")
    ] * 2


def test_a_placement_whose_reqnodelist_differs_is_not_counted() -> None:
    # Slurm could start it on another node: its gate is not where its placement says.
    moved = job("1", held=False, admin_comment=PLACED.format(at=int(NOW)), required_nodes="n2")
    v = view([node(), node("n2")], [moved])
    assert v.snapshot.running == () and "1" in v.to_close


def test_an_absurd_annotation_refuses_that_job_only() -> None:
    huge = job("1", comment="coshare: device-memory=" + "9" * 400 + " device-threads=60")
    v = view([node()], [huge, job("2")])
    assert [j.id for j in v.snapshot.pending] == ["2"]
    [refused] = v.rejected
    assert refused.job == "1" and refused.reason.startswith("job 1: device-memory='9999")
    assert len(refused.reason) < 300  # the value is shown bounded


def test_unheld_job_waiting_for_its_begin_time_is_held() -> None:
    early = job("1", held=False, eligible_time_s=NOW + 3600)
    v = view([node()], [early])
    assert [w.job for w in v.waiting] == ["1"] and set(v.to_close) == {"1"}


# -- hostile input at the adapter's boundary ----------------------------------------------


def test_a_node_with_more_devices_than_the_bound_is_left_out_and_the_others_planned() -> None:
    huge = node("n2", devices=99_999_999_999)  # sinfo said gpu:fakephi:99999999999
    v = view([node("n1"), huge], [job("5")])
    assert [n.name for n in v.snapshot.nodes] == ["n1"]
    assert (
        "node n2: gres='gpu:99999999999' is outside what coshare accepts (allowed: at most "
        "1024 devices); node left out of this cycle"
    ) in v.notes
    plan = make_policy("knapsack").plan(v.snapshot)
    assert [(a.job, a.node) for a in plan.assignments] == [("5", "n1")]


def test_a_pending_job_with_an_unreadable_number_is_refused_naming_the_field() -> None:
    bad = job("6", problem="cpus=nan is not a number (allowed: a number 0..1048576)")
    v = view([node()], [bad, job("7")])
    assert [j.id for j in v.snapshot.pending] == ["7"]
    assert [(r.job, r.reason) for r in v.rejected] == [
        ("6", "job 6: cpus=nan is not a number (allowed: a number 0..1048576)")
    ]
    # A job that is not coshare's is not refused (nothing is written to it).
    other = job("8", comment="", problem="cpus=nan is not a number")
    assert view([node()], [other]).rejected == ()


def test_a_running_job_with_an_unreadable_number_holds_its_whole_node() -> None:
    running = job(
        "9",
        phase="active",
        state="RUNNING",
        held=False,
        nodes=("n1",),
        problem="memory_per_node=inf is not a finite number",
    )
    v = view([node("n1"), node("n2")], [running, job("10")])
    [held] = v.snapshot.running
    assert (held.node, held.cpu_milli, held.memory_mib, held.devices) == (
        "n1",
        8000,
        16384,
        ("0", "1"),
    )
    assert (held.device_memory_mib, held.device_threads) == (8192, 240)
    assert any(n.startswith("job 9 runs on n1 but its record cannot be read") for n in v.notes)
    plan = make_policy("knapsack").plan(v.snapshot)
    assert [(a.job, a.node) for a in plan.assignments] == [("10", "n2")]
    assert check_plan(v.snapshot, plan) == []


def test_a_running_job_whose_gres_index_cannot_be_read_holds_every_device() -> None:
    running = job(
        "11",
        phase="active",
        state="RUNNING",
        held=False,
        nodes=("n1",),
        comment="",
        gres_detail=("gpu:fakephi:1(IDX:0-999999999)",),
    )
    v = view([node("n1")], [running])
    [held] = v.snapshot.running
    assert held.devices == ("0", "1") and (held.device_memory_mib, held.device_threads) == (
        8192,
        240,
    )
    [note] = [n for n in v.notes if n.startswith("job 11 on n1: gres_detail=")]
    assert note.endswith("counted on every device")


def test_drained_and_down_nodes_are_listed_with_slurms_words() -> None:
    nodes, jobs, _ = recorded()
    v = build_view(nodes, jobs, device_kinds=KINDS, now_s=float(jobs[0].submit_time_s) + 60)
    assert [(u.node, u.state, u.reason) for u in v.unusable] == [
        ("csl-n3", "idle+DRAIN", "maintenance"),
        ("csl-n4", "down", "broken"),
    ]


def test_node_facts_in_the_extra_field_reach_the_snapshot() -> None:
    from coshare.ledger.facts import JobCpus, JobLoad, JobWait, MembwFacts, NodeFacts, format_facts

    facts = NodeFacts(
        NOW - 20,
        MembwFacts(6.0, 12.0, 2, NOW - 40),
        loads=(JobLoad("7", 1.5, 1.0, 2.0, 300),),
        cpus=(JobCpus("7", 2),),
        waits=(JobWait("7", 0.25, 0.75),),
    )
    nodes = [
        node("n1", extra=format_facts(facts)),
        node("n2", extra="rack=12 owner=physics"),
        node("n3", extra=format_facts(NodeFacts(NOW - 5000))),
        node("n4"),
    ]
    running = job("7", phase="active", state="RUNNING", held=False, nodes=("n1",), cpus=2)
    v = view(nodes, [running], node_facts_max_age_s=600)
    n1, n2, n3, n4 = v.snapshot.nodes
    assert (n1.membw_avail_gbps, n1.membw_baseline_gbps, n1.facts_at_s) == (6.0, 12.0, NOW - 20)
    assert all(n.facts_at_s is None for n in (n2, n3, n4))
    (held,) = v.snapshot.running
    assert (held.cpu_load_cores, held.cpu_load_last_cores, held.cpu_load_window_s) == (
        1.5,
        1.0,
        300,
    )
    assert (held.cpu_cores_held, held.cpu_wait_cores, held.cpu_wait_last_cores) == (2, 0.25, 0.75)
    assert any(
        note.startswith(
            "node facts unreadable on 1 node(s), planned without them (n2: holds the character ' '"
        )
        for note in v.notes
    )
    assert any(
        "older than cycle.node_facts_max_age_s = 600 s on 1 node(s)" in n and "n3: 5000 s old" in n
        for n in v.notes
    )
    # Nothing else of the cycle changes: the plan is the same without the facts.
    bare = view([node("n1"), node("n2"), node("n3"), node("n4")], [running])
    plan = make_policy("knapsack").plan(v.snapshot)
    assert plan == make_policy("knapsack").plan(bare.snapshot)


def test_sinfo_json_carries_each_nodes_extra_field() -> None:
    import json

    record = json.loads((FIXTURES / "sinfo-drain-down.json").read_text())
    record["nodes"][0]["extra"] = "coshare-facts;v=1;at=5"
    (first, *_) = parse_sinfo_json(json.dumps(record))
    assert first.extra == "coshare-facts;v=1;at=5"


def test_with_several_planners_other_partitions_jobs_are_theirs() -> None:
    # Partition "second" is another planner's, over the same node.
    both = replace(node(), partitions=("main", "second"))
    placed = job("1", partition="second", held=False, admin_comment=PLACED.format(at=int(NOW)))
    unplaced = job("2", partition="second")
    expired = job(
        "3", partition="second", held=False, admin_comment=PLACED.format(at=int(NOW) - 10_000)
    )
    v = view([both], [placed, unplaced, expired], partition="main", shared=True)
    assert v.rejected == () and v.snapshot.pending == ()
    # Placed and released: Slurm may start it any moment, so it holds its device here too,
    # expired or not (only its own planner plans it again).
    held = {(r.id, r.node, r.devices, r.device_memory_mib, r.state) for r in v.snapshot.running}
    assert held == {("1", "n1", ("1",), 1024, "planned"), ("3", "n1", ("1",), 1024, "planned")}
    assert "2" not in v.to_close and "1" not in v.to_close
    # Without the engine the same jobs are refused, as before.
    alone = view([both], [placed, unplaced], partition="main")
    assert {r.job for r in alone.rejected} == {"1", "2"}
    # A job this planner moved into its lending partition (collocate) stays its own: it is
    # planned here, not counted as another planner's.
    lent = job("4", partition="coshare-lend")
    mine = view([both], [lent], partition="main", shared=True, lend_partition="coshare-lend")
    assert [j.id for j in mine.snapshot.pending] == ["4"] and mine.snapshot.running == ()
