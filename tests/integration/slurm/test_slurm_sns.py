"""Spread-n-Share live on the real cluster: under ``policy: sns`` a job
whose profile runs faster spread is placed on twice the nodes with half the cores on each,
beside a compact job placed on one node, in one cycle; the placement carries the scale
factor, nodes and cores per node; Slurm runs each on exactly the planned nodes with the
planned tasks per node; every task reports its node, its spread and its LLC ways, which on
this host (no resctrl) are ``unsupported``, said with the path looked at, as the plan's notes
say too. Nothing pretends a way allocation."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from slurm_addon.jobs import expand_nodes
from slurm_addon.placement import Placement, parse_placement

from .cluster import BIN, Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

RESCTRL_MASK = "/sys/fs/resctrl/info/L3/cbm_mask"


def profile(program: str, run_time_s: dict[str, float]) -> dict[str, object]:
    return {
        "program": program,
        "run_time_s": run_time_s,
        "cores": 4,
        "ways": [2, 4, 20],
        "ipc": [0.5, 0.95, 1.0],
        "membw_gbps": [0.5, 0.5, 0.5],
    }


def sns_cluster(cluster: Cluster) -> Cluster:
    """The test cluster with ``policy.name: sns`` and a profile store of two programs."""
    store = cluster.dir / "profiles"
    store.mkdir(exist_ok=True)
    for data in (
        profile("SPREADY", {"1": 100.0, "2": 70.0, "4": 80.0, "8": 90.0}),
        profile("COMPACTY", {"1": 100.0, "2": 120.0, "4": 130.0, "8": 150.0}),
    ):
        (store / f"{data['program']}.json").write_text(json.dumps(data))
    config = write_config(cluster, f"policy: {{name: sns, sns: {{profiles_dir: {store}}}}}\n")
    sns = Cluster(cluster.dir)
    sns.config = config
    return sns


def submit(cluster: Cluster, name: str, program: str, sleep_s: float = 4) -> str:
    """A job of 2 one-CPU tasks on 1 or 2 nodes, each task printing where it runs and what
    coshare told it. (Two: every node of the local cluster hands out this host's cores, and
    a job gets at most as many of its own as the host has, 2 here.)"""
    report = (
        'echo "task=$SLURM_PROCID node=$SLURMD_NODENAME '
        'spread=${COSHARE_SPREAD-unset} ways=${COSHARE_LLC_WAYS-unset}"'
    )
    path = cluster.out / f"{name}.sh"
    path.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                f"#SBATCH --job-name={name}",
                f"#SBATCH --output={cluster.out}/%j.out",
                "#SBATCH -N 1-2 -n 2",
                f'#SBATCH --comment="coshare: program={program}"',
                f"srun sh -c '{report}; sleep {sleep_s}'",
            ]
        )
        + "\n"
    )
    return cluster.run("sbatch", "--parsable", str(path)).stdout.strip().split(";")[0]


def check_ran_as_placed(cluster: Cluster, job: str, node_list: str) -> Placement:
    """Every task ran on a node of the placement, as many there as planned, and reports
    the placement's spread and no way allocation."""
    record = cluster.sacct([job])[job]
    placement = parse_placement(record.admin_comment)
    out = cluster.output(job)
    assert placement is not None and placement.spread is not None, record
    assert record.state == "COMPLETED", (record, out)
    # the nodes Slurm was told (read back while pending) are the placement's; where the
    # tasks ran is read from their reports below, not from sacct's NodeList (slurmdbd once
    # recorded only the batch host of a short 3-node job, test_slurm_gangs.py)
    assert sorted(placement.nodes) == sorted(expand_nodes(node_list)), record
    s = placement.spread
    tasks = [
        dict(f.split("=", 1) for f in line.split())
        for line in out.splitlines()
        if line.startswith("task=")
    ]
    assert len(tasks) == 2, out
    planned = {p.node: p.processes for p in placement.parts} or {placement.node: 2}
    assert Counter(t["node"] for t in tasks) == planned, out
    assert {t["spread"] for t in tasks} == {f"{s.scale}:{s.nodes}:{s.cores_per_node}"}, out
    assert {t["ways"] for t in tasks} == {"unsupported"}, out
    assert placement.ways_by_node == {}  # the plan allocated none: no node here has resctrl
    for node in placement.nodes:
        assert (
            f"coshare: job {job} runs on {node} without LLC way allocation: unsupported: "
            f"resctrl L3 (cache ways): resctrl is not mounted there ({RESCTRL_MASK})" in out
        ), out
    return placement


def test_a_two_node_spread_job_runs_beside_a_compact_one_as_sns_planned(
    cluster: Cluster,
) -> None:
    sns = sns_cluster(cluster)
    spread = submit(sns, "spread", "SPREADY")
    compact = submit(sns, "compact", "COMPACTY")
    result = sns.run(
        str(BIN / "coshare"),
        "--config",
        str(sns.config),
        "slurm",
        "cycle",
        "-v",
        check=False,
        timeout=300,
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    # the plan says, in one note, which nodes have no resctrl: their jobs run without ways
    notes = {line for line in said.splitlines() if "no resctrl" in line}
    assert len(notes) == 1, said  # one note (the plan's, in each stream that shows it)
    [note] = notes
    assert re.search(r"nodes? \S.* ha(s|ve) no resctrl", note), said
    assert "without way allocation" in note, said
    jobs = sns.jobs()
    placements = {}
    for job in (spread, compact):
        assert not jobs[job].held, (jobs[job], said)
        placements[job] = parse_placement(jobs[job].admin_comment)
    required = {job: jobs[job].required_nodes for job in (spread, compact)}
    s, c = placements[spread], placements[compact]
    assert s is not None and s.spread is not None and c is not None and c.spread is not None
    # 2 one-CPU tasks, 4 cores a node: SPREADY at scale 2 (2 nodes x 1 core), COMPACTY at 1
    assert (s.spread.scale, s.spread.nodes, s.spread.cores_per_node) == (2, 2, 1), s
    assert [p.processes for p in s.parts] == [1, 1], s
    assert (c.spread.scale, c.spread.nodes, c.spread.cores_per_node) == (1, 1, 2), c
    # on one node: written as a single-node placement, its node count pinned to 1
    assert c.parts == () and jobs[compact].node_count == 1 and jobs[compact].tasks == 2, c
    sns.run_cycles_until_done([spread, compact])
    check_ran_as_placed(sns, spread, required[spread])
    check_ran_as_placed(sns, compact, required[compact])
