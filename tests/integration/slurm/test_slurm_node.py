"""coshare's node helpers through the real Slurm cluster (local-cluster --coshare-bin: one root
node daemon per node, coshare's Prolog/Epilog as root, coshare-launch as the TaskProlog).

Two annotated jobs of an unprivileged user (uid 65534), planned onto one node by a real
cycle: one allocates well past its --mem and is killed as a whole (Slurm records it FAILED;
its error file and its accounting record's AdminComment say why); its neighbour completes.
Both report disjoint Cpus_allowed_list, get their declared threads from the offload gate and
no more, and no coshare job group or record is left afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from coshare.node.spec import parse_cpu_list

from slurm_addon.placement import kill_reason

from ..node_job import NODE_JOB, check_gate_replies
from .cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
USER = 65534


def wait_until(check: object, timeout_s: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s: {what}"
        time.sleep(0.5)


def job_groups() -> list[str]:
    return sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/coshare-slurm-csl-n*/job-*"))


def submit_as_user(cluster: Cluster, work: Path, name: str, *args: str) -> str:
    script = work / f"{name}.sh"
    script.write_text("\n".join([
        "#!/bin/sh",
        f"#SBATCH --job-name={name}",
        '#SBATCH --comment="coshare: device-memory=1000 device-threads=60"',
        "#SBATCH --mem=100M",
        f"#SBATCH --output={work}/%j.out",
        f"#SBATCH --error={work}/%j.err",
        f"exec /usr/bin/python3 {work}/node_job.py {' '.join(args)}",
    ]) + "\n")  # fmt: skip
    script.chmod(0o755)
    out = cluster.run("sbatch", "--parsable", f"--chdir={work}", str(script), user=USER)
    return out.stdout.strip().split(";")[0]


def test_colocated_jobs_are_confined_and_a_hog_is_killed_with_the_reason(
    cluster: Cluster,
) -> None:
    work = cluster.dir / "user-jobs"
    work.mkdir(exist_ok=True)
    work.chmod(0o1777)
    (work / "node_job.py").write_text(NODE_JOB)
    marks = (f"{work}/hog-{time.monotonic_ns()}", f"{work}/calm-{time.monotonic_ns()}")
    hog = submit_as_user(cluster, work, "node-hog", "400", *marks)
    calm = submit_as_user(cluster, work, "node-calm", "0", *reversed(marks))
    assert cluster.cycle().returncode == 0
    wait_until(lambda: all(cluster.jobs()[j].phase == "ended" for j in (hog, calm)), 120,
               "both jobs to end")  # fmt: skip
    records = cluster.sacct([hog, calm])
    assert records[hog].node == records[calm].node, f"not co-located: {records}"
    assert records[calm].state == "COMPLETED", records[calm]
    assert records[hog].state == "FAILED", records[hog]  # killed by coshare, as a whole
    reason = f"coshare killed job {hog}: its host memory went over the declared 100 MiB"
    assert (work / f"{hog}.err").read_text().startswith(f"coshare: {reason}")
    # Slurm takes it into the accounting record only (the job has finished by the Epilog), and
    # sacctmgr folds what it stores to lower case.
    assert (kill_reason(records[hog].admin_comment) or "").startswith(reason.lower())
    assert kill_reason(records[calm].admin_comment) is None

    hog_out, calm_out = (work / f"{hog}.out").read_text(), (work / f"{calm}.out").read_text()
    assert "survived" not in hog_out and "done" not in hog_out
    assert calm_out.rstrip().endswith("done")
    cpus = []
    for out in (hog_out, calm_out):
        _, seen, exported = out.splitlines()[0].split()
        assert seen == exported  # the kernel's list is the one the TaskProlog exported
        cpus.append(set(parse_cpu_list(seen)))
        check_gate_replies(out)
    assert cpus[0] and cpus[1] and cpus[0].isdisjoint(cpus[1]), cpus
    wait_until(lambda: job_groups() == [] and not list(cluster.dir.glob("node/*/jobs/*.json")),
               30, "no job group left")  # fmt: skip
