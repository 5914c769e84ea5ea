"""coshare's node helpers through the real Slurm cluster (local-cluster --coshare-bin: one root
node daemon per node, coshare's Prolog/Epilog as root, coshare-launch as the TaskProlog).

Two annotated jobs of an unprivileged user (uid 65534), planned onto one node by a real
cycle: one allocates well past its --mem and is killed as a whole (Slurm records it FAILED;
its error file and its accounting record's AdminComment say why); its neighbour completes.
Both report disjoint Cpus_allowed_list, get their declared threads from the offload gate and
no more, and no coshare job group or record is left afterwards.

A placed job keeps its placement: its owner cannot move it or make it larger with
``scontrol update`` (job_submit.lua), and when it starts on another node anyway (an operator
moved it) coshare's Prolog refuses it, with the reason in its output. A task of one job cannot
join another job of the same user, nor start a job of its own, over the control socket.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from coshare.node.spec import parse_cpu_list

from slurm_addon.placement import Placement, format_placement, kill_reason

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
    script.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                f"#SBATCH --job-name={name}",
                '#SBATCH --comment="coshare: device-memory=1000 device-threads=60"',
                "#SBATCH --mem=100M",
                f"#SBATCH --output={work}/%j.out",
                f"#SBATCH --error={work}/%j.err",
                f"exec /usr/bin/python3 {work}/node_job.py {' '.join(args)}",
            ]
        )
        + "\n"
    )
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
    wait_until(
        lambda: all(cluster.jobs()[j].phase == "ended" for j in (hog, calm)),
        120,
        "both jobs to end",
    )
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
    wait_until(
        lambda: job_groups() == [] and not list(cluster.dir.glob("node/*/jobs/*.json")),
        30,
        "no job group left",
    )


def submit_script(cluster: Cluster, work: Path, name: str, body: str, *options: str) -> str:
    """An sbatch script of the unprivileged user, its output in ``work/<id>.out``."""
    script = work / f"{name}.sh"
    lines = ["#!/bin/sh", f"#SBATCH --job-name={name}", f"#SBATCH --output={work}/%j.out"]
    script.write_text("\n".join([*lines, *options, body]) + "\n")
    script.chmod(0o755)
    out = cluster.run("sbatch", "--parsable", f"--chdir={work}", str(script), user=USER)
    return out.stdout.strip().split(";")[0]


def user_work(cluster: Cluster) -> Path:
    work = cluster.dir / "user-jobs"
    work.mkdir(exist_ok=True)
    work.chmod(0o1777)
    return work


def show_job(cluster: Cluster, job: str) -> str:
    return cluster.run("scontrol", "show", "job", job).stdout


#: What the owner of a placed, pending job tried to change (all accepted by Slurm 22.05 for an
#: ordinary pending job of its owner; see deploy/slurm/job_submit.lua).
PLACEMENT_UPDATES = [
    "ReqNodeList=csl-n2",
    "NodeList=csl-n2",
    "ExcNodeList=csl-n1",
    "NumNodes=2",
    "Partition=main",
    "NumCPUs=2",
    "NumTasks=2",
    "CPUsPerTask=2",
    "MinCPUsNode=2",
    "MinMemoryNode=50",
    "Gres=gpu:1",
    "TresPerNode=gres:gpu:1",
]


def test_a_placed_job_keeps_its_node_and_size_and_is_refused_elsewhere(
    cluster: Cluster,
) -> None:
    work = user_work(cluster)
    job = submit_script(
        cluster,
        work,
        "pinned",
        "echo ran; sleep 1",
        '#SBATCH --comment="coshare: device-memory=1000 device-threads=60"',
        "#SBATCH --mem=100M",
    )
    # Placed on csl-n1 as the cycle writes it (ReqNodeList and the operator's AdminComment),
    # released, and kept pending there: csl-n1 is drained.
    placement = format_placement(Placement("csl-n1", ("0",), int(time.time()), 1000, 60))
    cluster.run(
        "scontrol", "update", f"JobId={job}", "ReqNodeList=csl-n1", f"AdminComment={placement}"
    )
    cluster.run("scontrol", "update", "NodeName=csl-n1", "State=DRAIN", "Reason=coshare-test")
    try:
        cluster.run("scontrol", "release", job)
        for update in PLACEMENT_UPDATES:
            done = cluster.run("scontrol", "update", f"JobId={job}", update, check=False, user=USER)
            assert done.returncode != 0, f"the owner changed {update} of placed job {job}"
            assert "Access/permission denied" in done.stderr, done.stderr
        renamed = cluster.run(
            "scontrol", "update", f"JobId={job}", "JobName=renamed", check=False, user=USER
        )
        assert renamed.returncode == 0, renamed.stderr  # what the placement did not plan for
        shown = show_job(cluster, job)
        assert "JobName=renamed" in shown and "ReqNodeList=csl-n1 " in shown
        assert "ExcNodeList=(null)" in shown and "NumNodes=1 " in shown, shown
        assert "NumCPUs=1 " in shown and "MinMemoryNode=100M" in shown, shown
        assert cluster.jobs()[job].phase == "pending"
        # An operator moves it anyway: it starts on csl-n2, and coshare's Prolog refuses it.
        cluster.run("scontrol", "update", f"JobId={job}", "ReqNodeList=csl-n2")
    finally:
        cluster.run("scontrol", "update", "NodeName=csl-n1", "State=RESUME")
    wait_until(lambda: cluster.jobs()[job].phase == "ended", 60, "the moved job to end")
    ended = cluster.jobs()[job]
    assert ended.nodes == ("csl-n2",) and ended.state == "FAILED", ended
    out = (work / f"{job}.out").read_text()
    assert "ran" not in out, out
    assert (
        f"coshare: job {job} cannot run on csl-n2: job {job} was placed on csl-n1 but "
        "starts on csl-n2; coshare planned its devices and limits for csl-n1 only"
    ) in out
    assert job_groups() == []


#: Run by a job of the same user as a placed job: asks its node's daemon to move this process
#: into the other job's group, and to start a job of its own.
INTRUDER = """import socket, sys
for line in sys.argv[2:]:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sys.argv[1])
        s.sendall(line.encode() + b"\\n")
        print(line.split()[0], "->", s.makefile().readline().strip(), flush=True)
