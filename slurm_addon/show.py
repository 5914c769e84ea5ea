"""``coshare slurm show``: placements per node and device, and why each waiting job waits."""

from __future__ import annotations

import io
from collections import defaultdict

from coshare.model import Plan, milli_to_cores
from coshare.render import SHOWN_IDS
from rich import box
from rich.console import Console
from rich.table import Table

from slurm_addon.view import ClusterView


def _ids(ids: list[str]) -> str:
    if len(ids) <= SHOWN_IDS:
        return ", ".join(ids)
    return ", ".join(ids[:SHOWN_IDS]) + f" (+{len(ids) - SHOWN_IDS} more)"


def render_show(view: ClusterView, plan: Plan, width: int = 120) -> str:
    """The admin's view of the cluster.

    Args:
        view: what was read.
        plan: what the next cycle would do with the pending jobs (a dry run).
        width: characters per line.
    """
    snap = view.snapshot
    mem: dict[tuple[str, str], int] = defaultdict(int)
    thr: dict[tuple[str, str], int] = defaultdict(int)
    running: dict[tuple[str, str], list[str]] = defaultdict(list)
    planned: dict[tuple[str, str], list[str]] = defaultdict(list)
    cpu: dict[str, int] = defaultdict(int)
    for r in snap.running:
        cpu[r.node] += r.cpu_milli
        for dev in r.devices or ("-",):
            (planned if r.state == "planned" else running)[(r.node, dev)].append(r.id)
            mem[(r.node, dev)] += r.device_memory_mib
            thr[(r.node, dev)] += r.device_threads

    table = Table(
        title="Devices: running and planned (placed, not started) jobs",
        box=box.SIMPLE,
        title_justify="left",
    )
    for column in ("node", "device", "kind", "memory MiB", "threads", "cores", "running",
                   "planned"):  # fmt: skip
        table.add_column(column, overflow="fold")
    for node in snap.nodes:
        cores = f"{milli_to_cores(cpu[node.name])}/{node.cores}"
        for d in node.devices:
            key = (node.name, d.id)
            table.add_row(node.name, d.id, d.model, f"{mem[key]}/{d.memory_mib}",
                          f"{thr[key]}/{d.threads}", cores, _ids(running[key]),
                          _ids(planned[key]))  # fmt: skip
        key = (node.name, "-")
        if not node.devices or running[key] or planned[key]:
            table.add_row(node.name, "-", "", "-", "-", cores, _ids(running[key]),
                          _ids(planned[key]))  # fmt: skip
    parts: list[Table | str] = [table]

    waits = Table(title="Waiting annotated jobs", box=box.SIMPLE, title_justify="left")
    for column in ("job", "why"):
        waits.add_column(column, overflow="fold")
    rows = 0
    for a in plan.assignments:
        where = f"{a.node}/{','.join(a.devices)}" if a.devices else a.node
        waits.add_row(a.job, f"placed on {where} by the next cycle")
        rows += 1
    for u in plan.unplaced:
        waits.add_row(u.job, f"{u.code}: {u.reason}")
        rows += 1
    for w in view.waiting:
        waits.add_row(w.job, w.reason)
        rows += 1
    for refused in view.rejected:
        waits.add_row(refused.job, f"refused: {refused.reason}")
        rows += 1
    parts.append(waits if rows else "No annotated job is waiting.")
    for n in view.unusable_nodes:
        flags = "+".join(n.flags)
        parts.append(
            f"node {n.name} takes no jobs now ({n.state}{'+' + flags if flags else ''}"
            f"{': ' + n.reason if n.reason else ''})"
        )
    parts.extend(f"note: {note}" for note in view.notes)

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    for part in parts:
        console.print(part)
    return buffer.getvalue()
