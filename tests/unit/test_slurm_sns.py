"""Spread-n-Share plans applied live on Slurm: the placement text carries
the scale factor, nodes, cores per node and each node's LLC ways, and reads back the same;
the ledger counts the ways a placed job holds; a live cycle applies an ``sns`` plan that
allocates ways through Slurm (whose Prolog makes the resctrl groups) and refuses it through
HTCondor, naming why; the Prolog tells each task its spread and ways, or that the node has no
resctrl, naming the path it looked at."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from coshare.cycle.run import run_cycle, ways_refusal, writes_llc_ways
from coshare.errors import PlanInvariantError
from coshare.ledger.book import Current, Part, Placed, Queued, decide, held
from coshare.model import Assignment, Plan, Snapshot, Spread
from coshare.node.control import launcher
from coshare.node.jobs import JobRecord
from coshare.node.spec import JobSpec
from coshare.ports import ApplyReport, SourceResult

from condor_addon.adapter import CondorAdapter
from slurm_addon import node_hooks, prolog
from slurm_addon.adapter import SlurmAdapter
from slurm_addon.edits import plan_edits
from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import Placement, PlacementError, format_placement, parse_placement
from slurm_addon.view import build_view, placed_of

from .fake_resctrl import make_resctrl
from .test_policy_sns import job, nodes, sns
from .test_slurm_gangs import KINDS, NOW, slurm_gang, slurm_node
from .test_slurm_prolog import node_config_file

HEAD = "coshare-placement;v=1;node=n1;devices=;at=5;mem_mib=0;threads=0"
SPREAD = Spread("", 2, 2, 8)
GANG = Placement("n1", (), 5, 0, 0, (Part("n1", (), 8, 3), Part("n2", (), 8, 3)), 3, SPREAD)


# -- the placement text ----------------------------------------------------------------------


def test_a_spread_placement_round_trips_with_its_scale_nodes_cores_and_ways() -> None:
    text = format_placement(GANG)
    assert text == HEAD + ";parts=n1:8,n2:8;spread=2:2:8;ways=n1:3,n2:3"
    assert parse_placement(text) == GANG
    here = GANG.on("n2")
    assert here is not None and (here.node, here.llc_ways, here.spread) == ("n2", 3, SPREAD)
    # A node without resctrl has no ways: left out of the field, None when read back.
    mixed = Placement("n1", (), 5, 0, 0, (Part("n1", (), 8, 3), Part("n2", (), 8)), 3, SPREAD)
    assert format_placement(mixed).endswith(";ways=n1:3")
    assert parse_placement(format_placement(mixed)) == mixed
    none = Placement("n1", (), 5, 0, 0, (Part("n1", (), 8), Part("n2", (), 8)), None, SPREAD)
    assert not format_placement(none).count(";ways=")
    assert parse_placement(format_placement(none)) == none
    # a single-node sns job: ways on its one node, no parts
    single = Placement("n3", (), 5, 0, 0, (), 4, Spread("", 1, 1, 4))
    assert format_placement(single).endswith(";spread=1:1:4;ways=n3:4")
    assert parse_placement(format_placement(single)) == single
    # the kill reason the Epilog appends does not disturb them
    assert parse_placement(text + ";killed=over its memory") == GANG


def test_the_format_stays_version_1_and_older_placements_read_as_before() -> None:
    # The new fields come after the old ones and the version is still 1: readers ignore
    # fields they do not know (an older coshare reads node, devices and parts as before).
    text = format_placement(GANG)
    assert text.startswith(HEAD + ";parts=") and ";v=1;" in text
    assert parse_placement(text + ";a_later_field=x") == GANG
    old = parse_placement(HEAD + ";parts=n1:8,n2:8")
    assert old is not None and old.spread is None and old.llc_ways is None
    assert all(p.llc_ways is None for p in old.parts) and old.ways_by_node == {}


@pytest.mark.parametrize(
    "tail",
    [
        ";spread=2:2",
        ";spread=0:2:8",
        ";spread=2:x:8",
        ";spread=2:2:8:1",
        ";spread=",
        ";ways=n3:3",
        ";ways=n1:0",
        ";ways=n1:65",
        ";ways=n1:3,n1:3",
        ";ways=n1",
        ";ways=n 1:3",
        ";ways=",
    ],
)
def test_damaged_spread_and_ways_fields_raise(tail: str) -> None:
    with pytest.raises(PlacementError):
        parse_placement(HEAD + ";parts=n1:8,n2:8" + tail)


def test_ways_outside_the_range_are_never_written() -> None:
    bad = Placement("n1", (), 5, 0, 0, (), 65)
    with pytest.raises(PlacementError, match="llc_ways=65"):
        format_placement(bad)
    with pytest.raises(PlacementError, match="scale=0"):
        format_placement(Placement("n1", (), 5, 0, 0, (), None, Spread("", 0, 1, 1)))


def test_a_bandwidth_cap_round_trips_and_bad_ones_are_refused() -> None:
    capped = Placement(
        "n1",
        (),
        5,
        0,
        0,
        (Part("n1", (), 8, 3), Part("n2", (), 8, 3)),
        3,
        Spread("", 2, 2, 8, membw_gbps=23.456789),
    )
    text = format_placement(capped)
    assert text.endswith(";spread=2:2:8;membw=23.457;ways=n1:3,n2:3")
    back = parse_placement(text)
    assert back is not None and back.spread is not None
    assert back.spread.membw_gbps == 23.457
    assert parse_placement(text.replace("membw=23.457", "membw=40")).spread.membw_gbps == 40.0  # type: ignore[union-attr]
    for bad in ("membw=0", "membw=-1", "membw=1e3", "membw=nan", "membw=1.23456", "membw="):
        with pytest.raises(PlacementError, match="membw"):
            parse_placement(text.replace("membw=23.457", bad))
    for cap in (0.0, float("nan"), 1e9):
        with pytest.raises(PlacementError, match="membw"):
            format_placement(
                Placement("n1", (), 5, 0, 0, (), None, Spread("", 1, 1, 1, membw_gbps=cap))
            )


def test_sns_with_mba_puts_the_admitted_bandwidth_in_the_spread() -> None:
    from coshare.model import Snapshot

    snap = Snapshot(nodes(4), (), (job("a"),), 0.0)
    plain = sns().plan(snap)
    assert [s.membw_gbps for s in plain.spreads] == [None]
    capped = sns(mba=True).plan(snap)
    (spread,) = capped.spreads
    parts = [a for a in capped.assignments if a.job == "a"]
    # b per node at cores_per_node: the most any node's part counts
    assert spread.membw_gbps == pytest.approx(max(a.membw_gbps or 0 for a in parts))
    assert spread.membw_gbps is not None and spread.membw_gbps > 0
    assert [s.membw_gbps for s in sns(mode="cs", mba=True).plan(snap).spreads] == [None]


def test_the_cap_as_a_percentage_of_the_nodes_bandwidth() -> None:
    from coshare.errors import ProbeError
    from coshare.node.bandwidth import Baseline, cap_percent, node_peak_gbps

    assert cap_percent(23.5, 118.26) == 20 and cap_percent(59.13, 118.26) == 50
    assert cap_percent(0.01, 100.0) == 1 and cap_percent(500.0, 100.0) == 100
    with pytest.raises(ProbeError):
        cap_percent(float("nan"), 100.0)
    base = Baseline({(0,): 18.8, (0, 1): 37.2, (2, 3): 38.0, (0, 1, 2): 60.0}, 0.0, "numpy", 1)
    assert node_peak_gbps(base) == 60.0
    assert node_peak_gbps(Baseline({(0,): 18.8, (1,): 19.0}, 0.0, "numpy", 1)) == 19.0


# -- the ledger ------------------------------------------------------------------------------


def test_a_spread_plan_becomes_one_write_with_each_nodes_ways_and_is_kept_when_read_back() -> None:
    snap = Snapshot(nodes(4), (), (job("a"),), 0.0)
    plan = sns().plan(snap)
    (spread,) = plan.spreads
    assert spread.nodes > 1 and spread.ways is not None
    pending = {"a": snap.pending[0]}
    d = decide(plan, pending, {}, [], {"a": Current("a", "pending", True, False)})
    (write,) = d.writes
    assert write.spread == spread and write.llc_ways == spread.ways
    assert [p.llc_ways for p in write.parts] == [spread.ways] * spread.nodes
    text = format_placement(
        Placement(write.node, write.devices, 5, 0, 0, write.parts, write.llc_ways, write.spread)
    )
    placement = parse_placement(text)
    assert placement is not None
    assert placement.spread == Spread("", spread.scale, spread.nodes, spread.cores_per_node)
    placed = Placed(
        placement.node, placement.devices, 5.0, 0, 0, placement.parts, placement.llc_ways
    )
    # once written and released, the same plan writes nothing (the ways are part of the spot)
    again = decide(plan, pending, {}, [], {"a": Current("a", "pending", True, True, placed)})
    assert again.unchanged == ("a",) and not again.writes
    # a placed, not started job holds its ways on every node until it starts
    holding = held(Queued("a", {}, placed=placed), snap.pending[0])
    assert [r.llc_ways for r in holding] == [spread.ways] * spread.nodes


def test_placed_of_keeps_a_single_node_jobs_ways() -> None:
    placement = Placement("n3", (), 5, 0, 0, (), 4, Spread("", 1, 1, 4))
    slurm_job = SlurmJob(
        id="9",
        phase="pending",
        state="PENDING",
        comment="",
        admin_comment=format_placement(placement),
        required_nodes="n3",
    )
    placed = placed_of(placement, slurm_job)
    assert placed is not None and placed.llc_ways == 4 and placed.spots[0].llc_ways == 4


# -- the live cycle --------------------------------------------------------------------------


class _Source:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def read(self) -> SourceResult:
        return SourceResult(self.snapshot)


class _Writes:
    """An Editor that, like the Slurm adapter, declares it writes LLC ways."""

    writes_llc_ways = True

    def __init__(self) -> None:
        self.applied = 0

    def apply(self, plan: object, rejected: object, dry_run: bool = False) -> ApplyReport:
        self.applied += 1
        return ApplyReport()


def test_slurm_applies_a_plan_that_allocates_ways_and_htcondor_refuses_it_naming_why() -> None:
    snap = Snapshot(nodes(8), (), (job("a"),), 0.0)
    plan = sns().plan(snap)
    assert writes_llc_ways(SlurmAdapter) and not writes_llc_ways(CondorAdapter)
    assert ways_refusal(plan, SlurmAdapter) is None
    why = ways_refusal(plan, CondorAdapter)
    assert why is not None and why.startswith(
        "the plan allocates LLC ways (a), which this live "
        "cycle cannot write: the HTCondor adapter records "
        "no LLC ways"
    )
    editor = _Writes()
    report = run_cycle(_Source(snap), sns(), editor)
    assert editor.applied == 1 and report.plan.spreads[0].ways is not None
    # An editor that declares nothing cannot write ways: refused, nothing applied.
    editor.writes_llc_ways = False  # type: ignore[misc]
    with pytest.raises(PlanInvariantError, match="does not make resctrl groups"):
        run_cycle(_Source(snap), sns(), editor)
    # A bandwidth cap on nodes without resctrl (no ways) is refused by HTCondor too.
    capped = sns(mba=True).plan(Snapshot(nodes(8, ways=None), (), (job("a"),), 0.0))
    assert capped.spreads[0].ways is None and capped.spreads[0].membw_gbps is not None
    why = ways_refusal(capped, CondorAdapter)
    assert why is not None and why.startswith("the plan caps memory bandwidth with MBA (a)")
    assert ways_refusal(capped, SlurmAdapter) is None
    assert editor.applied == 1
    # a plan without ways (nodes without resctrl) goes through any editor
    bare = Snapshot(nodes(8, ways=None), (), (job("a"),), 0.0)
    assert ways_refusal(sns().plan(bare), CondorAdapter) is None


# -- the node side ---------------------------------------------------------------------------


RECORD = JobRecord(JobSpec("42", (0,)), "v1", "/sys/fs/cgroup", "coshare")
RECORD_WAYS = JobRecord(JobSpec("42", (0,), llc_ways=3), "v1", "/sys/fs/cgroup", "coshare")


def test_tasks_are_told_the_spread_and_ways_or_that_the_node_has_no_resctrl(
    tmp_path: Path,
) -> None:
    config = prolog.node_config({"COSHARE_CONFIG": str(node_config_file(tmp_path))})
    here = GANG.on("n2")
    assert here is not None
    assert node_hooks.sns_task_env(config, "42", here, RECORD_WAYS) == [
        "export COSHARE_SPREAD=2:2:8",
        "export COSHARE_LLC_WAYS=3",
    ]
    absent = replace(config, resctrl_root=str(tmp_path / "no-resctrl"))
    lines = node_hooks.sns_task_env(absent, "42", replace(here, llc_ways=None), RECORD)
    assert lines[:2] == ["export COSHARE_SPREAD=2:2:8", "export COSHARE_LLC_WAYS=unsupported"]
    assert lines[2] == (
        f"print coshare: job 42 runs on n2 without LLC way allocation: "
        f"unsupported: resctrl L3 (cache ways): resctrl is not mounted there "
        f"({tmp_path / 'no-resctrl' / 'info' / 'L3' / 'cbm_mask'})"
    )
    present = replace(config, resctrl_root=str(make_resctrl(tmp_path / "resctrl")))
    assert node_hooks.sns_task_env(present, "42", replace(here, llc_ways=None), RECORD) == [
        "export COSHARE_SPREAD=2:2:8",
        "export COSHARE_LLC_WAYS=none",
    ]
    # not a Spread-n-Share placement: nothing told
    assert node_hooks.sns_task_env(config, "42", Placement("n1", (), 5, 0, 0), RECORD) == []


def test_without_a_node_daemon_the_task_prolog_says_the_ways_were_not_made() -> None:
    lines, status = prolog.task_environment(GANG, "n2", "42")
    assert status == 0 and "export COSHARE_SPREAD=2:2:8" in lines
    assert "export COSHARE_LLC_WAYS=unsupported" in lines
    assert lines[-1] == (
        "print coshare: job 42 runs on n2 without its 3 LLC ways: no coshare node daemon here"
    )


def test_the_task_prolog_passes_only_coshare_exports_and_prints_the_prolog_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job-42.json").write_text("{}")
    (jobs / "job-42.taskenv").write_text(
        "export COSHARE_SPREAD=2:2:8\nexport COSHARE_LLC_WAYS=unsupported\n"
        "print coshare: job 42 runs on n2 without LLC way allocation: unsupported (/x)\n"
        "export PATH=/tmp/evil\nexport COSHARE_X=$(id)\nrm -rf /\n"
    )
    monkeypatch.setattr(launcher, "request", lambda socket, text: {"cpus": "0"})
    told = launcher.task_prolog(
        "/none.sock", "/gate.sock", str(tmp_path), {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n2"}
    )
    assert told is not None and told[1] == 0
    lines = told[0]
    assert lines[-3:] == [
        "export COSHARE_SPREAD=2:2:8",
        "export COSHARE_LLC_WAYS=unsupported",
        "print coshare: job 42 runs on n2 without LLC way allocation: unsupported (/x)",
    ]
    assert not any("PATH" in line or "id)" in line or "rm " in line for line in lines)


def test_a_gang_planned_on_one_node_is_written_pinned_and_read_back_placed() -> None:
    # sbatch -N 1-2 -n 4 at scale 1 (sns) lands on one node; its write pins NumNodes=1-1,
    # so read back it is a single-node job: its placement has no parts, or the ledger would
    # find the parts of a job that is no gang "gone" and plan it again.
    nodes = [slurm_node(f"csl-n{i}") for i in (1, 2)]
    pending = slurm_gang(
        comment="coshare: program=X", node_count=1, max_nodes=2, tasks=4, tasks_per_node=0, cpus=4
    )
    view = build_view(nodes, [pending], device_kinds=KINDS, now_s=NOW)
    (job_now,) = view.snapshot.pending
    assert job_now.is_gang and job_now.processes == 4
    plan = Plan(
        "sns",
        (Assignment("7", "csl-n2", processes=4, llc_ways=3),),
        spreads=(Spread("7", 1, 1, 4, 3),),
    )
    (write,) = plan_edits(view, plan, [], {"7": pending}, now_s=NOW).writes
    assert (write.nodes, write.tasks, write.tasks_per_node, write.min_cpus_per_node) == (
        ("csl-n2",),
        4,
        4,
        4,
    )  # NumNodes=1-1 NumTasks=4 TasksPerNode=4 MinCPUsNode=4
    assert write.admin_comment.endswith(";threads=0;spread=1:1:4;ways=csl-n2:3")
    written = replace(
        pending,
        held=False,
        priority=1000,
        required_nodes="csl-n2",
        node_count=1,
        max_nodes=1,
        tasks_per_node=4,
        admin_comment=write.admin_comment,
    )
    again = build_view(nodes, [written], device_kinds=KINDS, now_s=NOW + 5)
    assert again.snapshot.pending == () and not again.to_close
    (holding,) = again.snapshot.running
    assert (holding.node, holding.cpu_milli, holding.llc_ways) == ("csl-n2", 4000, 3)


def test_without_a_node_daemon_the_tasks_hear_the_cap_is_not_applied() -> None:
    from slurm_addon import prolog

    capped = Placement("n1", (), 5, 0, 0, (), 4, Spread("", 1, 1, 4, membw_gbps=12.5))
    lines, status = prolog.task_environment(capped, "n1", "7")
    assert status == 0
    assert lines[-2:] == [
        "export COSHARE_MEMBW_PERCENT=unsupported",
        "print coshare: job 7 runs on n1 without its memory bandwidth cap "
        "(12.5 GB/s): no coshare node daemon here",
    ]
