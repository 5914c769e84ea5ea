"""Submit-to-start latency of annotated jobs with each way of starting coshare's cycle.

    flock /tmp/coshare-daemons.lock .venv/bin/python bench/trigger_latency.py \
        [--jobs 10] [--interval 30] [--negotiator-interval 60] [--seed 1]

Root. Starts the real local HTCondor pool (deploy/condor/pool, with coshare's node helpers
and NEGOTIATOR_INTERVAL = --negotiator-interval, HTCondor's default 60 s, instead of the
tests' 2 s) and then the real local Slurm cluster (deploy/slurm/local-cluster, 4 nodes x 2
devices, coshare's Prolog and node helpers), one after the other, and measures three settings:

  condor-timer     ``coshare condor cycle`` every --interval seconds from the start of the
                   last run, as deploy/condor/systemd/coshare-condor-cycle.timer does
                   (OnUnitActiveSec)
  condor-trigger   ``coshare condor trigger`` under the pool's condor_master
                   (deploy/condor/pool trigger-on), no timer
  slurm-timer      ``coshare slurm cycle`` --interval seconds after the last run ended, as
                   deploy/slurm/coshare-slurm-cycle.timer does (OnUnitInactiveSec)

In each, --jobs annotated jobs (1024 MiB and 60 threads of a device, 2 s of sleep) are
submitted one at a time, at random gaps of 0 to --interval seconds, so they arrive at every
phase of the timer and of the negotiator. HTCondor jobs are submitted through the bindings
followed by ``condor_reschedule``, which is what ``condor_submit`` does (SUBMIT_SEND_RESCHEDULE).
Latency is read from the schedulers' own records, in whole seconds: HTCondor's JobStartDate
minus QDate (condor_q / condor_history), Slurm's start_time minus submit_time (squeue --json;
the cluster keeps ended jobs for an hour, MinJobAge). Prints p50 / p95 / max per setting, the
negotiator's and Slurm's scheduling settings used, the cycles' exit statuses and the load
average. Every daemon it starts is stopped by pid (the deploy scripts' stop), also on failure
or SIGTERM. A figure, never an assertion: tests do not time anything.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import numpy as np
from coshare.config import CondorConfig

from condor_addon.client import CondorClient, open_client

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # this venv's coshare, as the integration tests use it
POOL_SCRIPT = ROOT / "deploy" / "condor" / "pool"
CLUSTER_SCRIPT = ROOT / "deploy" / "slurm" / "local-cluster"
CHROOT = Path(os.environ.get("CONDOR_POOL_CHROOT", "/var/lib/coshare/condor-chroot"))
CLIENT_CONFIG = CHROOT / "pool" / "client_config"
WORK = "/tmp/coshare-latency"  # inside the chroot: the jobs run there
POOL_UID = 4242
JOB_SLEEP_S = 2
DEVICE_MEMORY_MIB = 1024
DEVICE_THREADS = 60


@dataclass
class Setting:
    """One way of starting the cycle and what it gave."""

    name: str
    trigger: str
    scheduler: str  # the scheduler's intervals, as its configuration says
    latencies_s: list[float] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)
    cycle_statuses: list[int] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at start and end


class Timer:
    """Runs ``argv`` every ``period_s`` seconds in a thread, like a systemd timer: from the
    start of the last run (OnUnitActiveSec) or from its end (``from_end``, OnUnitInactiveSec).
    Never two at once; :meth:`stop` ends a run in progress by its pid."""

    def __init__(
        self, argv: Sequence[str], period_s: float, log: TextIO, *, from_end: bool
    ) -> None:
        self.argv = list(argv)
        self.period_s = period_s
        self.log = log
        self.from_end = from_end
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Timer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while True:
            started = time.monotonic()
            with self._lock:
                if self._stop.is_set():
                    return
                self._proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
            status = self._proc.wait()
            if self._stop.is_set():  # ended by stop(): not the cycle's own outcome
                return
            self.statuses.append(status)
            base = time.monotonic() if self.from_end else started
            if self._stop.wait(max(0.0, base + self.period_s - time.monotonic())):
                return

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()  # the cycle's own pid: its lock and the queue stay consistent
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join()


def raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the run through the ``finally`` blocks that stop the daemons."""
    raise SystemExit(f"stopped by signal {signum}")


