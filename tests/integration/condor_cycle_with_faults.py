"""Run ``coshare condor cycle`` and SIGKILL it right after its N-th queue edit, or stop the
coordination engine then, for the several-planners tests (python -m
tests.integration.condor_cycle_with_faults --config C --kill-after-edit N | --stop-engine-after-edit
N --engine DIR). The real command line runs against the real pool; only the client's edit
calls are wrapped, so the process dies mid-apply (its claims are in the engine, some of its
placements written, the rest not), or the engine stops mid-apply
(``deploy/postgres/local-postgres stop DIR``)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
from typing import Any

from condor_addon.client import CondorClient
from tests.postgres import SCRIPT as ENGINE_SCRIPT


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--kill-after-edit", type=int)
    parser.add_argument("--stop-engine-after-edit", type=int)
    parser.add_argument("--engine")
    args = parser.parse_args()
    edits = {"n": 0}
    real_ids, real_where = CondorClient.edit_ids, CondorClient.edit_where

    def counted(result: Any) -> Any:
        edits["n"] += 1
        if edits["n"] == args.kill_after_edit:
            os.kill(os.getpid(), signal.SIGKILL)
        if edits["n"] == args.stop_engine_after_edit:
            subprocess.run(
                [str(ENGINE_SCRIPT), "stop", args.engine], check=True, capture_output=True
            )
        return result

    def edit_ids(self: CondorClient, *a: Any, **k: Any) -> Any:
        return counted(real_ids(self, *a, **k))

    def edit_where(self: CondorClient, *a: Any, **k: Any) -> Any:
        return counted(real_where(self, *a, **k))

    CondorClient.edit_ids = edit_ids  # type: ignore[method-assign]
    CondorClient.edit_where = edit_where  # type: ignore[method-assign]
    from coshare.cli.main import main as coshare_main

    coshare_main(["--config", args.config, "condor", "cycle"])


if __name__ == "__main__":
    main()
