"""End-to-end ``coshare plan``: 100,000 pending jobs on 10,000 devices, JSON in and JSON out.

Writes the snapshot (the idle Xeon Phi cluster of ``plan_scale.py``, or the modern GPU mix
with ``--cluster gpu``) to a temporary file, then:

1. runs ``coshare plan FILE --output json`` as a new process, ``--repeat`` times, and reports
   the wall time from process start to exit and the CPU time of the process (target:
   2 s);
2. runs the same steps inside one Python process with a timer around each (imports, reading
   the file, JSON decoding, the schema's validation into the model, planning, the plan to a
   dict, JSON encoding, writing), to show where the time goes; like ``coshare plan``, with the
   cyclic garbage collector paused (``coshare.cli.main.collector_paused``).

    python bench/plan_e2e.py [--cluster phi|gpu] [--repeat 3] [--policy NAME] [--snapshot FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coshare.model import Snapshot
from coshare.schema import snapshot_to_dict
from coshare.sim.applications import phi_cluster, table1_jobs
from gpu_mix import gpu_cluster, gpu_jobs

TARGET_S = 2.0
JOBS, DEVICES = 100_000, 10_000

#: The steps of ``coshare plan``, timed one after another in a fresh interpreter.
STEPS = r"""
import sys, time
def mark():
    return time.perf_counter(), time.process_time()
marks = [("start", mark())]
import json
from coshare.cli.main import collector_paused, policy_options
from coshare.config import load_config
from coshare.cycle.run import timed_plan
from coshare.policies import make_policy
from coshare.schema import decode_json, parse_snapshot, plan_to_dict
marks.append(("imports", mark()))
with collector_paused():  # as coshare plan runs its steps
    text = open(sys.argv[1]).read()
    marks.append(("read file", mark()))
    data = decode_json(text, sys.argv[1], lambda data, source: data)
    marks.append(("JSON decode (schema.decode_json)", mark()))
    snapshot = parse_snapshot(data, sys.argv[1])
    marks.append(("validation into the model (schema.parse_snapshot)", mark()))
    config = load_config(None)
    name = sys.argv[2] or config.policy.name
    plan = timed_plan(make_policy(name, policy_options(config)), snapshot)
    marks.append((f"plan ({name})", mark()))
    out = plan_to_dict(plan)
    marks.append(("plan to dict (schema.plan_to_dict)", mark()))
    text = json.dumps(out, separators=(",", ":"))
    marks.append(("JSON encode", mark()))
    with open("/dev/null", "w") as sink:
        sink.write(text)
    marks.append(("write", mark()))
print(f"  {'step':52} {'wall s':>7} {'CPU s':>7}")
for (_, before), (label, after) in zip(marks, marks[1:]):
    print(f"  {label:52} {after[0] - before[0]:7.3f} {after[1] - before[1]:7.3f}")
(wall0, cpu0), (wall1, cpu1) = marks[0][1], marks[-1][1]
print(f"  {'total':52} {wall1 - wall0:7.3f} {cpu1 - cpu0:7.3f}")
"""


def snapshot_file(cluster: str, folder: Path) -> Path:
    """The snapshot as the JSON file ``coshare plan`` reads."""
    if cluster == "gpu":
        snap = Snapshot(gpu_cluster(DEVICES), (), gpu_jobs(JOBS, seed=2))
    else:
        snap = Snapshot(phi_cluster(DEVICES, seed=1), (), table1_jobs(JOBS, seed=2))
    path = folder / f"{cluster}-{JOBS}x{DEVICES}.json"
    path.write_text(json.dumps(snapshot_to_dict(snap)))
    return path


def coshare_command() -> list[str]:
    """The ``coshare`` entry point beside this interpreter."""
    return [str(Path(sys.executable).with_name("coshare"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="phi", choices=["phi", "gpu"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policy", default="", help="default: the configured one")
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=None,
        help="plan this snapshot file instead of drawing one (--cluster)",
    )
    args = parser.parse_args()
    env = {**os.environ, "COSHARE_CONFIG": os.devnull}  # defaults, not this host's config
    with tempfile.TemporaryDirectory() as tmp:
        path = args.snapshot or snapshot_file(args.cluster, Path(tmp))
        size = path.stat().st_size
        what = (
            path
            if args.snapshot
            else f"{args.cluster} snapshot: {JOBS} pending jobs, {DEVICES} devices,"
        )
        print(f"coshare plan {what} {size / 2**20:.1f} MiB of JSON")
        command = [*coshare_command(), "plan", str(path), "--output", "json"]
        if args.policy:
            command += ["--policy", args.policy]
        walls, cpus = [], []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
            )
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode != 0:
                raise SystemExit(f"coshare plan failed: {done.stderr.decode()[-2000:]}")
        best = min(walls)
        print(
            f"end to end (process start to exit): best {best:.3f} s wall, "
            f"{min(cpus):.3f} s CPU, of {args.repeat} (target {TARGET_S:g} s: "
            f"{'met' if best <= TARGET_S else 'MISSED'})"
        )
        print("where the time goes (one run, in-process timers):")
        subprocess.run([sys.executable, "-c", STEPS, str(path), args.policy], env=env, check=True)


if __name__ == "__main__":
    main()