def run(argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = 900) -> str:
    """Run ``argv``; its stdout (stderr shown on failure)."""
    done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def submit_spaced(
    jobs: int, max_gap_s: float, rng: random.Random, submit: Callable[[], str]
) -> list[str]:
    """Submit ``jobs`` jobs one at a time, each after a random gap; their ids."""
    ids = []
    for _ in range(jobs):
        time.sleep(rng.uniform(0, max_gap_s))
        ids.append(submit())
    return ids


def wait_for_starts(
    ids: list[str], deadline_s: float, read: Callable[[], dict[str, float]], setting: Setting
) -> None:
    """Poll ``read`` (job id -> latency of each started job) until every job in ``ids``
    started or ``deadline_s`` passed; record the latencies and the jobs that never started."""
    stop = time.monotonic() + deadline_s
    latencies: dict[str, float] = {}
    while time.monotonic() < stop:
        latencies = read()
        if set(ids) <= set(latencies):
            break
        time.sleep(1)
    setting.latencies_s = [latencies[i] for i in ids if i in latencies]
    setting.not_started = [i for i in ids if i not in latencies]


@contextmanager
def measured(setting: Setting) -> Iterator[Setting]:
    """Record the load average around a setting's run."""
    before = os.getloadavg()[0]
    yield setting
    setting.load = (before, os.getloadavg()[0])


# HTCondor


def pool(*args: str, negotiator_interval_s: int) -> str:
    env = {
        **os.environ,
        "CONDOR_POOL_COSHARE_BIN": str(BIN),
        "CONDOR_POOL_NEGOTIATOR_INTERVAL": str(negotiator_interval_s),
    }
    return run([str(POOL_SCRIPT), *args], env=env)


def condor_submit(client: CondorClient, htcondor: Any) -> str:
    """One annotated job, then condor_reschedule as condor_submit sends it; its id."""
    desc = {
        "executable": f"{WORK}/job.sh",
        "arguments": str(JOB_SLEEP_S),
        "initialdir": WORK,
        "transfer_executable": "false",
        "request_memory": "64",
        "output": f"{WORK}/out.$(Cluster)",
        "error": f"{WORK}/err.$(Cluster)",
        "+CoshareDeviceMemory": str(DEVICE_MEMORY_MIB),
        "+CoshareDeviceThreads": str(DEVICE_THREADS),
    }
    cluster = client.schedd().submit(htcondor.Submit(desc), count=1).cluster()
    client.reschedule()
    return f"{cluster}.0"


def condor_latencies(client: CondorClient, ids: list[str]) -> dict[str, float]:
    """JobStartDate - QDate of each started job in ``ids`` (queue and history)."""
    clusters = " || ".join(f"ClusterId == {i.split('.')[0]}" for i in ids)
    projection = ["ClusterId", "ProcId", "QDate", "JobStartDate"]
    ads: list[Any] = list(client.job_ads(clusters, tuple(projection)))
    ads += list(client.schedd().history(clusters, projection=projection))
    out = {}
    for ad in ads:
        if ad.get("JobStartDate") is not None:
            out[f"{ad['ClusterId']}.{ad['ProcId']}"] = float(ad["JobStartDate"] - ad["QDate"])
    return out


def remove_all(client: CondorClient, htcondor: Any) -> None:
    client.schedd().act(htcondor.JobAction.Remove, "true")
    stop = time.monotonic() + 60
    while client.job_ads("true", ("ClusterId",)) and time.monotonic() < stop:
        time.sleep(0.5)


