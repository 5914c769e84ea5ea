"""Profiles learned from normal runs, live on the real cluster: under ``policy: sns`` with
``learn: true`` a job of a program nobody profiled runs alone at scale 1; its end makes each
node's Epilog write what it measured (the job's cgroup CPU time, its run time, alone; IPC and
bandwidth ``unsupported`` with the path looked at: this host has neither per-job counters nor
resctrl) into the job-end spool; the next cycle counts it in the program's learned entry
(``coshare profile show`` says ``learning``, with the run), and places the program's next job
alone at scale 2, as section 4.2 of Spread-n-Share says."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_addon.placement import parse_placement

from .cluster import BIN, Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


@pytest.fixture
def learning(cluster: Cluster) -> Iterator[tuple[Cluster, Path, Path]]:
    """The cluster with a learning ``sns`` planner and every node's Epilog writing job-end
    records into one spool (the node configs are put back afterwards)."""
    store, spool = cluster.dir / "learned-profiles", cluster.dir / "job-end"
    store.mkdir(exist_ok=True)
    node_configs = sorted((cluster.dir / "node").glob("*/coshare.yaml"))
    saved = {path: path.read_text() for path in node_configs}
    for path, text in saved.items():
        path.write_text(text + f"  job_end_dir: {spool}\n")
    # first without learn_from: learning runs are placed, the records stay in the spool
    config = write_config(
        cluster, f"policy: {{name: sns, sns: {{profiles_dir: {store}, learn: true}}}}\n"
    )
    learner = Cluster(cluster.dir)
    learner.config = config
    try:
        yield learner, store, spool
    finally:
        for path, text in saved.items():
            path.write_text(text)


def submit(cluster: Cluster, name: str) -> str:
    """2 one-CPU tasks of program LEARNY on 1 or 2 nodes, a second's work each."""
    path = cluster.out / f"{name}.sh"
    path.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                f"#SBATCH --job-name={name}",
                f"#SBATCH --output={cluster.out}/%j.out",
                "#SBATCH -N 1-2 -n 2",
                '#SBATCH --comment="coshare: program=LEARNY"',
                "srun sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 1'",
            ]
        )
        + "\n"
    )
    return cluster.run("sbatch", "--parsable", str(path)).stdout.strip().split(";")[0]


def wait_for(
    cluster: Cluster, what: str, found: Callable[[], bool], deadline_s: float = 60
) -> None:
    stop = time.monotonic() + deadline_s
    while not found():
        if time.monotonic() > stop:
            said = [
                line
                for log in sorted((cluster.dir / "log").glob("*slurmd*"))
                for line in log.read_text(errors="replace").splitlines()
                if "coshare" in line or "pilog" in line
            ]
            pytest.fail(f"no {what} in {deadline_s} s; slurmd said:\n" + "\n".join(said[-30:]))
        time.sleep(0.2)


def test_a_jobs_end_teaches_the_next_cycle_to_try_the_next_scale(
    learning: tuple[Cluster, Path, Path],
) -> None:
    cluster, store, spool = learning
    first = submit(cluster, "learn-1")
    result = cluster.cycle("-v")
    assert result.returncode == 0, result.stdout + result.stderr
    placement = parse_placement(cluster.jobs()[first].admin_comment)
    assert placement is not None and placement.spread is not None
    assert (placement.spread.scale, placement.spread.nodes) == (1, 1), placement
    cluster.run_cycles_until_done([first])
    node = placement.node
    record_path = spool / f"{first}@{node}.json"
    wait_for(cluster, f"job-end record {record_path}", record_path.exists)
    record = json.loads(record_path.read_text())
    assert (record["program"], record["scale"], record["nodes"], record["alone"]) == (
        "LEARNY",
        1,
        1,
        True,
    )
    assert record["ended_at"] - record["started_at"] >= 1.0
    assert record["cpu_s"] is not None and record["cpu_s"] > 0, record  # the busy loop
    assert record["ipc"] is None and record["unsupported"]["ipc"].startswith("unsupported:")
    assert record["membw_gbps"] is None
    assert "resctrl MBM" in record["unsupported"]["membw_gbps"], record
    assert "/mon_data" in record["unsupported"]["membw_gbps"], record

    assert not (store / "learned").exists()  # nothing read the spool yet
    cluster.config.write_text(
        cluster.config.read_text().replace("learn: true}", f"learn: true, learn_from: {spool}}}")
    )
    second = submit(cluster, "learn-2")
    result = cluster.cycle()
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert f"coshare: learned: job {first}: LEARNY at scale 1," in said and "alone" in said
    assert not record_path.exists()  # counted once, then removed
    placement = parse_placement(cluster.jobs()[second].admin_comment)
    assert placement is not None and placement.spread is not None
    assert (placement.spread.scale, placement.spread.nodes) == (2, 2), placement
    assert [p.processes for p in placement.parts] == [1, 1], placement

    shown = cluster.run(
        str(BIN / "coshare"), "--config", str(cluster.config), "profile", "show", "LEARNY"
    ).stdout
    assert shown.startswith("LEARNY: learning (next run alone at scale 2; 1 run(s): scale 1 "), (
        shown
    )
    assert f"  ipc: {node}: unsupported: per-job IPC" in shown, shown
    assert "  membw_gbps: " in shown and "resctrl MBM" in shown, shown
    assert f"{store}: 0 admin, 0 learned, 1 learning" in shown, shown
