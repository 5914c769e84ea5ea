"""The benchmark grid behind docs/benchmarks.md: one command, one results file.

Sections (``--sections``, all by default):

- ``plan``: the CPU seconds and wall seconds of a whole ``coshare plan --output json``
  process (start-up, reading the snapshot, planning, printing), one fresh process per case:
  pending jobs 1k / 10k / 100k x devices 1k / 10k x the paper's Table I mix on Xeon Phis
  (``coshare.sim.applications``) / the modern GPU mix on 80 GB GPUs (``gpu_mix.py``) x an idle
  cluster / a busy one (half of a first knapsack plan still running,
  ``plan_scale.busy_snapshot``), under every policy (``coshare.policy_names``). A case that
  runs past ``--timeout`` seconds is stopped and recorded as such ("> N s" on the page).
- ``alibaba``: the Alibaba fragmentation benchmark's cost per policy (``alibaba_cost.py``).
- ``gate``: the offload gate's round trips beside its floor, the same clients against a server
  that answers every request at once (``gate_latency.py --floor``).
- ``slurm``: applying 1,000 placements to the local Slurm cluster beside its floor, one
  scontrol reading 1,000 update lines (``slurm_apply.py``; root, Slurm's packages).

The results go to one JSON file (``--output``, committed under bench/results/): the machine
(CPU model, cores, memory) and, per section, the commit, date, command, load average before
and after and the section's own wall time. ``--sections`` with an existing file replaces
only those sections (the others keep their own commit and load). docs/benchmarks.md is then
written from it by ``results_page.py`` (``make bench`` runs both).

    python bench/grid.py [--quick] [--sections plan,alibaba,gate,slurm] [--timeout 30]
                         [--policies a,b] [--output bench/results/grid.json]
                         [--slurm-lock FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coshare.model import Snapshot
from coshare.policy_names import POLICY_NAMES
from coshare.schema import snapshot_to_dict
from coshare.sim.applications import phi_cluster, table1_jobs
from gpu_mix import gpu_cluster, gpu_jobs
from plan_scale import busy_snapshot

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "grid.json"
SECTIONS = ("plan", "alibaba", "gate", "slurm")

JOBS = (1_000, 10_000, 100_000)
DEVICES = (1_000, 10_000)
MIXES = ("phi", "gpu")
SCENARIOS = ("idle", "busy")
#: ``--quick``: the plan grid's smaller half, one policy's Alibaba run, shorter gate loads.
QUICK_JOBS = (1_000, 10_000)
QUICK_DEVICES = (1_000,)
#: The policies of docs/alibaba.md's cost table.
ALIBABA_POLICIES = "sharepack,fgd,bestfit,knapsack,random,exclusive"
QUICK_ALIBABA_POLICIES = "sharepack"


def machine() -> dict[str, Any]:
    """The CPU model, cores and memory of this machine."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_mib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mib = int(line.split()[1]) // 1024
    return {"cpu_model": model, "cores": os.cpu_count(), "memory_mib": memory_mib}


def commit() -> str:
    """The checkout's commit, ``+dirty`` when it has uncommitted changes to tracked files
    (but for the results: a section run after another finds the first one's written)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def snapshot_of(mix: str, jobs: int, devices: int, scenario: str) -> dict[str, Any]:
    """The snapshot of one case, as JSON data (seeded: the same on every run)."""
    if mix == "phi":
        nodes = phi_cluster(devices, seed=1)

        def draw(n: int, seed: int) -> tuple[Any, ...]:
            return table1_jobs(n, seed)
    else:
        nodes = gpu_cluster(devices)
        draw = gpu_jobs
    snapshot = (
        Snapshot(nodes, (), draw(jobs, 2))
        if scenario == "idle"
        else busy_snapshot(nodes, jobs, draw)
    )
    return snapshot_to_dict(snapshot)


def timed(argv: list[str], timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` to its end or to ``timeout_s``: its CPU seconds (user + system, of this
    child alone), wall seconds and standard output. (Not its peak memory: Linux carries the
    parent's peak across fork and exec into the child's.)"""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
        deadline = start + timeout_s
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the session this call started
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "timed_out": timed_out,
            "returncode": proc.returncode,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "wall_s": round(wall, 3),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace")[-2000:],
        }


