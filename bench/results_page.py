"""Writes the figures of the docs' pages from the committed results file of ``grid.py``.

docs/benchmarks.md holds every table; a research page that discusses one of them (the
Alibaba benchmark's cost on docs/alibaba.md) holds the same block, so no page carries a copy
typed by hand. A page holds each generated block between two markers, ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; this replaces what lies between them with the tables rendered from
bench/results/grid.json (with the command, commit, date, machine and load of the run beside
each), and leaves every other line as it is. No figure on the page is typed by hand: a unit
test renders the page from the committed file and compares.

    python bench/results_page.py [--results bench/results/grid.json] [--page PAGE ...] [--check]

Pure but for reading and writing the files (standard library only: the test imports it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "grid.json"
PAGES = (ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "alibaba.md")
MIX_NAMES = {"phi": "Xeon Phi, Table I mix", "gpu": "80 GB GPUs, modern mix"}
_BLOCK = re.compile(r"(<!-- bench:([a-z0-9-]+) -->\n)(.*?)(<!-- /bench:\2 -->)", re.DOTALL)


def _n(value: int) -> str:
    return f"{value:,}"


def _seconds(value: float) -> str:
    return f"{value:.2f}"


def _run_line(results: dict[str, Any], section: str) -> str:
    """Where a section's figures come from: command, commit, date, machine, load."""
    run = results[section]["run"]
    m = results.get("machine", {})
    memory = m.get("memory_mib")
    memory_text = f", {memory / 1024:.0f} GiB" if memory else ""
    load = f"{run['load_before'][0]:g} before, {run['load_after'][0]:g} after"
    return (
        f"Command: `{run['command']}` (commit `{run['commit'][:12]}`, {run['date']}; "
        f"{m.get('cpu_model', '?')}, {m.get('cores', '?')} cores{memory_text}; 1-minute load "
        f"average {load}; the section took {run['wall_s']:g} s)."
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _missing(results: dict[str, Any], section: str) -> str | None:
    body = results.get(section)
    if body is None:
        return f"Not in the results file: run `python bench/grid.py --sections {section}`."
    if "skipped" in body or "error" in body:
        return (
            _run_line(results, section)
            + "\n\nNot measured: "
            + (body.get("skipped") or body["error"])
        )
    return None


def _cell(row: dict[str, Any]) -> str:
    if row.get("timed_out"):
        return f"> {row['timeout_s']:g} s"
    if "error" in row:
        return "failed"
    return f"{_seconds(row['cpu_s'])} / {_seconds(row['wall_s'])} ({_n(row['placed'])})"


def plan_block(results: dict[str, Any], mix: str, scenario: str) -> str:
    """One table of the plan grid: a row per policy, a column per jobs x devices."""
    missing = _missing(results, "plan")
    if missing:
        return missing
    rows = [r for r in results["plan"]["rows"] if r["mix"] == mix and r["scenario"] == scenario]
    if not rows:
        return "Not in this run (`--quick` runs fewer sizes)."
    sizes = sorted({(r["devices"], r["jobs"]) for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by = {(r["policy"], r["devices"], r["jobs"]): r for r in rows}
    running = {(r["devices"], r["jobs"]): r["running"] for r in rows}
    header = ["policy"] + [
        f"{_n(j)} jobs / {_n(d)} devices"
        + (f" ({_n(running[(d, j)])} running)" if scenario == "busy" else "")
        for d, j in sizes
    ]
    body = [
        [p] + [_cell(by[(p, d, j)]) if (p, d, j) in by else "-" for d, j in sizes] for p in policies
    ]
    timeout = results["plan"]["timeout_s"]
    return (
        _run_line(results, "plan")
        + f"\n\n{MIX_NAMES[mix]}, {scenario} cluster: CPU s / wall s of the whole "
        f'`coshare plan` process (jobs placed); "> {timeout:g} s": stopped at the per-case '
        "timeout.\n\n" + _table(header, body)
    )


def alibaba_block(results: dict[str, Any]) -> str:
    missing = _missing(results, "alibaba")
    if missing:
        return missing
    body = [
        [
            r["policy"],
            r["protocol"],
            f"{r['cpu_s']:.1f}",
            f"{r['peak_mib']:.0f}",
            f"{r['unallocated']:.2f}",
            "-" if r["bound"] is None else f"{r['bound']:.2f}",
            "-" if r["policy"] == "bound" else f"{r['peer_ratio']:.0f}x",
        ]
        for r in results["alibaba"]["rows"]
    ]
    header = [
        "policy",
        "protocol",
        "CPU s",
        "peak MiB",
        "unallocated GPU % at 100%",
        "lower bound",
        "peer / coshare CPU",
    ]
    return _run_line(results, "alibaba") + "\n\n" + _table(header, body)


def gate_block(results: dict[str, Any]) -> str:
    missing = _missing(results, "gate")
    if missing:
        return missing
    gate = results["gate"]
    floors = {r["load"]: r for r in gate["floor"]}
    body = []
    for r in gate["gate"]:
        f = floors.get(r["load"])
        ratio = f"{r['p50_us'] / f['p50_us']:.2f}" if f else "-"
        body.append(
            [
                f"{r['clients']} {r['client']} clients, {r['load']}",
                f"{r['p50_us']:.0f} / {r['p99_us']:.0f} / {_n(r['round_trips_per_s'])}",
                f"{f['p50_us']:.0f} / {f['p99_us']:.0f} / {_n(f['round_trips_per_s'])}"
                if f
                else "-",
                ratio,
            ]
        )
    header = ["load", "gate p50 µs / p99 µs / round trips/s", "floor (same)", "gate / floor p50"]
    cgroups = "in real job cgroups" if gate["cgroups"] else "without cgroups"
    return (
        _run_line(results, "gate")
        + f"\n\nClients {cgroups}, {_n(gate['ops'])} round trips each.\n\n"
        + _table(header, body)
    )


def slurm_block(results: dict[str, Any]) -> str:
    missing = _missing(results, "slurm")
    if missing:
        return missing
    body = [
        [
            _n(r["jobs"]),
            str(r["batch"]),
            str(r["workers"]),
            _n(r["placed"]),
            f"{r['read_s']:.3f}",
            f"{r['apply_s']:.3f}",
            f"{r['floor_s']:.3f}",
            f"{r['ratio']:.2f}",
        ]
        for r in results["slurm"]["rows"]
    ]
    header = [
        "pending",
        "per batch",
        "workers",
        "placed",
        "read s",
        "apply s",
        "floor s",
        "apply / floor",
    ]
    return _run_line(results, "slurm") + "\n\n" + _table(header, body)


BLOCKS: dict[str, Callable[[dict[str, Any]], str]] = {
    "plan-phi-idle": lambda r: plan_block(r, "phi", "idle"),
    "plan-phi-busy": lambda r: plan_block(r, "phi", "busy"),
    "plan-gpu-idle": lambda r: plan_block(r, "gpu", "idle"),
    "plan-gpu-busy": lambda r: plan_block(r, "gpu", "busy"),
    "alibaba": alibaba_block,
    "gate": gate_block,
    "slurm": slurm_block,
}


def render(page: str, results: dict[str, Any]) -> str:
    """``page`` with every marked block rewritten from ``results``.

    Raises:
        ValueError: a marker names no known block.
    """

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return f"{match.group(1)}{BLOCKS[name](results)}\n{match.group(4)}"

    return _BLOCK.sub(block, page)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, action="append", help="default: every page above")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    stale = 0
    for path in args.page or PAGES:
        page = path.read_text()
        new = render(page, results)
        if args.check and new != page:
            print(f"{path} differs from {args.results}: run bench/results_page.py")
            stale = 1
        elif not args.check:
            path.write_text(new)
    return stale


if __name__ == "__main__":
    sys.exit(main())
