"""The negotiator's order and the pool's limits, live: the local pool with two accounting
groups, a quota and a concurrency limit (``deploy/condor/pool accounting-on``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from coshare.cycle.run import run_cycle
from coshare.policies import make_policy

from condor_addon.adapter import CondorAdapter
from tests.integration.condor_pool import CLIENT_CONFIG, Pool, pool, wait_for
from tests.integration.test_condor_pool import COSHARE, annotated

pytestmark = [pytest.mark.integration, pytest.mark.condor]

#: Keeps a placed job from starting (the order test looks at placements only).
NEVER_STARTS = "CoshareNeverStart =?= true"


@pytest.fixture
def accounting(live: Pool) -> Iterator[Pool]:
    """The pool with its accounting groups and concurrency limit, for one test."""
    pool("accounting-on")
    try:
        yield live
    finally:
        live.remove_all()
        pool("accounting-off")


def physics_quota(live: Pool) -> object:
    """group_physics's quota as the negotiator reports it now."""
    entries = live.client.negotiator_priorities()
    return next(
        (e.get("EffectiveQuota") for e in entries if e.get("Name") == "group_physics"), None
    )


def waiting_reasons(live: Pool) -> dict[str, str]:
    """Each job's CoshareWaitReason as HTCondor's own condor_q shows it."""
    shown = pool("exec", "condor_q", "-af", "ClusterId", "ProcId", "CoshareWaitReason")
    return {
        f"{line.split()[0]}.{line.split()[1]}": line.split(maxsplit=2)[2]
        for line in shown.splitlines()
        if line.strip()
    }


def test_of_two_users_submitting_interleaved_the_negotiators_favourite_is_placed_first(
    accounting: Pool,
) -> None:
    live = accounting
    domain = pool("exec", "condor_config_val", "UID_DOMAIN").strip()
    # heavy has used the pool a lot: a far worse effective priority than light, who is new
    pool("exec", "condor_userprio", "-setprio", f"heavy@{domain}", "5000")
    owner = {}
    for i in range(10):  # heavy, light, heavy, ...: heavy's jobs are each the older
        user = "heavy" if i % 2 == 0 else "light"
        cluster = live.submit(
            1,
            requirements=NEVER_STARTS,
            **{"+AccountingGroup": f'"{user}"'},
            **annotated(8192, 60),  # one job per 8 GiB of device: 8 fit the pool
        )
        owner[f"{cluster}.0"] = user
    # coshare's own order (policy.order: coshare, a dry run): by submit time, a light job waits
    config = live.config()
    config = replace(config, policy=replace(config.policy, order="coshare"))
    adapter = CondorAdapter(live.client, config)
    own = run_cycle(adapter, make_policy("knapsack"), adapter, dry_run=True)
    assert "light" in {owner[u.job] for u in own.plan.unplaced}
    report = live.cycle()
    placed = {a.job for a in report.plan.assignments}
    waiting = sorted(set(owner) - placed)
    assert len(placed) == 8, report.plan.unplaced
    # in the negotiator's order every light job is placed; the two left waiting are heavy's
    assert [owner[j] for j in waiting] == ["heavy", "heavy"]
    assert {j for j in owner if owner[j] == "light"} <= placed
    assert all(live.jobs()[j].get("CosharePlacedNode") is not None for j in placed)


def test_jobs_over_a_group_quota_or_a_concurrency_limit_are_never_placed_and_say_why(
    accounting: Pool, tmp_path: Path
) -> None:
    live = accounting
    physics = live.submit(
        3,
        sleep_s=120,
        accounting_group="group_physics",
        accounting_group_user="alice",
        **annotated(1024, 10),
    )
    licensed = live.submit(2, sleep_s=120, concurrency_limits="sw_license", **annotated(1024, 10))
    # the negotiator computes the groups' quotas in its cycles: until one ran with the groups
    # it reports them as 0 (and starts none of their jobs)
    wait_for(lambda: physics_quota(live) == 2.0, 60, "the negotiator to report the quota")
    first = live.cycle()
    placed = {a.job for a in first.plan.assignments}
    by_cluster = {c: {j for j in placed if j.startswith(f"{c}.")} for c in (physics, licensed)}
    # group_physics's quota is 2 cores (1 each); sw_license allows one job at a time
    assert len(by_cluster[physics]) == 2 and len(by_cluster[licensed]) == 1, (
        [a.job for a in first.plan.assignments],
        [(u.job, u.reason) for u in first.plan.unplaced],
        first.rejected,
        first.waiting,
        [j.id for j in first.snapshot.pending] if first.snapshot else None,
    )
    over_quota = next(f"{physics}.{p}" for p in range(3) if f"{physics}.{p}" not in placed)
    over_license = next(f"{licensed}.{p}" for p in range(2) if f"{licensed}.{p}" not in placed)
    # the placed ones start; the others stay unplaced cycle after cycle
    wait_for(
        lambda: sum(1 for v in live.jobs().values() if v.get("JobStatus") == 2) == 3,
        90,
        "the three placed jobs to run",
    )
    second = live.cycle()
    assert {a.job for a in second.plan.assignments} & {over_quota, over_license} == set()
    reasons = waiting_reasons(live)
    assert "GROUP_QUOTA_group_physics=2" in reasons[over_quota], reasons[over_quota]
    assert "group group_physics" in reasons[over_quota]
    assert "concurrency limit sw_license=1" in reasons[over_license], reasons[over_license]
    # explain, as the admin runs it
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")
    explained = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "explain", over_quota, "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(explained.stdout)
    assert data["state"] == "waiting", data
    assert "GROUP_QUOTA_group_physics=2" in json.dumps(data), data
    table = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "explain", over_license],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "concurrency limit sw_license=1" in table
