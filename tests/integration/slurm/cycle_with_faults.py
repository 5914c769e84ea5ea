"""Run ``coshare slurm cycle`` with a fault injected at a chosen command, for the fault tests.

    python -m tests.integration.slurm.cycle_with_faults --config C [--kill-after-batch N]
        [--kill-before-release] [--stop-ctld-before-squeue N --cluster DIR]
        [--stop-engine-after-batch N --engine DIR]

The real command line runs against the real cluster; only the one choke point for commands
(:func:`coshare.system.programs.run`) is wrapped, before the Slurm adapter imports it, so that this
process SIGKILLs itself right after its N-th batch of placements was written, or right
before it releases jobs; or stops slurmctld (by its pid file) just before its N-th squeue
(the first is the read, the second the Editor's re-read before writing); or stops the
coordination engine (``deploy/postgres/local-postgres stop DIR``) right after its N-th batch.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import coshare.system.programs
from coshare.system.programs import CommandResult

from tests.postgres import SCRIPT as ENGINE_SCRIPT

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "slurm" / "local-cluster"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--kill-after-batch", type=int)
    parser.add_argument("--kill-before-release", action="store_true")
    parser.add_argument("--stop-ctld-before-squeue", type=int)
    parser.add_argument("--cluster")
    parser.add_argument("--stop-engine-after-batch", type=int)
    parser.add_argument("--engine")
    args = parser.parse_args()
    real = coshare.system.programs.run
    counts = {"batch": 0, "squeue": 0}

    def faulty(
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = True,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        name = Path(str(argv[0])).name
        if name == "squeue":
            counts["squeue"] += 1
            if counts["squeue"] == args.stop_ctld_before_squeue:
                subprocess.run([str(SCRIPT), "stop-ctld", args.cluster], check=True)
        releasing = name == "scontrol" and len(argv) > 1 and argv[1] == "release"
        if releasing and args.kill_before_release:
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(argv, timeout_s=timeout_s, check=check, input_text=input_text, env=env)
        if name == "scontrol" and input_text is not None:
            counts["batch"] += 1
            if counts["batch"] == args.kill_after_batch:
                os.kill(os.getpid(), signal.SIGKILL)
            if counts["batch"] == args.stop_engine_after_batch:
                subprocess.run(
                    [str(ENGINE_SCRIPT), "stop", args.engine], check=True, capture_output=True
                )
        return result

    coshare.system.programs.run = faulty  # before slurm_addon.client binds it
    from coshare.cli.main import main as coshare_main

    coshare_main(["--config", args.config, "slurm", "cycle"])


if __name__ == "__main__":
    main()
