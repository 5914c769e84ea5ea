"""Trial co-runs of the ``membw`` policy live on the real HTCondor pool,
with the measurements injected through the probe's interface
(``policy.membw.probe_inject_file``), and the real probe once through the node daemon's
control socket (``probe_via: socket``) and once with no connection to the node at all
(``probe_via: facts``: the node's daemon reads the request from the schedd and answers in
its facts, which the startd cron publishes):

- a bandwidth-heavy job (a memory-copying loop, program recorded at 0.6) and a compute-bound
  one (a spinning loop, unknown until its trial measures 0.05) run together on one node;
- two bandwidth-heavy ones do not: the second is suspended through the schedd after its
  trial (JobStatus 7, ``condor_suspend``'s), and continued by the cycle once the first ended.

The cycle is the one ``coshare condor cycle`` runs: plan and apply, then the trials' step.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from coshare.cli.cycles import step_trials
from coshare.cli.main import policy_options
from coshare.config import load_config
from coshare.cycle.run import run_cycle
from coshare.ledger.facts import parse_facts
from coshare.ledger.trials import TrialRecord, parse_trial
from coshare.policies import make_policy
from coshare.policies.membw import node_uses

from condor_addon.adapter import CondorAdapter
from condor_addon.view import node_job_id, parse_slots
from tests.integration.condor_pool import (
    CHROOT,
    CLIENT_CONFIG,
    COSHARE_BIN,
    WORK,
    Pool,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.condor]

# Both run for their own CPU seconds: time spent suspended does not count, as with work.
COPY = """#!/usr/bin/python3
import sys, time
block = bytearray(1 << 24)  # twice this (the copy) within request_memory 64 MB
while time.process_time() < float(sys.argv[1]):
    bytes(block)
"""
SPIN = """#!/usr/bin/python3
import sys, time
while time.process_time() < float(sys.argv[1]):
    pass
