"""Trial co-runs of the ``membw`` policy live on the real Slurm cluster.

Only node csl-n1 takes jobs here (the others are drained for the test), so every second job
is tried beside the first. The measurements are injected through the probe's interface
(``policy.membw.probe_inject_file``: this 2-core machine's bandwidth figures are noise), and
the real probe runs once, end to end, through the node daemon's TRIAL request:

- a bandwidth-heavy job (a numpy streaming kernel, program recorded at 0.6) and a
  compute-bound one (a spinning loop, unknown until its trial measures 0.05) run together,
  and the next job of the spinning program joins without a trial;
- two bandwidth-heavy ones do not: the second is suspended by ``scontrol suspend`` after its
  trial (Slurm says SUSPENDED), and resumed by the cycle after the first ended;
- the real probe: the node daemon freezes the first job, probes its cores, thaws it, and the
  cycle keeps or suspends the second by what was measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from coshare.ledger.trials import TrialRecord, parse_trial

from slurm_addon.placement import trial_field

from .cluster import BIN, Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

OTHERS = "csl-n2,csl-n3,csl-n4"
STREAM = (
    f'{BIN}/python -c "import numpy as np, time\n'
    "a = np.ones(1 << 23); end = time.time() + {s}\n"
    'while time.time() < end: a.sum()"'
)
#: The same kernel for its own CPU seconds: time spent suspended does not count, so a job
#: resumed after its trial still has work left, as a real one has (on wall-clock time it ended
#: the moment it was resumed, and in one CI run before the cycle could record the resume).
STREAM_CPU = (
    f'{BIN}/python -c "import numpy as np, time\n'
    "a = np.ones(1 << 23)\n"
    'while time.process_time() < {s}: a.sum()"'
)
SPIN = 'end=$(( $(date +%s) + {s} )); while [ "$(date +%s)" -lt "$end" ]; do :; done'


@pytest.fixture
def one_node(cluster: Cluster) -> Iterator[Cluster]:
    cluster.run(
        "scontrol", "update", f"NodeName={OTHERS}", "State=DRAIN", "Reason=coshare trial test"
    )
    try:
        yield cluster
    finally:
        cluster.run("scancel", "--quiet", "--partition=main", check=False)
        cluster.run("scontrol", "update", f"NodeName={OTHERS}", "State=RESUME", check=False)


def trials_cluster(
    cluster: Cluster,
    tmp: Path,
    inject: dict[str, object] | None,
    max_suspend_s: float = 600,
    probe_via: str = "socket",
) -> Cluster:
    """The cluster with ``policy: membw`` and trials on (``init_s`` 2 s); the real probe
    sent from here (``probe_via: socket``) or as a step of the job on its node (``step``)."""
    tmp.chmod(0o755)
    lines = [
        "policy:",
        "  name: membw",
        "  membw:",
        "    trials: true",
        "    init_s: 2",
        f"    max_suspend_s: {max_suspend_s}",
        "    programs: {stream: 0.6}",
        f"    record_file: {tmp / 'measured.json'}",
        f"    probe_socket: {cluster.dir}/node/{{node}}/control.sock",
        "    probe_timeout_s: 60",
        f"    probe_via: {probe_via}",
        f"    probe_command: {BIN / 'coshare'}",
    ]
    if inject is not None:
        (tmp / "inject.json").write_text(json.dumps(inject))
        lines.append(f"    probe_inject_file: {tmp / 'inject.json'}")
    trial = Cluster(cluster.dir)
    trial.config = write_config(cluster, "\n".join(lines) + "\n")
    return trial


def submit(cluster: Cluster, name: str, program: str, body: str, seconds: int) -> str:
    return cluster.submit(
        name, comment=f"coshare: program={program}", sleep_s=0, extra=body.format(s=seconds)
    )


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s: {what}"
        time.sleep(0.5)


def cycle(cluster: Cluster) -> str:
    done = cluster.cycle()
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def record(cluster: Cluster, job: str) -> TrialRecord | None:
    text = trial_field(cluster.jobs()[job].admin_comment)
    return None if text is None else parse_trial(job, text)


def state(cluster: Cluster, job: str) -> str:
    return cluster.jobs()[job].state


def cycles_until(cluster: Cluster, check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Run cycles as cron would until ``check`` holds."""

    def once() -> bool:
        cycle(cluster)
        return check()

    wait_for(once, timeout_s, what)


