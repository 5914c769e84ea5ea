"""One node whose record is hostile never stops the cycle for the others, on both adapters:
each Source reads the recorded output of its scheduler (HTCondor slot and job ads,
Slurm ``sinfo``/``squeue --json``) with one node's record changed, and must leave that node
out with a note naming it and the field, plan every other node, and list the nodes the
scheduler itself closed (drained, down) for ``show``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import classad2
import pytest
from coshare.cli.render import show_text
from coshare.config import Config, DeviceKind, SlurmConfig
from coshare.cycle.run import run_cycle
from coshare.policies import make_policy
from coshare.ports import SourceResult

from condor_addon.adapter import CondorAdapter
from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
from condor_addon.client import values_of
from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient

from .slurm_recorder import Recorder, job_record, ok, recorded, squeue_output

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOW = 1_800_000_000

#: Values a hostile or broken record may hold where a number belongs.
HOSTILE = [1e300, math.nan, math.inf, -1, "12", 10**400]


class RecordedPool:
    """The collector and schedd of the recorded HTCondor pool, one slot's ads changed."""

    def __init__(self, slot: str, **changes: object) -> None:
        text = (FIXTURES / "condor/23.9.6/slots.ads").read_text()
        self.slots = [values_of(ad, SLOT_PROJECTION) for ad in classad2.parseAds(text)]
        for ad in self.slots:
            if ad["Name"] == slot:
                ad.update(changes)
        text = (FIXTURES / "condor/23.9.6/jobs.ads").read_text()
        self.jobs = [values_of(ad, JOB_PROJECTION) for ad in classad2.parseAds(text)]

    def slot_ads(self) -> list[dict[str, object]]:
        return self.slots

    def job_ads(self, constraint: str, projection: Any = None) -> list[dict[str, object]]:
        return self.jobs

    def negotiator_priorities(self) -> list[dict[str, object]]:
        """The negotiator's answer recorded from the same pool (with accounting groups)."""
        accounting = json.loads((FIXTURES / "condor/23.9.6/accounting.json").read_text())
        return list(accounting["priorities"])

    def negotiator_settings(self, wanted: Any) -> dict[str, object]:
        accounting = json.loads((FIXTURES / "condor/23.9.6/accounting.json").read_text())
        return {k: v for k, v in accounting["settings"].items() if wanted(k)}


def read_condor(slot: str, **changes: object) -> SourceResult:
    now = float((FIXTURES / "condor/23.9.6/recorded_at").read_text())
    config = Config(device_kinds={"phi-5110p": DeviceKind(8192, 240)})
    adapter = CondorAdapter(RecordedPool(slot, **changes), config, clock=lambda: now)  # type: ignore[arg-type]
    return adapter.read()