"""
RUNNING, SUSPENDED = 2, 7


@pytest.fixture
def live(condor_pool: Pool) -> Iterator[Pool]:
    condor_pool.remove_all()
    for name, text in (("copy.py", COPY), ("spin.py", SPIN)):
        script = CHROOT / WORK.lstrip("/") / name
        script.write_text(text)
        script.chmod(0o755)
    # A job removed by the test before leaves its claimed slot in the collector a little
    # longer; planned beside, it would read as a job of unknown use on that node.
    wait_for(
        lambda: not parse_slots(condor_pool.client.slot_ads(), {}).running,
        60,
        "the collector to show no claimed slot",
    )
    yield condor_pool
    condor_pool.remove_all()


class Cycles:
    """``coshare condor cycle`` with ``policy: membw`` and trials on (``init_s`` 2 s)."""

    def __init__(
        self,
        pool: Pool,
        tmp: Path,
        inject: dict[str, object] | None,
        max_suspend_s: float = 600,
        probe_via: str = "socket",
    ) -> None:
        path = tmp / "coshare.yaml"
        text = (
            f"condor: {{config_file: {CLIENT_CONFIG}, retry_wait_s: 0.1}}\n"
            "policy:\n  name: membw\n  membw:\n    trials: true\n    init_s: 2\n"
            f"    max_suspend_s: {max_suspend_s}\n"
            "    programs: {stream: 0.6}\n"
            f"    record_file: {tmp / 'measured.json'}\n"
            f"    probe_socket: {CHROOT}/run/coshare/{{node}}/control.sock\n"
            "    probe_timeout_s: 60\n"
            f"    probe_via: {probe_via}\n"
            "    facts_wait_s: 300\n"
        )
        if inject is not None:
            (tmp / "inject.json").write_text(json.dumps(inject))
            text += f"    probe_inject_file: {tmp / 'inject.json'}\n"
        path.write_text(text)
        self.config = load_config(path, environ={})
        self.pool = pool
        self.lines: list[str] = []
        self.running: list[tuple[str, str, str, str | None]] = []
        self.planned: list[str] = []
        self.uses: list[str] = []  # each cycle's bandwidth use of the nodes with jobs

    def __call__(self) -> None:
        adapter = CondorAdapter(self.pool.client, self.config)
        options = policy_options(self.config)
        policy = make_policy(self.config.policy.name, options)
        report = run_cycle(adapter, policy, adapter)
        assert not report.apply.failed, report.apply.failed
        assert report.snapshot is not None
        self.running = [(r.id, r.node, r.state, r.program) for r in report.snapshot.running]
        uses = node_uses(report.snapshot, options.membw_programs or {}, options.membw_init_s)
        self.uses.append(
            "; ".join(
                f"{n.name}: used {u.used:.2f} (probe {u.measured}) unknown {u.unknown} "
                f"of {u.jobs}, {n.cpu_milli // 1000} cores"
                for n, u in zip(report.snapshot.nodes, uses)
                if u.jobs or u.measured
            )
        )
        self.planned += [f"{a.job}->{a.node}" for a in report.plan.assignments]
        self.planned += [f"trial {t.job} beside {t.partners}" for t in report.plan.trials]
        self.planned += [f"{u.job} waits: {u.reason}" for u in report.plan.unplaced]
        self.lines += step_trials(self.config, adapter, report, dry_run=False)

    def until(self, check: object, timeout_s: float, what: str) -> None:
        """Run cycles until ``check`` holds (looked at before each cycle too)."""
        assert callable(check)

        def once() -> bool:
            if check():
                return True
            self()
            return bool(check())

        wait_for(once, timeout_s, what)


def submit(pool: Pool, script: str, program: str, seconds: int) -> str:
    cluster = pool.submit(
        1,
        executable=f"{WORK}/{script}",
        arguments=str(seconds),
        **{"+CoshareProgram": f'"{program}"'},
    )
    return f"{cluster}.0"


def status(pool: Pool, job: str) -> int | None:
    value = pool.jobs().get(job, {}).get("JobStatus")
    return value if isinstance(value, int) else None


def record(pool: Pool, job: str) -> TrialRecord | None:
    text = pool.jobs().get(job, {}).get("CoshareTrial")
    return parse_trial(job, text) if isinstance(text, str) else None


def start(pool: Pool, cycles: Cycles, script: str, program: str, seconds: int) -> str:
    """Submit a job, run cycles until it runs, and wait until the collector shows its claim
    by its GlobalJobId: before, a claimed slot without a job id reads as a job of unknown
    use beside a queue entry running there (the safe side, which then plans the next job
    elsewhere: a CI run placed the real-probe test's second job alone on node2 that way)."""
    job = submit(pool, script, program, seconds)
    cycles.until(lambda: status(pool, job) in (RUNNING, SUSPENDED), 120, f"job {job} to run")
    global_id = pool.jobs()[job]["GlobalJobId"]
    wait_for(
        lambda: global_id in {r.id for r in parse_slots(pool.client.slot_ads(), {}).running},
        60,
        f"the collector to show job {job}'s claim",
    )
    return job


def decided(pool: Pool, cycles: Cycles, job: str, timeout_s: float = 60) -> TrialRecord:
    try:
        cycles.until(
            lambda: (r := record(pool, job)) is not None and r.state not in ("placed", "measuring"),
            timeout_s,
            f"the trial of job {job} to be decided",
        )
    except AssertionError as exc:
        shown = {
            i: {k: v for k, v in ad.items() if k.startswith("Coshare") or k == "JobStatus"}
            for i, ad in pool.jobs().items()
        }
        raise AssertionError(
            f"{exc}; jobs: {shown}; trials said: {cycles.lines}; planned: "
            f"{cycles.planned[-12:]}; running: {cycles.running}; "
            f"bandwidth use: {cycles.uses[-4:]}"
        ) from None
    found = record(pool, job)
    assert found is not None, (pool.jobs(), cycles.lines)
    return found


def test_a_compute_bound_job_joins_a_bandwidth_heavy_one_after_its_trial(
    live: Pool, tmp_path: Path
) -> None:
    cycles = Cycles(live, tmp_path, {"programs": {"spin": 0.05}})
    heavy = start(live, cycles, "copy.py", "stream", 40)
    spin = start(live, cycles, "spin.py", "spin", 30)
    kept = decided(live, cycles, spin)
    assert (kept.state, kept.share, kept.partners) == ("kept", 0.05, (heavy,)), (
        cycles.lines,
        cycles.running,
    )
    jobs = live.jobs()
    assert jobs[heavy]["CosharePlacedNode"] == jobs[spin]["CosharePlacedNode"]
    assert status(live, heavy) == status(live, spin) == RUNNING  # co-scheduled
    assert json.loads((tmp_path / "measured.json").read_text()) == {"programs": {"spin": 0.05}}


def test_a_second_bandwidth_heavy_job_is_suspended_and_continued_when_the_first_ends(
    live: Pool, tmp_path: Path
) -> None:
    cycles = Cycles(live, tmp_path, {"programs": {"heavy": 0.6}})
    first = start(live, cycles, "copy.py", "stream", 25)
    second = start(live, cycles, "copy.py", "heavy", 8)
    held = decided(live, cycles, second)
    assert (held.state, held.share, held.why, held.partners) == (
        "suspended",
        0.6,
        "over_limit",
        (first,),
    ), cycles.lines
    assert status(live, second) == SUSPENDED  # through the schedd, not a silent freeze
    assert status(live, first) == RUNNING
    cycles.until(
        lambda: status(live, first) is None or status(live, first) == 4, 120, "the first job to end"
    )
    cycles.until(lambda: status(live, second) != SUSPENDED, 60, "the second to continue")
    resumed = record(live, second)
    assert resumed is None or (resumed.state, resumed.why) == ("resumed", "partners_ended"), (
        cycles.lines
    )
    assert any(f"job {second}: job {first} ended; resumed" in line for line in cycles.lines), (
        cycles.lines
    )
    wait_for(lambda: status(live, second) in (None, 4), 120, "the continued job to finish")


def test_a_job_suspended_longer_than_max_suspend_s_is_requeued_with_the_reason(
    live: Pool, tmp_path: Path
) -> None:
    cycles = Cycles(live, tmp_path, {"programs": {"heavy3": 0.6}}, max_suspend_s=3)
    first = start(live, cycles, "copy.py", "stream", 40)
    second = start(live, cycles, "copy.py", "heavy3", 8)
    assert decided(live, cycles, second).state == "suspended"
    try:
        cycles.until(lambda: status(live, second) == 1, 60, "the suspended job to be idle")
    except AssertionError as exc:
        shown = {
            k: v
            for k, v in live.jobs().get(second, {}).items()
            if k.startswith("Coshare") or k in ("JobStatus", "HoldReason")
        }
        raise AssertionError(f"{exc}: {shown}; {cycles.lines}") from None
    ad = live.jobs()[second]
    assert ad.get("CosharePlacedNode") is None and ad.get("CoshareTrial") is None, ad
    reason = str(ad.get("CoshareWaitReason"))
    # The requeue's reason, replaced by the plan's own once a cycle has planned it again.
    assert reason.startswith("trial: suspended for ") or "memory bandwidth" in reason, reason
    assert any(
        "longer than policy.membw.max_suspend_s 3; requeued" in line for line in cycles.lines
    ), cycles.lines
    assert status(live, first) == RUNNING


def test_the_real_probe_through_the_nodes_daemon(live: Pool, tmp_path: Path) -> None:
    """The real probe once through HTCondor too: the node daemon knows the jobs by their
    node ids (GlobalJobId), freezes the first, probes its cores, thaws it."""
    env = {**os.environ, "COSHARE_CONFIG": str(CHROOT / "pool" / "coshare" / "node1.yaml")}
    init = subprocess.run(
        [f"{COSHARE_BIN}/coshare", "node", "probe", "membw", "--init"],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    cycles = Cycles(live, tmp_path, None)
    heavy = start(live, cycles, "copy.py", "stream", 40)
    other = start(live, cycles, "copy.py", "mystery", 20)
    done = decided(live, cycles, other)
    assert done.share is not None and 0 <= done.share <= 1, (done, cycles.lines)
    over = done.share + 0.6 > 0.9 + 1e-9
    assert (done.state, done.why) == (
        ("suspended", "over_limit") if over else ("kept", "within_limit")
    ), cycles.lines
    assert status(live, other) == (SUSPENDED if over else RUNNING)
    ad = live.jobs()[heavy]
    assert ad["CosharePlacedNode"] == "node1" and status(live, heavy) == RUNNING
    local = node_job_id(str(ad["GlobalJobId"]))
    freezer = Path("/sys/fs/cgroup/freezer") / "coshare-pool-node1" / f"job-{local}"
    assert (freezer / "freezer.state").read_text().strip() == "THAWED"
    print(
        f"real probe (HTCondor): job {other} measured {done.share:.3f} beside job {heavy} "
        f"({done.state})"
    )


def test_the_real_probe_through_the_nodes_facts(live: Pool, tmp_path: Path) -> None:
    """``probe_via: facts``: nothing connects the planner to the node. The cycle writes the
    trial's ``measuring`` record (the request); node1's daemon reads it from the schedd,
    freezes the first job, probes, thaws it, and writes the answer into its facts; the
    startd cron publishes them (every 60 s: the execute snippet's period); the cycle reads
    the answer from the machine ad and keeps or suspends the job by it."""
    env = {**os.environ, "COSHARE_CONFIG": str(CHROOT / "pool" / "coshare" / "node1.yaml")}
    init = subprocess.run(
        [f"{COSHARE_BIN}/coshare", "node", "probe", "membw", "--init"],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    cycles = Cycles(live, tmp_path, None, probe_via="facts")
    # CPU seconds, more than the answer can take to come (a cron period and the updates)
    # on a machine others share.
    heavy = start(live, cycles, "copy.py", "stream", 400)
    other = start(live, cycles, "copy.py", "mystery2", 300)
    done = decided(live, cycles, other, timeout_s=240)
    assert done.share is not None and 0 <= done.share <= 1, (done, cycles.lines)
    over = done.share + 0.6 > 0.9 + 1e-9
    assert (done.state, done.why) == (
        ("suspended", "over_limit") if over else ("kept", "within_limit")
    ), cycles.lines
    assert status(live, other) == (SUSPENDED if over else RUNNING)
    # It waited for the answer in measuring (the cycles said so) ...
    pending = [
        line for line in cycles.lines if f"job {other}: its trial's probe is pending" in line
    ]
    assert pending, cycles.lines
    # ... and the answer it decided by is the one node1 published for its request.
    ads = live.jobs()
    assert ads[heavy]["CosharePlacedNode"] == ads[other]["CosharePlacedNode"] == "node1"
    local = node_job_id(str(ads[other]["GlobalJobId"]))
    published = [
        t
        for a in live.client.slot_ads()
        if a.get("CoshareNodeName") == "node1" and isinstance(a.get("CoshareNodeFacts"), str)
        for t in parse_facts(str(a["CoshareNodeFacts"])).trials
        if t.job == local
    ]
    assert published and {t.share for t in published} == {done.share}, (published, done)
    assert status(live, heavy) == RUNNING
    freezer = (
        Path("/sys/fs/cgroup/freezer")
        / "coshare-pool-node1"
        / f"job-{node_job_id(str(ads[heavy]['GlobalJobId']))}"
    )
    assert (freezer / "freezer.state").read_text().strip() == "THAWED"
    answers = json.loads((CHROOT / "run" / "coshare" / "node1" / "trials.json").read_text())
    assert answers["answers"][local][0] == published[0].at_s  # probed once, for that request
    waited = pending[-1].split("asked ")[1].split(" s ago")[0]
    print(
        f"real probe via facts (HTCondor): job {other} measured {done.share:.3f} beside job "
        f"{heavy} ({done.state}) after {len(pending)} pending cycle(s), the last {waited} s "
        "after the request"
    )
