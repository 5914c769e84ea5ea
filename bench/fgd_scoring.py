"""FGD with the reference's integer node score against the exact minimum, on the Alibaba trace.

The authors' simulator scores a node as Kubernetes score plugins must, an integer 0-100
(``int(100 * sigmoid(decrease / 1000 milli))``); coshare's fgd does the same by default,
``FgdPolicy(exact=True)`` takes the exact largest decrease. Online protocol, unallocated
GPU % at 100% arrival per seed (published: median 4.77, range 4.62-4.94).

    python bench/fgd_scoring.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics

from coshare.policies.fgd import FgdPolicy
from coshare.sim import fragmentation as frag
from coshare.sim.trace_files import ALIBABA_DIR, data_dir, read_alibaba


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    trace = read_alibaba(data_dir() / ALIBABA_DIR)
    pods = tuple(p.job for p in trace.pods)
    for exact in (False, True):
        values = []
        for seed in range(args.seeds):
            options = frag.fragmentation_options(trace.nodes, pods, seed)
            policy = FgdPolicy(threads="soft", workload=options.fgd_workload, exact=exact)
            run = frag.run_benchmark(trace.nodes, pods, policy, "online", seed)
            values.append(run.unallocated_at(100))
        label = "exact minimum" if exact else "integer score (reference)"
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"fgd, {label:26}: median {statistics.median(values):.2f}  seeds {shown}")


if __name__ == "__main__":
    main()