def read_slurm(node: str, **changes: object) -> SourceResult:
    sinfo = json.loads(recorded("sinfo-drain-down.json"))
    for record in sinfo["nodes"]:
        if record["name"] == node:
            record.update(changes)
    # One annotated pending job per usable node's worth of room, and one running on csl-n2.
    jobs = [
        job_record(1, submit_time=NOW - 5),
        job_record(2, submit_time=NOW - 4),
        job_record(
            3,
            job_state="RUNNING",
            nodes="csl-n2",
            comment="",
            priority=1,
            state_reason="None",
            cpus=1,
            memory_per_node=100,
        ),
    ]

    def answer(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        name = argv[0].rsplit("/", 1)[-1]
        if name == "sinfo":
            return ok(argv, json.dumps(sinfo))
        return ok(argv, squeue_output(*jobs))

    config = Config(device_kinds={"fakephi": DeviceKind(8192, 240)}, slurm=SlurmConfig())
    client = SlurmClient(config.slurm, runner=Recorder(answer), sleep=lambda s: None, environ={})
    return SlurmAdapter(client, config, clock=lambda: NOW).read()


def left_out(result: SourceResult, node: str, field: str) -> None:
    notes = [n for n in result.notes if n.startswith(f"node {node}: ")]
    assert len(notes) == 1, result.notes
    assert notes[0].startswith(f"node {node}: {field}=")
    assert notes[0].endswith("node left out of this cycle") and len(notes[0]) < 400
    assert node not in {n.name for n in result.snapshot.nodes}
    assert node not in {r.node for r in result.snapshot.running}


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("field", ["TotalSlotCpus", "TotalSlotMemory"])
def test_condor_a_hostile_slot_leaves_its_node_out_and_plans_the_others(
    field: str, value: object
) -> None:
    result = read_condor("slot1@node2@vm", **{field: value})
    left_out(result, "node2", field)
    assert [n.name for n in result.snapshot.nodes] == ["node1", "node3"]
    plan = make_policy("knapsack").plan(result.snapshot)
    assert plan.placed > 0 and {a.node for a in plan.assignments} <= {"node1", "node3"}


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("field", ["cpus", "real_memory"])
def test_slurm_a_hostile_node_record_leaves_it_out_and_plans_the_others(
    field: str, value: object
) -> None:
    result = read_slurm("csl-n2", **{field: value})
    left_out(result, "csl-n2", field)
    assert [n.name for n in result.snapshot.nodes] == ["csl-n1"]
    plan = make_policy("knapsack").plan(result.snapshot)
    assert sorted(a.job for a in plan.assignments) == ["1", "2"]
    assert {a.node for a in plan.assignments} == {"csl-n1"}


def test_slurm_a_gres_count_of_a_hundred_billion_leaves_only_that_node_out() -> None:
    result = read_slurm("csl-n2", gres="gpu:fakephi:99999999999")
    left_out(result, "csl-n2", "gres")
    assert [n.name for n in result.snapshot.nodes] == ["csl-n1"]


def test_condor_a_whole_cycle_still_places_on_the_other_nodes() -> None:
    now = float((FIXTURES / "condor/23.9.6/recorded_at").read_text())
    pool = RecordedPool("slot1@node2@vm", TotalSlotCpus=math.nan)
    config = Config(device_kinds={"phi-5110p": DeviceKind(8192, 240)})
    adapter = CondorAdapter(pool, config, clock=lambda: now)  # type: ignore[arg-type]
    report = run_cycle(adapter, make_policy("knapsack"), adapter, dry_run=True)  # checked plan
    assert report.plan.placed > 0 and report.apply.applied
    assert any(n.startswith("node node2: TotalSlotCpus=nan") for n in report.notes)


def test_show_says_why_closed_nodes_take_nothing_on_both_schedulers() -> None:
    slurm = read_slurm("csl-n1")
    text = show_text(slurm, make_policy("knapsack").plan(slurm.snapshot))
    flat = " ".join(text.split())
    assert "2 nodes, 4 devices (and 2 nodes taking no jobs)" in flat
    assert "Nodes that take no jobs now" in text
    assert "csl-n3 idle+DRAIN maintenance" in flat and "csl-n4 down broken" in flat

    condor = read_condor(
        "slot1@node3@vm", State="Drained", Activity="Retiring", DrainReason="firmware\x1b[2J update"
    )
    text = show_text(condor, make_policy("knapsack").plan(condor.snapshot))
    flat = " ".join(text.split())
    assert "2 nodes, 4 devices (and 1 nodes taking no jobs)" in flat
    assert "node3 Drained/Retiring firmware\\x1b[2J update" in flat
    assert "\x1b" not in text


@pytest.mark.parametrize("name", ["csl-n2;reboot", "n$(id)", "n 3", "n5,n6"])
def test_slurm_a_node_whose_name_cannot_be_written_is_left_out_and_shown(name: str) -> None:
    result = read_slurm("csl-n2", name=name)
    notes = [n for n in result.notes if "its name cannot be written into a placement" in n]
    assert len(notes) == 1 and notes[0].endswith("node left out of this cycle"), result.notes
    assert name not in {n.name for n in result.snapshot.nodes}
    assert [n.name for n in result.snapshot.nodes] == ["csl-n1"]
    # every job is planned where it can be written, and the cycle writes them
    plan = make_policy("knapsack").plan(result.snapshot)
    assert {a.node for a in plan.assignments} == {"csl-n1"}
    text = show_text(result, plan)
    assert "unwritable" in text and "name not writable" in " ".join(text.split())


def test_a_cycle_counts_the_nodes_it_left_out_by_kind(tmp_path: Path) -> None:
    from coshare.config import MetricsConfig
    from coshare.cycle.metrics import CycleMetrics
    from prometheus_client.parser import text_string_to_metric_families

    sinfo = json.loads(recorded("sinfo-drain-down.json"))
    for record in sinfo["nodes"]:
        if record["name"] == "csl-n2":
            record["name"] = "csl-n2;reboot"
    jobs = [job_record(1, submit_time=NOW - 5)]

    def answer(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        name = argv[0].rsplit("/", 1)[-1]
        return ok(argv, json.dumps(sinfo) if name == "sinfo" else squeue_output(*jobs))

    config = Config(device_kinds={"fakephi": DeviceKind(8192, 240)}, slurm=SlurmConfig())
    client = SlurmClient(config.slurm, runner=Recorder(answer), sleep=lambda s: None, environ={})
    adapter = SlurmAdapter(client, config, clock=lambda: NOW)
    report = run_cycle(adapter, make_policy("knapsack"), adapter, dry_run=True)
    metrics = CycleMetrics("slurm", MetricsConfig(textfile_dir=str(tmp_path)))
    metrics.finished(report)
    assert metrics.export() == []
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families((tmp_path / "coshare_slurm.prom").read_text())
        for s in f.samples
    }
    s = ("scheduler", "slurm")
    assert found[("coshare_cycle_unusable_nodes", (("kind", "unwritable"), s))] == 1
    assert found[("coshare_cycle_unusable_nodes", (("kind", "closed"), s))] == 2


def read_condor_renamed(node: str, name: object) -> SourceResult:
    """The recorded pool with every slot of ``node`` advertising ``CoshareNodeName = name``."""
    now = float((FIXTURES / "condor/23.9.6/recorded_at").read_text())
    pool = RecordedPool("")
    for ad in pool.slots:
        if ad["CoshareNodeName"] == node:
            ad["CoshareNodeName"] = name
    config = Config(device_kinds={"phi-5110p": DeviceKind(8192, 240)})
    return CondorAdapter(pool, config, clock=lambda: now).read()  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["node2$$(Name)", "node2$$([1+1])", "$$"])