def start(cluster: Cluster, name: str, program: str, body: str, seconds: int) -> str:
    """Submit a job and run cycles until it started (placed by coshare on csl-n1; a trial
    may have suspended it already)."""
    job = submit(cluster, name, program, body, seconds)
    cycles_until(
        cluster, lambda: state(cluster, job) in ("RUNNING", "SUSPENDED"), 60, f"{name} to run"
    )
    assert cluster.jobs()[job].nodes == ("csl-n1",)
    return job


def measure(cluster: Cluster, job: str) -> TrialRecord:
    """Run cycles until the job's trial has been decided; its record then (looked at before
    each cycle: the one that decides may have run already, and the next may requeue it)."""
    said: list[str] = []

    def decided() -> TrialRecord | None:
        found = record(cluster, job)
        if found is not None and found.state not in ("placed", "measuring"):
            return found
        said.append(cycle(cluster))
        return None

    try:
        found = wait_for(decided, 60, f"the trial of job {job} to be decided")
    except AssertionError as exc:
        seen = {
            i: (j.state, j.nodes, j.admin_comment)
            for i, j in cluster.jobs().items()
            if j.phase != "ended"
        }
        lines = [line for out in said for line in out.splitlines() if "cycle (" not in line]
        raise AssertionError(f"{exc}; jobs: {seen}; cycles said: {lines[-12:]}") from None
    assert isinstance(found, TrialRecord)
    return found


def test_a_compute_bound_job_joins_a_bandwidth_heavy_one_after_its_trial(
    one_node: Cluster, tmp_path: Path
) -> None:
    cluster = trials_cluster(one_node, tmp_path, {"programs": {"spin": 0.05}})
    heavy = start(cluster, "stream", "stream", STREAM, 40)
    spin = start(cluster, "spin", "spin", SPIN, 30)
    kept = measure(cluster, spin)
    assert (kept.state, kept.share, kept.why, kept.partners) == (
        "kept",
        0.05,
        "within_limit",
        (heavy,),
    )
    assert state(cluster, heavy) == state(cluster, spin) == "RUNNING"  # co-scheduled
    assert json.loads((tmp_path / "measured.json").read_text()) == {"programs": {"spin": 0.05}}
    # The next job of the measured program joins without a trial.
    again = start(cluster, "spin2", "spin", SPIN, 5)
    assert record(cluster, again) is None


def test_a_second_bandwidth_heavy_job_is_suspended_and_resumed_when_the_first_ends(
    one_node: Cluster, tmp_path: Path
) -> None:
    cluster = trials_cluster(one_node, tmp_path, {"programs": {"heavy": 0.6}})
    first = start(cluster, "stream", "stream", STREAM, 25)
    second = start(cluster, "heavy", "heavy", STREAM_CPU, 8)
    held = measure(cluster, second)
    assert (held.state, held.share, held.why, held.partners) == (
        "suspended",
        0.6,
        "over_limit",
        (first,),
    )
    assert state(cluster, second) == "SUSPENDED"  # through Slurm, not a silent freeze
    assert state(cluster, first) == "RUNNING"
    # While the first runs, the second stays suspended; once it ended, the cycle resumes it.
    cycles_until(cluster, lambda: state(cluster, first) == "COMPLETED", 90, "the first job to end")
    cycles_until(
        cluster, lambda: state(cluster, second) != "SUSPENDED", 30, "the second job to be resumed"
    )
    resumed = record(cluster, second)
    assert resumed is not None and (resumed.state, resumed.why) == ("resumed", "partners_ended")
    wait_for(lambda: state(cluster, second) == "COMPLETED", 60, "the resumed job to finish")


