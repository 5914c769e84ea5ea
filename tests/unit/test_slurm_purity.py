"""The Slurm adapter's decisions and parsers are pure: they run no command, read no clock and
touch no file, so they are tested on recorded outputs alone. Only client, adapter, cli,
lock and prolog talk to the world. (Logging is allowed: parsers warn about odd records.
Data classes may come from any coshare module, e.g. ``Rejected`` from the planner; the
foundation's own test_purity covers coshare's pure modules.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_purity import FORBIDDEN, imports_of

ADDON = Path(__file__).resolve().parents[2] / "slurm_addon"
PURE = ["comment", "placement", "jobs", "nodes", "view", "edits", "scontrol", "errors",
        "allocation"]
IMPURE_ADDON = {"client", "adapter", "cli", "lock", "prolog", "show", "node_hooks"}


def violations(start: str) -> list[str]:
    seen: set[str] = set()
    stack, bad = [start], []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        path = ADDON / (name.split(".", 1)[1] + ".py")
        for imported in sorted(imports_of(path)):
            top = imported.split(".")[0]
            if top in FORBIDDEN - {"logging"}:
                bad.append(f"{name} imports {imported}")
            elif top == "slurm_addon":
                module = imported.split(".")[1] if "." in imported else ""
                if module in IMPURE_ADDON:
                    bad.append(f"{name} imports {imported}")
                elif module:
                    stack.append(f"slurm_addon.{module}")
    return bad


@pytest.mark.parametrize("module", PURE)
def test_pure_slurm_module_imports_no_io(module: str) -> None:
    assert violations(f"slurm_addon.{module}") == []


def test_the_check_catches_the_client() -> None:
    assert "slurm_addon.client imports time" in violations("slurm_addon.client")
    assert "slurm_addon.cli imports slurm_addon.adapter" in violations("slurm_addon.cli")
