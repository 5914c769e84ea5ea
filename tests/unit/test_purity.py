"""The pure parts of coshare import no I/O (DESIGN.md): the core (model, ports, ledger,
schema, annotations, verify, policies, the simulator, alloc's protocol logic, the node
helpers' spec, protocols and state machines) and both scheduler adapters' pure halves (their
view and edits modules and the parsers and builders these use), one test for all of them.

Each module's imports are read from its source (not executed), and the check follows imports
of other coshare, condor_addon and slurm_addon modules transitively, so a pure module cannot
reach I/O through a helper either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "common" / "coshare"
#: Where each first-party package lives.
PACKAGES = {
    "coshare": PACKAGE,
    "condor_addon": ROOT / "condor_addon",
    "slurm_addon": ROOT / "slurm_addon",
}

#: Modules and packages that must stay pure. Packages cover every module inside them.
PURE = [
    "model",
    "ports",
    "ledger.book",
    "schema",
    "contracts.fields",
    "contracts.snapshot_doc",
    "contracts.plan_doc",
    "contracts.typed",
    "contracts.specs",
    "ledger.annotations",
    "cycle.verify",
    "policies",
    "sim",
    "alloc",
    "policies.explain",
    "profiles.learning",
    "profiles.job_end",
    "cli.exit_codes",
    "cli.extras",
    "node.spec",
    "node.gate.protocol",
    "node.gate.state",
    "node.process",
    "node.control.trust",
    "node.control.protocol",
    "node.harvest",
    "ledger.facts",
    "node.load",
    "node.ways",
    "node.bandwidth",
    "ledger.gangs",
    "profiles.programs",
    "ledger.llc",
    "node.perfstat",
    "coord.claims",
    "cycle.trial_steps",
]

#: The adapters' pure halves: records to snapshot (view), plan to writes (edits), and the
#: parsers and builders they use. The HTCondor adapter's expressions module quotes through
#: the bindings' classad2 and is not among them.
PURE_ADAPTERS = [
    "condor_addon.view",
    "condor_addon.edits",
    "condor_addon.attributes",
    "condor_addon.errors",
    "condor_addon.negotiator",
    "slurm_addon.view",
    "slurm_addon.edits",
    "slurm_addon.jobs",
    "slurm_addon.nodes",
    "slurm_addon.comment",
    "slurm_addon.placement",
    "slurm_addon.scontrol",
    "slurm_addon.allocation",
    "slurm_addon.errors",
]

#: Modules inside the pure packages that do I/O, told apart by name (see coshare.sim).
IO_MODULES = {
    "coshare.sim.cli",
    "coshare.sim.runners",
    "coshare.sim.report",
    "coshare.sim.plot",
    "coshare.sim.trace_files",
    "coshare.sim.progress",
    "coshare.sim.executor",
    "coshare.sim.dask_cluster",
    "coshare.sim.replay",
    "coshare.sim.poncos_report",
    "coshare.sim.picaso_report",
    "coshare.sim.sns_report",
    "coshare.sim.live",
    "coshare.sim.live_report",
    "coshare.sim.sns_learn",
}

#: What a pure module may not import (top-level names).
FORBIDDEN = {
    "os",
    "subprocess",
    "time",
    "socket",
    "shutil",
    "pathlib",
    "io",
    "threading",
    "asyncio",
    "multiprocessing",
    "signal",
    "select",
    "selectors",
    "tempfile",
    "urllib",
    "http",
    "htcondor",
    "htcondor2",
    "classad",
    "classad2",
    "pyslurm",
    "pynvml",
    "datetime",
    "uuid",
    "secrets",
    "sys",
    "builtins",
    "ctypes",
    "mmap",
    "fcntl",
    "glob",
    "sqlite3",
    "logging",
}


def module_file(name: str) -> Path | None:
    top, *parts = name.split(".")
    if top not in PACKAGES:
        return None
    base = PACKAGES[top].joinpath(*parts)
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def pure_modules() -> list[str]:
    names = []
    for entry in PURE:
        path = PACKAGE.joinpath(*entry.split("."))
        if path.is_dir():
            names += [
                f"coshare.{entry}.{p.stem}" if p.stem != "__init__" else f"coshare.{entry}"
                for p in sorted(path.rglob("*.py"))
                if len(p.relative_to(path).parts) == 1
            ]
            names += [
                "coshare." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
                for p in sorted(path.rglob("*.py"))
                if len(p.relative_to(path).parts) > 1 and p.stem != "__init__"
            ]
        elif path.with_suffix(".py").exists():
            names.append(f"coshare.{entry}")
    return [n for n in names if n not in IO_MODULES]


def reachable_violations(start: str) -> list[str]:
    seen: set[str] = set()
    stack = [start]
    bad: list[str] = []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        if path is None:
            continue
        for imported in sorted(imports_of(path)):
            top = imported.split(".")[0]
            if top in FORBIDDEN:
                bad.append(f"{name} imports {imported}")
            elif top in PACKAGES:
                stack.append(imported)
    return bad


@pytest.mark.parametrize("module", pure_modules() + PURE_ADAPTERS)
def test_pure_module_imports_no_io(module: str) -> None:
    assert module_file(module) is not None, f"{module} does not exist"
    assert reachable_violations(module) == []


def test_the_check_itself_catches_io() -> None:
    # coshare.config reads files and the environment: the walker must notice, also when the
    # I/O is reached through another package's module.
    assert any("imports os" in v for v in reachable_violations("coshare.config"))
    assert any("imports subprocess" in v for v in reachable_violations("coshare.system.programs"))
    assert any("imports time" in v for v in reachable_violations("slurm_addon.adapter"))
    assert any(
        "coshare.system.programs imports subprocess" in v
        for v in reachable_violations("slurm_addon.client")
    )
    assert any("imports classad2" in v for v in reachable_violations("condor_addon.expressions"))