def test_a_job_suspended_longer_than_max_suspend_s_is_requeued_with_the_reason(
    one_node: Cluster, tmp_path: Path
) -> None:
    # A program of its own: the records of finished jobs still in the queue (MinJobAge)
    # remember what the other tests measured, and a measured program gets no trial.
    cluster = trials_cluster(one_node, tmp_path, {"programs": {"heavy3": 0.6}}, max_suspend_s=3)
    first = start(cluster, "stream", "stream", STREAM, 40)
    second = start(cluster, "heavy3", "heavy3", STREAM, 8)
    assert record(cluster, second) is not None
    assert measure(cluster, second).state == "suspended"
    cycles_until(
        cluster,
        lambda: cluster.jobs()[second].phase == "pending",
        60,
        "the suspended job to be requeued",
    )
    job = cluster.jobs()[second]
    assert job.held and trial_field(job.admin_comment) is None
    assert job.admin_comment.startswith("coshare-waiting: "), job.admin_comment
    assert job.admin_comment.startswith("coshare-waiting: trial: suspended for "), job.admin_comment
    assert (
        f"beside job {first}, longer than policy.membw.max_suspend_s 3; requeued"
        in job.admin_comment
    )
    # Slurm makes a requeued job eligible again only after its own delay (its begin time):
    # until then coshare leaves it waiting; then it plans it again, and as its program is
    # measured now (0.6) it waits for bandwidth beside the first job instead of a new trial.
    cycle(cluster)
    job = cluster.jobs()[second]
    assert job.phase == "pending" and job.held, job
    if job.eligible_time_s > time.time():
        assert "max_suspend_s 3; requeued" in job.admin_comment, job.admin_comment
    else:
        assert "memory bandwidth" in job.admin_comment, job.admin_comment
    print(f"requeued job {second}: eligible again in {job.eligible_time_s - time.time():.0f} s")
    assert state(cluster, first) == "RUNNING"


@pytest.mark.parametrize("probe_via", ["socket", "step"])
def test_the_real_probe_freezes_measures_and_thaws_end_to_end(
    one_node: Cluster, tmp_path: Path, probe_via: str
) -> None:
    """``socket``: the planner's host asks the node daemon; ``step``: ``srun --jobid
    --overlap`` runs ``coshare node trial`` on the job's node, the only path between a
    central manager and its nodes on a real cluster."""
    cluster = trials_cluster(one_node, tmp_path, None, probe_via=probe_via)
    env = {**cluster.env, "COSHARE_CONFIG": str(cluster.dir / "node" / "csl-n1" / "coshare.yaml")}
    init = subprocess.run(
        [str(BIN / "coshare"), "node", "probe", "membw", "--init"],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    heavy = start(cluster, "stream", "stream", STREAM, 40)
    # A program of its own per variant: the first variant's finished job still in the queue
    # (MinJobAge) remembers what it measured, and a measured program gets no trial.
    other = start(cluster, "mystery", f"mystery-{probe_via}", STREAM, 20)
    assert record(cluster, other) is not None, "not placed as a trial"
    decided = measure(cluster, other)
    # Whatever this noisy machine measured, it was measured, and the rule decided by it.
    assert decided.share is not None and 0 <= decided.share <= 1, decided
    over = decided.share + 0.6 > 0.9 + 1e-9
    assert (decided.state, decided.why) == (
        ("suspended", "over_limit") if over else ("kept", "within_limit")
    )
    assert state(cluster, other) == ("SUSPENDED" if over else "RUNNING")
    freezer = Path("/sys/fs/cgroup/freezer") / "coshare-slurm-csl-n1" / f"job-{heavy}"
    assert (freezer / "freezer.state").read_text().strip() == "THAWED"
    assert state(cluster, heavy) == "RUNNING"
    print(
        f"real probe: job {other} measured {decided.share:.3f} beside job {heavy} "
        f"({decided.state}) on {os.cpu_count()} cores"
    )
