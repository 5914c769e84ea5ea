"""Fair share (Slurm's classic factor) and the simulator's ``--order scheduler``: a user who
used less goes first, usage decays with its half-life, and a replay reports each user's waits
and Jain's index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.ledger.fairshare import SCALE, FairShare
from coshare.model import MILLI, Job, Node
from coshare.policies import make_policy
from coshare.sim.device import FixedModel
from coshare.sim.engine import JobRecord, SimOptions, simulate
from coshare.sim.jobs import host_only
from coshare.sim.traces import parse_swf


def test_the_factor_is_two_to_the_minus_usage_over_shares() -> None:
    fair = FairShare(half_life_s=0)
    assert fair.factors(["a", "b"]) == {"a": 1.0, "b": 1.0}  # nobody used anything yet
    fair.accrue([], 0.0)
    fair.accrue([("a", 3.0), ("b", 1.0)], 10.0)  # a: 30 core-s, b: 10 of 40
    f = fair.factors(["a", "b", "c"])
    # equal shares, three users: S = 1/3 each; U_a = 0.75, U_b = 0.25, U_c = 0
    assert f["a"] == pytest.approx(2 ** (-0.75 * 3))
    assert f["b"] == pytest.approx(2 ** (-0.25 * 3))
    assert f["c"] == 1.0
    assert fair.priorities(["c"]) == {"c": SCALE}
    # twice the shares halve the exponent
    weighted = FairShare(half_life_s=0, shares={"a": 2.0})
    weighted.accrue([], 0.0)
    weighted.accrue([("a", 1.0), ("b", 1.0)], 10.0)
    g = weighted.factors(["a", "b"])
    assert g["a"] == pytest.approx(2 ** (-0.5 / (2 / 3)))
    assert g["b"] == pytest.approx(2 ** (-0.5 / (1 / 3)))


def test_usage_halves_with_the_half_life() -> None:
    fair = FairShare(half_life_s=100.0)
    fair.accrue([], 0.0)
    fair.accrue([("a", 1.0)], 10.0)
    fair.accrue([("b", 1.0)], 110.0)  # a's 10 core-s decayed to 5; b charged 100 (no decay)
    assert fair.usage["a"] == pytest.approx(5.0)
    assert fair.usage["b"] == pytest.approx(100.0)


def _run(order: str) -> dict[str, JobRecord]:
    """One node of one core; a heavy user's four jobs arrive before a light user's one."""
    node = Node("n1", MILLI, 1024)
    jobs = [
        host_only(Job(f"h{i}", device_count=0, kind="cpu", submit_time_s=i * 0.1), 100.0, "heavy")
        for i in range(4)
    ]
    jobs.append(host_only(Job("l", device_count=0, kind="cpu", submit_time_s=50.0), 100.0, "light"))
    records: dict[str, JobRecord] = {}
    simulate(
        [node],
        jobs,
        make_policy("exclusive"),
        options=SimOptions(cycle_delay_s=0.0, order=order),
        model=FixedModel(),
        record=lambda r: records.__setitem__(r.id, r),
    )
    return records


def test_under_the_schedulers_order_the_light_user_runs_before_the_heavy_users_queue() -> None:
    own, fair = _run("coshare"), _run("scheduler")
    # coshare's order: submit time, so the light job waits for all four heavy ones
    assert own["l"].start_s == pytest.approx(400.0)
    # fair share: once heavy has used the core, light's one job goes next
    assert fair["l"].start_s == pytest.approx(100.0)
    assert fair["l"].user == "light" and fair["h3"].user == "heavy"


def test_an_swf_record_names_its_user_and_a_replay_reports_each_users_waits(
    tmp_path: Path,
) -> None:
    lines = [
        f"{i + 1} {10 * i} 0 100 1 -1 -1 1 100 -1 1 {1 + i % 2} 1 -1 -1 1 -1 -1" for i in range(6)
    ]
    trace = parse_swf(lines)
    assert [j.user for j in trace.jobs] == ["1", "2", "1", "2", "1", "2"]
    assert parse_swf(["1 0 0 10 1 -1 -1 1 10 -1 1 -1 1 -1 -1 1 -1 -1"]).jobs[0].user == ""
    path = tmp_path / "t.swf"
    path.write_text("; MaxNodes: 1\n; MaxProcs: 1\n" + "\n".join(lines) + "\n")
    ran = CliRunner().invoke(
        cli,
        [
            *("simulate", "--workload", f"trace:{path}", "--policies", "exclusive"),
            *("--order", "both", "--output", "json"),
        ],
        env={"COSHARE_CONFIG": "/dev/null"},
    )
    assert ran.exit_code == 0, ran.output
    runs = json.loads(ran.stdout)["runs"]
    assert [r["policy"] for r in runs] == [
        "exclusive (coshare order)",
        "exclusive (scheduler order)",
    ]
    for run in runs:
        assert {u: f["jobs"] for u, f in run["users"].items()} == {"1": 3, "2": 3}
        assert 0 < run["fairness_jain"] <= 1


def test_the_order_belongs_to_replays() -> None:
    ran = CliRunner().invoke(
        cli,
        ["simulate", "--workload", "table1", "--order", "scheduler"],
        env={"COSHARE_CONFIG": "/dev/null"},
    )
    assert ran.exit_code == 2 and "--order applies to trace:PATH and history replays" in ran.output