def condor_settings(args: argparse.Namespace, rng: random.Random, work: Path) -> list[Setting]:
    """condor-timer and condor-trigger on one pool, started and stopped here."""
    try:  # a start that fails half-way is stopped too
        pool("start", negotiator_interval_s=args.negotiator_interval)
        jobs_dir = CHROOT / WORK.lstrip("/")
        jobs_dir.mkdir(parents=True, exist_ok=True)
        (jobs_dir / "job.sh").write_text('#!/bin/sh\nsleep "$1"\n')
        (jobs_dir / "job.sh").chmod(0o755)
        os.chown(jobs_dir, POOL_UID, POOL_UID)
        Path(WORK).mkdir(parents=True, exist_ok=True)  # the bindings check initialdir here
        client = open_client(CondorConfig(config_file=str(CLIENT_CONFIG), retry_wait_s=0.1))
        import htcondor2  # configured for the pool by open_client

        names = (
            "NEGOTIATOR_INTERVAL",
            "NEGOTIATOR_MIN_INTERVAL",
            "NEGOTIATOR_CYCLE_DELAY",
            "SCHEDD_INTERVAL",
        )
        values = pool(
            "exec", "condor_config_val", *names, negotiator_interval_s=args.negotiator_interval
        ).split()
        scheduler = ", ".join(f"{n} = {v} s" for n, v in zip(names, values, strict=True))
        # The negotiator's next cycle may start no sooner than its interval after the last.
        deadline_s = args.interval + 2 * args.negotiator_interval + 120
        config = work / "condor-timer.yaml"
        config.write_text(
            f"condor: {{config_file: {CLIENT_CONFIG}, lock_file: {work}/condor-cycle.lock}}\n"
        )
        timer = Setting(
            "condor-timer",
            f"coshare condor cycle every {args.interval:g} s (OnUnitActiveSec)",
            scheduler,
        )
        with (
            measured(timer),
            (work / "condor-timer.log").open("w") as log,
            Timer(
                [str(BIN / "coshare"), "--config", str(config), "condor", "cycle"],
                args.interval,
                log,
                from_end=False,
            ) as cycles,
        ):
            ids = submit_spaced(
                args.jobs, args.interval, rng, lambda: condor_submit(client, htcondor2)
            )
            wait_for_starts(ids, deadline_s, lambda: condor_latencies(client, ids), timer)
        timer.cycle_statuses = cycles.statuses
        remove_all(client, htcondor2)

        trigger = Setting(
            "condor-trigger",
            "coshare condor trigger under condor_master (trigger_lead_s 2, trigger_poll_s 1)",
            scheduler,
        )
        log_path = CHROOT / "pool" / "log" / "CoshareTriggerLog"
        log_start = log_path.stat().st_size if log_path.exists() else 0
        pool("trigger-on", negotiator_interval_s=args.negotiator_interval)
        try:
            with measured(trigger):
                ids = submit_spaced(
                    args.jobs, args.interval, rng, lambda: condor_submit(client, htcondor2)
                )
                wait_for_starts(ids, deadline_s, lambda: condor_latencies(client, ids), trigger)
        finally:
            pool("trigger-off", negotiator_interval_s=args.negotiator_interval)
        with log_path.open() as log_file:  # this run's part of the trigger's log
            log_file.seek(log_start)
            log_text = log_file.read()
        (work / "CoshareTriggerLog").write_text(log_text)
        trigger.cycle_statuses = [0] * log_text.count("INFO cycle done") + [1] * log_text.count(
            "cycle failed"
        )
        remove_all(client, htcondor2)
        return [timer, trigger]
    finally:
        pool("stop", negotiator_interval_s=args.negotiator_interval)


# Slurm