def test_condor_a_node_whose_name_cannot_be_written_is_left_out_and_shown(name: str) -> None:
    # The schedd replaces $$(...) in a job's attributes when it starts the job: a placement
    # on this node would not read back as its name, on every cycle.
    result = read_condor_renamed("node2", name)
    notes = [n for n in result.notes if "its name cannot be written into a placement" in n]
    assert len(notes) == 1 and notes[0].endswith("node left out of this cycle"), result.notes
    assert notes[0].startswith(f"node {name}: ") and "$$" in notes[0]
    assert [n.name for n in result.snapshot.nodes] == ["node1", "node3"]
    assert name not in {r.node for r in result.snapshot.running}
    plan = make_policy("knapsack").plan(result.snapshot)
    assert plan.placed > 0 and {a.node for a in plan.assignments} <= {"node1", "node3"}
    text = show_text(result, plan)
    assert "unwritable" in text and "name not writable" in " ".join(text.split())


def test_condor_odd_but_writable_names_stay_planned() -> None:
    # Quotes, spaces, one dollar: written as a quoted ClassAd string, the gate compares them.
    for name in ['node4 " || true || "', "n$(id)", "n 3", "n5,n6", "csl-n2;reboot"]:
        result = read_condor_renamed("node2", name)
        assert name in {n.name for n in result.snapshot.nodes}, result.notes
        assert not result.unusable


def test_condor_a_device_whose_id_cannot_be_written_is_ignored_and_the_rest_planned() -> None:
    now = float((FIXTURES / "condor/23.9.6/recorded_at").read_text())
    pool = RecordedPool("")
    for ad in pool.slots:
        if ad["CoshareNodeName"] == "node3":
            ad["CoshareNodeDeviceIds"] = ["gpu 0", "1"]
            ad["CoshareNodeDeviceMemory"] = [8192, 8192]
            ad["CoshareNodeDeviceThreads"] = [240, 240]
            ad["CoshareNodeDeviceModels"] = ["phi-5110p", "phi-5110p"]
    config = Config(device_kinds={"phi-5110p": DeviceKind(8192, 240)})
    result = CondorAdapter(pool, config, clock=lambda: now).read()  # type: ignore[arg-type]
    node3 = next(n for n in result.snapshot.nodes if n.name == "node3")
    assert [d.id for d in node3.devices] == ["1"]
    assert any(
        n.startswith("node node3 device gpu 0: CoshareNodeDeviceIds=")
        and n.endswith("device ignored")
        for n in result.notes
    ), result.notes


def test_a_condor_cycle_counts_the_unwritable_nodes(tmp_path: Path) -> None:
    from coshare.config import MetricsConfig
    from coshare.cycle.metrics import CycleMetrics
    from prometheus_client.parser import text_string_to_metric_families

    now = float((FIXTURES / "condor/23.9.6/recorded_at").read_text())
    pool = RecordedPool("")
    for ad in pool.slots:
        if ad["CoshareNodeName"] == "node2":
            ad["CoshareNodeName"] = "node2$$(Name)"
    config = Config(device_kinds={"phi-5110p": DeviceKind(8192, 240)})
    adapter = CondorAdapter(pool, config, clock=lambda: now)  # type: ignore[arg-type]
    report = run_cycle(adapter, make_policy("knapsack"), adapter, dry_run=True)
    assert report.plan.placed > 0 and report.apply.applied and not report.apply.failed
    metrics = CycleMetrics("condor", MetricsConfig(textfile_dir=str(tmp_path)))
    metrics.finished(report)
    assert metrics.export() == []
    text = (tmp_path / "coshare_condor.prom").read_text()
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    s = ("scheduler", "condor")
    assert found[("coshare_cycle_unusable_nodes", (("kind", "unwritable"), s))] == 1
    assert found[("coshare_cycle_unusable_nodes", (("kind", "closed"), s))] == 0
