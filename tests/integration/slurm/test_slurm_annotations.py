"""Users' side on the real cluster: bad annotations get a per-job message and do not stop the
cycle; owners cannot start an annotated job before coshare placed it; a placement that does
not start in time is planned again."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .cluster import BIN, Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

NOBODY = 65534


def test_malformed_annotations_are_refused_per_job(cluster: Cluster) -> None:
    bad = {
        cluster.submit(
            "bad-nan", comment="coshare: device-memory=abc device-threads=60"
        ): "device-memory='abc' is not a number (allowed: integer MiB >= 1",
        cluster.submit(
            "bad-big", comment="coshare: device-memory=20G device-threads=60"
        ): "exceeds every device (largest: 8192 MiB)",
        cluster.submit(
            "bad-key", comment="coshare: device-memory=1G device-threads=60 colour=red"
        ): "colour='red' is not a coshare key",
        cluster.submit(
            "bad-novalue", comment="coshare: device-memory device-threads=60"
        ): "device-memory='' has no value",
    }
    good = [
        cluster.submit(
            f"good-{i}", comment="coshare: device-memory=1G device-threads=60", sleep_s=1
        )
        for i in range(2)
    ]
    result = cluster.cycle()
    assert result.returncode == 0, result.stderr
    for job_id, message in bad.items():
        line = next(x for x in result.stdout.splitlines() if x.startswith(f"  refused {job_id}:"))
        assert f"job {job_id}: " in line and message in line
    jobs = cluster.jobs()
    for job_id, message in bad.items():
        assert jobs[job_id].held
        assert jobs[job_id].admin_comment.startswith("coshare-refused: ")
        assert message in jobs[job_id].admin_comment
    assert all(jobs[j].admin_comment.startswith("coshare-placement") for j in good)

    # The owner fixes one job; the next cycle places it.
    fixed = next(iter(bad))
    cluster.run(
        "scontrol",
        "update",
        f"JobId={fixed}",
        "Comment=coshare: device-memory=1G device-threads=60",
    )
    cluster.run_cycles_until_done([fixed, *good], deadline_s=120)
    assert cluster.jobs()[fixed].state == "COMPLETED"


def test_owner_cannot_start_an_annotated_job_unplaced(cluster: Cluster) -> None:
    submit = [
        "sbatch",
        "--parsable",
        "-D",
        "/tmp",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 1",
        "--comment",
        "coshare: device-memory=1G device-threads=60",
    ]
    job_id = cluster.run(*submit, user=NOBODY).stdout.strip()
    assert cluster.jobs()[job_id].held
    refused = cluster.run("scontrol", "release", job_id, user=NOBODY, check=False)
    assert refused.returncode != 0
    time.sleep(1)
    assert cluster.jobs()[job_id].held
    held = cluster.run(*submit[:2], "--hold", *submit[2:], user=NOBODY, check=False)
    assert held.returncode != 0 and "--hold is refused" in held.stderr
    # Owners may still change what a waiting job declares; it stays held.
    cluster.run(
        "scontrol",
        "update",
        f"JobId={job_id}",
        "Comment=coshare: device-memory=2G device-threads=60",
        user=NOBODY,
    )
    assert cluster.jobs()[job_id].held
    cluster.run_cycles_until_done([job_id], deadline_s=120)
    placed = cluster.jobs()[job_id].admin_comment
    assert placed.startswith("coshare-placement") and "mem_mib=2048" in placed


def test_placement_that_does_not_start_is_planned_again(cluster: Cluster) -> None:
    config = write_config(cluster, "")
    config.write_text(config.read_text().replace("replan_after_s: 120", "replan_after_s: 2"))

    def cycle() -> dict[str, Any]:
        result = cluster.run(
            str(BIN / "coshare"), "--config", str(config), "slurm", "cycle", "--output", "json"
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["apply"]  # type: ignore[no-any-return]

    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")  # nothing starts
    job_id = cluster.submit(
        "replan", comment="coshare: device-memory=1G device-threads=60", sleep_s=1
    )
    assert cycle()["applied"] == [job_id]
    first = cluster.jobs()[job_id]
    assert not first.held and first.admin_comment.startswith("coshare-placement")
    node = first.required_nodes
    time.sleep(3)
    # Expired: pending again in this very cycle, counted nowhere; planned where it is, so
    # nothing is written.
    assert cycle()["unchanged"] == [job_id]
    assert cluster.jobs()[job_id].admin_comment == first.admin_comment
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=coshare-test")
    try:
        # Its node takes no jobs now: the same cycle holds it (confirmed), then places it
        # elsewhere and releases it.
        moved = cycle()
        assert [w["job"] for w in moved["withdrawn"]] == [job_id]
        # show says why that node takes nothing (Slurm's state and the admin's reason).
        shown = cluster.run(str(BIN / "coshare"), "--config", str(config), "slurm", "show").stdout
        flat = " ".join(shown.split())
        assert "Nodes that take no jobs now" in shown and f"{node} idle+DRAIN" in flat, shown
        assert "coshare-test" in flat
        assert moved["applied"] == [job_id]
        again = cluster.jobs()[job_id]
        assert not again.held and again.required_nodes not in ("", node)
        assert again.admin_comment.startswith(f"coshare-placement;v=1;node={again.required_nodes}")
    finally:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    cluster.run("scontrol", "update", "PartitionName=main", "State=UP")
    cluster.run_cycles_until_done([job_id], deadline_s=120)
    assert cluster.jobs()[job_id].state == "COMPLETED"


def submit_as_nobody(cluster: Cluster, comment: str) -> str:
    """An annotated one-second job of another user (uid 65534)."""
    return (
        cluster.run(
            "sbatch",
            "--parsable",
            "-D",
            "/tmp",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 1",
            "--comment",
            comment,
            user=NOBODY,
        )
        .stdout.strip()
        .split(";")[0]
    )


def test_a_comment_forging_other_jobs_lines_does_not_stop_them(cluster: Cluster) -> None:
    # The confirming re-read printed comments verbatim, so a comment could forge
    # whole lines for other jobs, which then read as duplicated and were never placed.
    victims = [
        submit_as_nobody(cluster, "coshare: device-memory=1G device-threads=60") for _ in range(3)
    ]
    lines = [
        f"{v}|PENDING|JobHeldUser|0|csl-n1|coshare-placement;v=1;node=csl-n1;devices=0;"
        "at=1;mem_mib=1;threads=1|x"
        for v in victims
    ]
    marker = "cs" + "0" * 32  # a guess at the re-read's marker (Slurm keeps ~1000 characters)
    lines.append(f"{victims[0]}{marker}PENDING{marker}None{marker}0{marker}end")
    forger = cluster.submit("forger", comment="coshare: device-memory=1G device-threads=60")
    cluster.run(
        "scontrol",
        "update",
        f"JobId={forger}",
        "Comment=coshare: device-memory=1G device-threads=60\n" + "\n".join(lines),
    )
    assert cluster.jobs()[forger].comment.count("\n") == len(lines)
    result = cluster.cycle()
    assert result.returncode == 0, result.stderr
    jobs = cluster.jobs()  # all placed and released in this one cycle
    for v in victims:
        assert jobs[v].phase != "pending" or not jobs[v].held, jobs[v]
        assert jobs[v].admin_comment.startswith("coshare-placement;v=1;"), jobs[v]


def test_an_absurd_annotation_refuses_that_job_only(cluster: Cluster) -> None:
    # A device memory of 400 digits crashed every cycle (OverflowError).
    others = [
        submit_as_nobody(cluster, "coshare: device-memory=1G device-threads=60") for _ in range(3)
    ]
    absurd = cluster.submit(
        "absurd", comment="coshare: device-memory=" + "9" * 400 + " device-threads=60"
    )
    result = cluster.cycle()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith(f"  refused {absurd}:"))
    assert f"job {absurd}: device-memory='9999" in line and len(line) < 400
    jobs = cluster.jobs()
    assert jobs[absurd].held and jobs[absurd].admin_comment.startswith(
        f"coshare-refused: job {absurd}: device-memory="
    )
    for job_id in others:
        assert jobs[job_id].admin_comment.startswith("coshare-placement;v=1;"), jobs[job_id]


def test_waiting_jobs_carry_their_reason_and_explain_says_what_would_make_them_fit(
    cluster: Cluster,
) -> None:
    # The partition is down, so placed jobs stay queued holding their devices; 240 threads
    # each: one job per device (8 devices), so 2 of 10 wait.
    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")
    ids = [
        cluster.submit(f"wait-{i}", comment="coshare: device-memory=1G device-threads=240")
        for i in range(10)
    ]
    first = json.loads(cluster.cycle("--output", "json").stdout)
    waiting = sorted(u["job"] for u in first["plan"]["unplaced"])
    assert len(first["apply"]["applied"]) == 8 and len(waiting) == 2
    assert sorted(first["apply"]["noted"]) == waiting
    # what the owner sees with Slurm's own tool
    for job_id in waiting:
        shown = cluster.run(
            "squeue", "--noheader", "--jobs", job_id, "-O", "admin_comment:300"
        ).stdout.strip()
        assert shown.startswith("coshare-waiting: no_room: needs 240 free device threads"), shown
    # unchanged reasons are not written again
    second = json.loads(cluster.cycle("--output", "json").stdout)
    assert second["apply"]["noted"] == []
    explained = cluster.run(
        str(BIN / "coshare"),
        "--config",
        str(cluster.config),
        "slurm",
        "explain",
        waiting[0],
        "--output",
        "json",
    )
    data = json.loads(explained.stdout)
    assert (data["state"], data["code"]) == ("waiting", "no_room")
    assert len(data["checks"]) == 8 and {c["limit"] for c in data["checks"]} == {"device threads"}
    assert data["remedies"][0].startswith("fits csl-n") and " once job " in data["remedies"][0]
    # a job placed later carries its placement instead
    placed = sorted(set(ids) - set(waiting))
    cluster.run("scancel", placed[0])
    third = json.loads(cluster.cycle("--output", "json").stdout)
    moved = [a["job"] for a in third["plan"]["assignments"]]
    assert len(moved) == 1 and moved[0] in waiting
    assert cluster.jobs()[moved[0]].admin_comment.startswith("coshare-placement;v=1;")
