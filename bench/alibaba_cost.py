"""What one seed of the Alibaba fragmentation benchmark costs: CPU seconds and peak memory.

Runs the benchmark (``coshare.sim.fragmentation``) for one seed, every policy, both protocols,
each in a process of its own, and prints its CPU seconds, peak resident memory and the
unallocated GPU % at 100% arrival beside the lower bound. The peer's own simulator
(kubernetes-scheduler-simulator) needs about 3,500 CPU seconds and 4 GB for one seed of one
policy; coshare's target is to stay at least 100 times cheaper.

``--json`` prints one JSON object per run instead of the table (``grid.py`` reads them).

    python bench/alibaba_cost.py [--seed 0] [--policies a,b] [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from coshare.policies import policy_names
from coshare.sim.fragmentation import PROTOCOLS

PEER_CPU_S = 3500.0
PEER_MEMORY_GB = 4.0

RUN = r"""
import json, resource, sys, time
from coshare.sim import fragmentation as frag
from coshare.sim.trace_files import ALIBABA_DIR, data_dir, read_alibaba
policy, protocol, seed, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] or None
start = time.process_time()
trace = read_alibaba(data_dir(folder) / ALIBABA_DIR)
pods = tuple(p.job for p in trace.pods)
if policy == "bound":  # the lower bound alone: it depends on the arrivals, not on a policy
    floor = frag.benchmark_bound(trace.nodes, pods, protocol, seed)
    unallocated, bound = floor[100], floor[100]
else:
    unallocated = frag.run_benchmark(trace.nodes, pods, policy, protocol, seed).unallocated_at(100)
    bound = None
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": time.process_time() - start, "peak_mib": usage.ru_maxrss / 1024,
                  "unallocated": unallocated, "bound": bound}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(policy_names()))
    parser.add_argument("--data", default="", help="trace folder (default: as coshare finds it)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args()
    say = (lambda *_a, **_k: None) if args.json else print
    say(
        f"Alibaba fragmentation benchmark, seed {args.seed}: one process per run (trace "
        "reading included); the lower bound is a run of its own (row 'bound')"
    )
    say(
        f"  {'policy':10} {'protocol':8} {'CPU s':>8} {'peak MiB':>9} "
        f"{'unallocated at 100%':>20} {'bound':>6} {'peer / coshare CPU':>19}"
    )
    total = 0.0
    for protocol in PROTOCOLS:
        for name in [*args.policies.split(","), "bound"]:
            command = [sys.executable, "-c", RUN, name, protocol, str(args.seed), args.data]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{name} {protocol}: {done.stderr[-2000:]}")
            row = json.loads(done.stdout)
            total += row["cpu_s"]
            if args.json:
                row = {"policy": name, "protocol": protocol, **row}
                row["peer_ratio"] = round(PEER_CPU_S / max(row["cpu_s"], 1e-9), 1)
                print(json.dumps(row), flush=True)
            bound = "-" if row["bound"] is None else f"{row['bound']:.2f}"
            say(
                f"  {name:10} {protocol:8} {row['cpu_s']:>8.1f} {row['peak_mib']:>9.0f} "
                f"{row['unallocated']:>20.2f} {bound:>6} "
                f"{PEER_CPU_S / max(row['cpu_s'], 1e-9):>18.0f}x",
                flush=True,
            )
    say(
        f"  all runs: {total:.1f} CPU s (the peer: about {PEER_CPU_S:.0f} CPU s and "
        f"{PEER_MEMORY_GB:g} GB for one policy's seed)"
    )


if __name__ == "__main__":
    main()
