"""What-if sweeps on an executor: wall time of one sweep on 1 local process, 2
local processes and a Dask cluster of 2 workers on this machine, and the peak memory of a
streamed replay of a 1,000,000-job synthetic SWF log.

    .venv/bin/python bench/sim_sweep.py [--jobs 1000000] [--skip-replay]

The sweep: 2 policies (exclusive, knapsack) x 5 seeds x 4 points (``--sweep
jobs=100,150,200,250`` of the uniform distribution on 4 nodes, offload share 0.5): 40
independent runs. The Dask overhead per task is (Dask time - 2-process time) / 40 runs x 2
workers. Every executor's results are checked equal before the times are printed.

The replay: a synthetic log (one job a second, 1 processor, 5-20 s each, on 16 nodes of 4
cores: about a dozen jobs in flight) replayed by knapsack as a stream in a child process;
its peak RSS next to a log a tenth as long shows that memory follows the jobs in flight.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coshare.config import load_config, with_overrides
from coshare.sim.dask_cluster import open_executor
from coshare.sim.executor import LocalExecutor
from coshare.sim.experiments import Setup
from coshare.sim.runs import Executor
from coshare.sim.work import CompareSpec, run_paper

POLICIES = ("exclusive", "knapsack")
SEEDS = range(5)
POINTS = (100, 150, 200, 250)


def sweep(executor: Executor) -> tuple[float, list[object]]:
    setup = Setup(offload_share=0.5)
    specs = [CompareSpec("uniform", jobs, 4, POLICIES, s, setup) for jobs in POINTS for s in SEEDS]
    start = time.perf_counter()
    results = run_paper(specs, [], executor)
    elapsed = time.perf_counter() - start
    assert not results.failures, results.failures
    return elapsed, list(results.comparisons)


def write_log(path: Path, jobs: int) -> None:
    with path.open("w") as out:
        out.write("; synthetic SWF log of bench/sim_sweep.py\n")
        for i in range(1, jobs + 1):
            run_s = 5 + (i * 7919) % 16
            out.write(f"{i} {i} 0 {run_s} 1 -1 -1 1 {run_s * 2} 1048576 1 1 1 1 1 1 -1 -1\n")
    path.with_name(path.name + ".machines").write_text("1 node 16 4 1 16777216\n")


REPLAY = """
import resource, sys
from pathlib import Path
from coshare.sim.experiments import Setup
from coshare.sim.replay import replay
r = replay(Path(sys.argv[1]), None, "knapsack", 0, Setup())
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(r.summary.jobs, r.summary.not_run, r.events, f"{r.seconds:.1f}", f"{r.events_per_s:.0f}",
      f"{peak_mib:.0f}")
"""


def replay_peak(jobs: int, folder: Path) -> str:
    log = folder / f"synthetic-{jobs}.swf"
    write_log(log, jobs)
    out = subprocess.run(
        [sys.executable, "-c", REPLAY, str(log)], capture_output=True, text=True, check=True
    ).stdout.split()
    done, not_run, events, seconds, rate, peak = out
    return (
        f"| {jobs:,} | {log.stat().st_size / 2**20:.0f} MiB | {int(done) - int(not_run):,} "
        f"| {int(events):,} | {seconds} s | {int(rate):,} | {peak} MiB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args()
    runs = len(POLICIES) * len(SEEDS) * len(POINTS)
    print(
        f"sweep: {len(POLICIES)} policies x {len(SEEDS)} seeds x {len(POINTS)} points = "
        f"{runs} runs (uniform, 4 nodes, offload share 0.5)"
    )
    one, reference = sweep(LocalExecutor(1))
    two, same = sweep(LocalExecutor(2))
    assert same == reference
    config = with_overrides(load_config(environ={}), "sim", executor="dask", workers=2)
    start = time.perf_counter()
    with open_executor(config) as dask:
        startup = time.perf_counter() - start
        on_dask, same = sweep(dask)
    assert same == reference
    print("| executor | wall s | vs 1 process |")
    print("|---|---|---|")
    for name, seconds in (
        ("1 local process", one),
        ("2 local processes", two),
        (f"Dask, 2 workers (+{startup:.1f} s to start them)", on_dask),
    ):
        print(f"| {name} | {seconds:.1f} | {one / seconds:.2f}x |")
    print(
        f"Dask overhead per run: {(on_dask - two) / runs * 2 * 1000:.0f} ms "
        f"((Dask - 2 processes) / {runs} runs x 2 workers)"
    )
    if args.skip_replay:
        return
    print("\nstreamed replay (knapsack):")
    print("| jobs in the log | log size | jobs run | events | wall | events/s | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for jobs in (args.jobs // 10, args.jobs):
            print(replay_peak(jobs, Path(folder)), flush=True)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0


if __name__ == "__main__":
    main()
