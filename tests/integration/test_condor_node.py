"""coshare's node helpers through the real HTCondor pool: the job wrapper runs each managed job
in its own cgroup through the node daemon (deploy/condor/pool starts one per node, as root on
the host; the jobs run as the pool user inside the chroot).

Two annotated jobs planned onto one node by a real cycle: one allocates well past its
RequestMemory and is killed as a whole, held with the reason; its neighbour completes. Both
report disjoint Cpus_allowed_list, talk to the offload gate (from inside the chroot, with the
line protocol) and cannot get more threads than they declared; no job group is left behind.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from coshare.node.spec import parse_cpu_list

from tests.integration.condor_pool import CHROOT, NODE_SOCKETS, WORK, Pool, wait_for
from tests.integration.node_job import NODE_JOB, check_gate_replies

pytestmark = [pytest.mark.integration, pytest.mark.condor]

_tags = itertools.count()


def job_groups() -> list[str]:
    """Every coshare job group of the pool's nodes, in every cgroup hierarchy."""
    root = Path("/sys/fs/cgroup")
    return sorted(str(p) for p in root.glob("*/coshare-pool-node*/job-*"))


def job_records() -> list[str]:
    return sorted(str(p) for p in NODE_SOCKETS.glob("node*/jobs/job-*.json"))


def test_colocated_jobs_are_confined_and_a_hog_is_held_with_the_reason(live: Pool) -> None:
    script = CHROOT / WORK.lstrip("/") / "node_job.py"
    script.write_text(NODE_JOB)
    script.chmod(0o755)
    tag = f"{os.getpid()}-{next(_tags)}"
    hog_mark, calm_mark = f"{WORK}/hog-{tag}", f"{WORK}/calm-{tag}"
    common = {
        "executable": f"{WORK}/node_job.py",
        "request_memory": "100",
        "+CoshareDeviceMemory": "1024",
        "+CoshareDeviceThreads": "60",
    }
    hog = live.submit(1, **common, arguments=f"400 {hog_mark} {calm_mark}")
    calm = live.submit(1, **common, arguments=f"0 {calm_mark} {hog_mark}")
    report = live.cycle()
    placed = {a.job: a.node for a in report.plan.assignments}
    assert set(placed) == {f"{hog}.0", f"{calm}.0"}, report.plan.unplaced
    assert placed[f"{hog}.0"] == placed[f"{calm}.0"], f"not co-located: {placed}"

    def hold_reason() -> str:
        ad = live.jobs().get(f"{hog}.0", {})
        return str(ad.get("HoldReason", "")) if ad.get("JobStatus") == 5 else ""

    wait_for(hold_reason, 120, "the memory hog to be held")
    assert hold_reason().startswith(
        f"coshare killed job {hog}.0: its host memory went over the declared 100 MiB"
    )
    wait_for(lambda: f"{calm}.0" not in live.jobs(), 120, "the neighbour to complete")
    (calm_ad,) = live.history(calm)
    assert calm_ad["ExitCode"] == 0

    hog_out, calm_out = live.output(f"{hog}.0"), live.output(f"{calm}.0")
    assert "survived" not in hog_out and "done" not in hog_out  # killed as a whole
    assert calm_out.rstrip().endswith("done")
    err = (CHROOT / WORK.lstrip("/") / f"err.{hog}.0").read_text()
    assert f"coshare: coshare killed job {hog}.0" in err
    cpus = []
    for out in (hog_out, calm_out):
        _, seen, exported = out.splitlines()[0].split()
        assert seen == exported  # the kernel's list is the one the job was told
        cpus.append(set(parse_cpu_list(seen)))
        check_gate_replies(out)
    assert cpus[0] and cpus[1] and cpus[0].isdisjoint(cpus[1]), cpus
    wait_for(lambda: job_groups() == [] and job_records() == [], 30, "no job group left")