def plan_section(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Every case of the plan grid under every policy."""
    coshare = str(Path(sys.executable).parent / "coshare")
    config = folder / "empty.yaml"
    config.write_text("")
    env = {**os.environ, "COSHARE_CONFIG": str(config)}
    jobs, devices = (QUICK_JOBS, QUICK_DEVICES) if args.quick else (JOBS, DEVICES)
    policies = args.policies.split(",")
    rows = []
    for mix in MIXES:
        for device_count in devices:
            for job_count in jobs:
                for scenario in SCENARIOS:
                    name = f"{mix}-{job_count}-{device_count}-{scenario}"
                    path = folder / f"{name}.json"
                    if not path.exists():
                        data = snapshot_of(mix, job_count, device_count, scenario)
                        path.write_text(json.dumps(data))
                    running = len(json.loads(path.read_text()).get("running", []))
                    for policy in policies:
                        argv = [coshare, "plan", "--policy", policy, "--output", "json", str(path)]
                        got = timed(argv, args.timeout, env)
                        row: dict[str, Any] = {
                            "mix": mix,
                            "jobs": job_count,
                            "devices": device_count,
                            "scenario": scenario,
                            "running": running,
                            "policy": policy,
                            "timed_out": got["timed_out"],
                        }
                        if got["timed_out"]:
                            row["timeout_s"] = args.timeout
                        elif got["returncode"] != 0:
                            row["error"] = got["stderr"].strip().splitlines()[-1:]
                        else:
                            plan = json.loads(got["stdout"])
                            row["placed"] = len({a["job"] for a in plan["assignments"]})
                            row.update({k: got[k] for k in ("cpu_s", "wall_s")})
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    return {"timeout_s": args.timeout, "rows": rows}


def json_lines(argv: list[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run a bench script that prints one JSON object per result line (``--json``)."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)}: exit {done.returncode}: {done.stderr[-1500:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def alibaba_section(args: argparse.Namespace) -> dict[str, Any]:
    policies = QUICK_ALIBABA_POLICIES if args.quick else args.alibaba_policies
    argv = [sys.executable, str(BENCH / "alibaba_cost.py"), "--policies", policies, "--json"]
    return {"seed": 0, "rows": json_lines(argv)}


def gate_section(args: argparse.Namespace) -> dict[str, Any]:
    ops = "500" if args.quick else "2000"
    base = [sys.executable, str(BENCH / "gate_latency.py"), "--ops", ops, "--json"]
    cgroups = [] if os.geteuid() == 0 else ["--no-cgroups"]
    gate = json_lines([*base, *cgroups])
    floor = json_lines([*base, "--floor"])
    return {"ops": int(ops), "cgroups": not cgroups, "gate": gate, "floor": floor}


@contextlib.contextmanager
def locked(path: str | None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (the machine's Slurm lock) while inside."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def slurm_section(args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, str(BENCH / "slurm_apply.py"), "--workers", "4", "--json"]
    if os.geteuid() != 0:
        return {"skipped": "needs root (it starts the local Slurm cluster)"}
    with locked(args.slurm_lock):
        return {"rows": json_lines(argv)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller subset (see above)")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--policies", default=",".join(POLICY_NAMES))
    parser.add_argument("--alibaba-policies", default=ALIBABA_POLICIES)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per plan case")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--slurm-lock", default=None, help="a lock file to hold for Slurm")
    parser.add_argument("--dir", type=Path, default=None, help="keep the snapshots here")
    args = parser.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")

    results: dict[str, Any] = {}
    command = "python bench/grid.py " + shlex.join(sys.argv[1:])
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        folder = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        runners = {
            "plan": lambda: plan_section(args, folder),
            "alibaba": lambda: alibaba_section(args),
            "gate": lambda: gate_section(args),
            "slurm": lambda: slurm_section(args),
        }
        for section in sections:
            run = {
                "commit": commit(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": command.strip(),
                "quick": args.quick,
                "load_before": load_average(),
            }
            start = time.perf_counter()
            try:
                body = runners[section]()
            except RuntimeError as exc:
                body = {"error": str(exc)}
            run["wall_s"] = round(time.perf_counter() - start, 1)
            run["load_after"] = load_average()
            # Read again: another run of other sections may have written the file meanwhile.
            if args.output.exists():
                results = json.loads(args.output.read_text())
            results["machine"] = machine()
            results[section] = {"run": run, **body}
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{section}: {run['wall_s']} s", flush=True)
    print(f"grid: {time.perf_counter() - started:.0f} s; results in {args.output}")


if __name__ == "__main__":
    main()