def slurm_setting(args: argparse.Namespace, rng: random.Random, work: Path) -> Setting:
    """slurm-timer on a cluster started and stopped here."""
    directory = Path(tempfile.mkdtemp(prefix="coshare-slurm-latency-", dir="/var/tmp"))
    directory.chmod(0o755)  # jobs of the cluster read slurm.conf and the munge socket in it
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
    try:
        run(
            [
                str(CLUSTER_SCRIPT),
                "start",
                str(directory),
                "--nodes",
                "4",
                "--devices",
                "2",
                "--coshare-bin",
                str(BIN),
            ]
        )
        shown = run(["scontrol", "show", "config"], env=env)
        params = next(
            (
                line.split("=", 1)[1].strip()
                for line in shown.splitlines()
                if line.startswith("SchedulerParameters")
            ),
            "",
        )
        default = "" if "sched_interval" in params else ", sched_interval = 60 s (default)"
        scheduler = f"SchedulerParameters = {params}{default}; slurmctld also schedules on events"
        script = directory / "latency-job.sh"
        script.write_text(
            "#!/bin/sh\n#SBATCH --output=/dev/null\n"
            f'#SBATCH --comment="coshare: device-memory={DEVICE_MEMORY_MIB} '
            f'device-threads={DEVICE_THREADS}"\nsleep {JOB_SLEEP_S}\n'
        )

        def submit() -> str:
            return run(["sbatch", "--parsable", str(script)], env=env).strip().split(";")[0]

        def latencies(ids: list[str]) -> dict[str, float]:
            out = {}
            for job in json.loads(run(["squeue", "--json"], env=env))["jobs"]:
                job_id = str(job["job_id"])
                # A pending job's start_time is only Slurm's estimate.
                if job_id in ids and job["job_state"] != "PENDING" and job["start_time"]:
                    out[job_id] = float(job["start_time"] - job["submit_time"])
            return out

        setting = Setting(
            "slurm-timer",
            f"coshare slurm cycle {args.interval:g} s after the last (OnUnitInactiveSec)",
            scheduler,
        )
        with (
            measured(setting),
            (work / "slurm-timer.log").open("w") as log,
            Timer(
                [
                    str(BIN / "coshare"),
                    "--config",
                    str(directory / "coshare.yaml"),
                    "slurm",
                    "cycle",
                ],
                args.interval,
                log,
                from_end=True,
            ) as cycles,
        ):
            ids = submit_spaced(args.jobs, args.interval, rng, submit)
            wait_for_starts(ids, args.interval + 180, lambda: latencies(ids), setting)
        setting.cycle_statuses = cycles.statuses
        return setting
    finally:
        subprocess.run(
            ["scancel", "--quiet", "--partition=main"], env=env, check=False, capture_output=True
        )
        subprocess.run([str(CLUSTER_SCRIPT), "stop", str(directory)], check=False, timeout=300)
        shutil.rmtree(directory, ignore_errors=True)


def report(settings: list[Setting]) -> None:
    print(
        f"\n{'setting':<15} {'jobs':>4} {'p50 s':>6} {'p95 s':>6} {'max s':>6}  "
        "cycles (failed)  load 1m  trigger"
    )
    for s in settings:
        values = np.array(s.latencies_s) if s.latencies_s else np.array([np.nan])
        p50, p95 = np.percentile(values, [50, 95])
        started = f"{len(s.latencies_s)}/{len(s.latencies_s) + len(s.not_started)}"
        failed = sum(1 for c in s.cycle_statuses if c != 0)
        cycles = f"{len(s.cycle_statuses)} ({failed})"
        print(
            f"{s.name:<15} {started:>4} {p50:>6.0f} {p95:>6.0f} {values.max():>6.0f}  "
            f"{cycles:<15}  {s.load[0]:.1f}-{s.load[1]:.1f}  {s.trigger}"
        )
    print()
    for s in settings:
        print(f"{s.name}: latencies {sorted(s.latencies_s)} s; scheduler: {s.scheduler}")
        if s.not_started:
            print(f"{s.name}: never started: {', '.join(s.not_started)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10, help="jobs per setting (10)")
    parser.add_argument(
        "--interval",
        type=float,
        default=30.0,
        help="timer period, seconds (30, the documented cycle.interval_s)",
    )
    parser.add_argument(
        "--negotiator-interval",
        type=int,
        default=60,
        help="HTCondor NEGOTIATOR_INTERVAL, seconds (60, HTCondor's default)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("condor", "slurm"), default=None)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the pool and the cluster need it")
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="coshare-trigger-latency-"))
    print(
        f"{args.jobs} annotated jobs per setting ({DEVICE_MEMORY_MIB} MiB, {DEVICE_THREADS} "
        f"threads, {JOB_SLEEP_S} s), gaps uniform 0-{args.interval:g} s; logs in {work}",
        flush=True,
    )
    settings = []
    if args.only != "slurm":
        settings += condor_settings(args, rng, work)
    if args.only != "condor":
        settings.append(slurm_setting(args, rng, work))
    report(settings)


if __name__ == "__main__":
    main()
