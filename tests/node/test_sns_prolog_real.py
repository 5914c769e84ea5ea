"""Slurm's Prolog for a Spread-n-Share placement on real cgroups (root):
with resctrl (a temp dir with the kernel's layout: this machine has none) the job's resctrl
group gets that node's ways from the placement; without resctrl the job still gets its group
and runs *without* way allocation, and its tasks are told ``unsupported`` with the path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.ledger.book import Part
from coshare.model import Spread
from coshare.node import lifecycle
from coshare.node.jobs import TASK_ENV_SUFFIX
from coshare.node.lifecycle import job_end

from slurm_addon import node_hooks
from slurm_addon.allocation import Allocation
from slurm_addon.placement import Placement
from tests.unit.fake_resctrl import FakeResctrl, make_resctrl

pytestmark = pytest.mark.cgroups

GANG = Placement(
    "n1", (), 5, 0, 0, (Part("n1", (), 2, 4), Part("n2", (), 2, 4)), 4, Spread("", 2, 2, 2)
)


def told(config: NodeConfig, job: str) -> list[str]:
    path = Path(config.state_dir) / "jobs" / f"job-{job}{TASK_ENV_SUFFIX}"
    return path.read_text().splitlines()


def test_the_prolog_makes_the_resctrl_group_with_this_nodes_ways(
    node_config: NodeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeResctrl(make_resctrl(tmp_path / "resctrl"), node_config.cgroup_parent)
    monkeypatch.setattr(lifecycle, "node_resctrl", lambda config: fake)
    here = GANG.on("n2")
    assert here is not None
    record = node_hooks.on_job_start(node_config, "sns1", here, Allocation(1, 64), 0)
    assert record.spec.llc_ways == 4
    # Alone on the node it holds its 4 ways and, as its share of the spare ones, the other 16
    # (Spread-n-Share 4.4); the node still counts 16 free for the next job.
    assert (fake.path("sns1") / "schemata").read_text().startswith("L3:0=fffff;1=fffff\n")
    assert told(node_config, "sns1") == ["export COSHARE_SPREAD=2:2:2", "export COSHARE_LLC_WAYS=4"]
    allocated = lifecycle.allocated_ways(lifecycle.node_store(node_config))
    assert allocated == {"sns1": 4} and fake.ways_free(allocated) == 16
    # A second job takes its 4 back from sns1's share; the 12 spare split 6 and 6.
    node_hooks.on_job_start(node_config, "sns3", here, Allocation(1, 64), 0)
    assert (fake.path("sns1") / "schemata").read_text().startswith("L3:0=3ff;1=3ff\n")
    assert (fake.path("sns3") / "schemata").read_text().startswith("L3:0=ffc00;1=ffc00\n")
    job_end(node_config, "sns1")
    assert not fake.path("sns1").exists()
    # its ways go to the job left
    assert (fake.path("sns3") / "schemata").read_text().startswith("L3:0=fffff;1=fffff\n")
    job_end(node_config, "sns3")
    assert fake.jobs() == [] and fake.ways_free({}) == 20
    assert not (Path(node_config.state_dir) / "jobs" / f"job-sns1{TASK_ENV_SUFFIX}").exists()


def test_without_spare_sharing_each_group_holds_its_own_ways(
    node_config: NodeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = replace(node_config, llc_share_spare=False)
    fake = FakeResctrl(make_resctrl(tmp_path / "resctrl"), config.cgroup_parent)
    monkeypatch.setattr(lifecycle, "node_resctrl", lambda config: fake)
    here = GANG.on("n1")
    assert here is not None
    node_hooks.on_job_start(config, "own1", here, Allocation(1, 64), 0)
    node_hooks.on_job_start(config, "own2", here, Allocation(1, 64), 0)
    assert (fake.path("own1") / "schemata").read_text().startswith("L3:0=f;1=f\n")
    assert (fake.path("own2") / "schemata").read_text().startswith("L3:0=f0;1=f0\n")
    assert fake.ways_free() == 12
    job_end(config, "own1")
    job_end(config, "own2")


def test_without_resctrl_the_job_runs_without_ways_and_its_tasks_are_told(
    node_config: NodeConfig, tmp_path: Path
) -> None:
    config = replace(node_config, resctrl_root=str(tmp_path / "no-resctrl"))
    here = GANG.on("n1")
    assert here is not None
    record = node_hooks.on_job_start(config, "sns2", here, Allocation(1, 64), 0)
    assert record.spec.llc_ways is None and record.group().exists()
    assert lifecycle.node_store(config).error("sns2") is None  # not refused: it runs
    path = tmp_path / "no-resctrl" / "info" / "L3" / "cbm_mask"
    assert told(config, "sns2") == [
        "export COSHARE_SPREAD=2:2:2",
        "export COSHARE_LLC_WAYS=unsupported",
        f"print coshare: job sns2 runs on n1 without LLC way allocation (its placement asks "
        f"4): unsupported: resctrl L3 (cache ways): resctrl is not mounted there ({path})",
    ]
    job_end(config, "sns2")


CAPPED = Placement(
    "n1",
    (),
    5,
    0,
    0,
    (Part("n1", (), 2, 4), Part("n2", (), 2, 4)),
    4,
    Spread("", 2, 2, 2, membw_gbps=23.5),
)


def write_baseline(config: NodeConfig, gbps: float) -> None:
    from coshare.node.bandwidth import Baseline
    from coshare.node.membw import ProbeFiles

    files = ProbeFiles(Path(config.state_dir))
    files.write(
        files.baseline_path,
        Baseline({(0,): 18.8, (0, 1, 2, 3): gbps}, 1.7e9, "numpy", 256).to_dict(),
    )


def test_the_prolog_caps_the_jobs_bandwidth_with_mba_as_a_share_of_the_node(
    node_config: NodeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeResctrl(make_resctrl(tmp_path / "resctrl"), node_config.cgroup_parent)
    monkeypatch.setattr(lifecycle, "node_resctrl", lambda config: fake)
    write_baseline(node_config, 118.26)  # 23.5 of 118.26 GB/s: 19.9% -> 20%
    here = CAPPED.on("n1")
    assert here is not None
    record = node_hooks.on_job_start(node_config, "mba1", here, Allocation(1, 64), 0)
    assert (record.spec.llc_ways, record.spec.membw_percent) == (4, 20)
    assert (fake.path("mba1") / "schemata").read_text() == "L3:0=fffff;1=fffff\nMB:0=20;1=20\n"
    assert told(node_config, "mba1") == [
        "export COSHARE_SPREAD=2:2:2",
        "export COSHARE_LLC_WAYS=4",
        "export COSHARE_MEMBW_PERCENT=20",
    ]
    job_end(node_config, "mba1")


def test_without_mba_or_a_baseline_the_job_runs_uncapped_and_is_told_why(
    node_config: NodeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_resctrl(tmp_path / "resctrl", mba=False)
    fake = FakeResctrl(root, node_config.cgroup_parent)
    monkeypatch.setattr(lifecycle, "node_resctrl", lambda config: fake)
    here = CAPPED.on("n2")
    assert here is not None
    # no baseline: no way to turn GB/s into a percentage
    record = node_hooks.on_job_start(node_config, "mba2", here, Allocation(1, 64), 0)
    assert (record.spec.llc_ways, record.spec.membw_percent) == (4, None)
    baseline = Path(node_config.state_dir) / "membw-baseline.json"
    assert told(node_config, "mba2")[2:] == [
        "export COSHARE_MEMBW_PERCENT=unsupported",
        "print coshare: job mba2 runs on n2 without its memory bandwidth cap (23.5 GB/s): "
        "unsupported: node memory bandwidth (for the MBA cap): no baseline: run `coshare node "
        f"probe membw --init` on an idle node ({baseline})",
    ]
    job_end(node_config, "mba2")
    # a baseline but no MBA: the ways are still allocated, the cap is not
    write_baseline(node_config, 100.0)
    record = node_hooks.on_job_start(node_config, "mba3", here, Allocation(1, 64), 0)
    assert (record.spec.llc_ways, record.spec.membw_percent) == (4, None)
    assert fake.path("mba3").is_dir()
    assert lifecycle.node_store(node_config).error("mba3") is None  # it runs
    path = root / "info" / "MB" / "min_bandwidth"
    assert told(node_config, "mba3")[2:] == [
        "export COSHARE_MEMBW_PERCENT=unsupported",
        "print coshare: job mba3 runs on n2 without its memory bandwidth cap (23.5 GB/s): "
        "unsupported: resctrl MB (memory bandwidth allocation): the processor or kernel "
        f"offers no MBA here ({path})",
    ]
    job_end(node_config, "mba3")


def test_without_resctrl_neither_ways_nor_the_cap_and_both_are_said(
    node_config: NodeConfig, tmp_path: Path
) -> None:
    config = replace(node_config, resctrl_root=str(tmp_path / "none"))
    write_baseline(config, 100.0)
    here = CAPPED.on("n1")
    assert here is not None
    record = node_hooks.on_job_start(config, "mba4", here, Allocation(1, 64), 0)
    assert (record.spec.llc_ways, record.spec.membw_percent) == (None, None)
    lines = told(config, "mba4")
    assert "export COSHARE_LLC_WAYS=unsupported" in lines
    assert "export COSHARE_MEMBW_PERCENT=unsupported" in lines
    assert any(str(tmp_path / "none" / "info" / "MB" / "min_bandwidth") in x for x in lines)
    job_end(config, "mba4")