"""


def test_a_task_of_one_job_cannot_join_another_or_start_a_job(cluster: Cluster) -> None:
    work = user_work(cluster)
    (work / "intruder.py").write_text(INTRUDER)
    placed = submit_script(
        cluster,
        work,
        "placed",
        "sleep 60",
        '#SBATCH --comment="coshare: device-memory=1000 device-threads=60"',
        "#SBATCH --mem=100M",
    )
    assert cluster.cycle().returncode == 0
    wait_until(lambda: cluster.jobs()[placed].phase == "active", 60, "the placed job to run")
    node = cluster.jobs()[placed].nodes[0]
    control = cluster.dir / "node" / node / "control.sock"
    # Its batch step execs python: the process asking is a direct child of slurmstepd, which
    # is titled with this other job ("slurmstepd: [N.batch]"), and runs as the same user.
    other = submit_script(
        cluster,
        work,
        "other",
        f"exec /usr/bin/python3 -I {work}/intruder.py {control} 'JOIN job={placed}' "
        "'START job=mine cores=1 memory_mib=100'",
        f"#SBATCH --nodelist={node}",
        "#SBATCH --mem=50M",
    )
    wait_until(lambda: cluster.jobs()[other].phase == "ended", 60, "the other job to end")
    replies = (work / f"{other}.out").read_text().splitlines()
    assert replies[0].startswith(f"JOIN -> ERR not_allowed job {placed}: process "), replies
    assert replies[0].endswith(f"(slurmstepd-wlm, uid 0), which serves job {other}"), replies
    assert replies[1].startswith("START -> ERR not_launcher job mine: process "), replies
    assert replies[1].endswith(
        f"is a task of Slurm job {other}; Slurm jobs are set up by "
        "coshare's Prolog (root), never by a task"
    ), replies
    groups = [g for g in job_groups() if g.endswith(f"/job-{placed}")]
    assert groups, job_groups()
    for group in groups:  # only the placed job's own processes are in its group
        for pid in Path(group, "cgroup.procs").read_text().split():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue  # ended meanwhile
            assert f"SLURM_JOB_ID={placed}".encode() in environ, pid
    cluster.run("scancel", placed)
