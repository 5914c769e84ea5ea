"""Tables an admin reads: planned placements per node and device, and why jobs wait.

Rendered with rich; plain text when the output is not a terminal (pipes, cron mail, tests).
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from coshare.model import Plan, Snapshot, milli_to_cores
from coshare.planner import CycleReport

#: Job ids listed per cell before "+N more".
SHOWN_IDS = 6


def _ids(ids: Sequence[str]) -> str:
    if len(ids) <= SHOWN_IDS:
        return ", ".join(ids)
    return ", ".join(ids[:SHOWN_IDS]) + f" (+{len(ids) - SHOWN_IDS} more)"


def render_text(*tables: Table | str, width: int = 120) -> str:
    """Rich tables and lines as plain text, ``width`` columns wide."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    for table in tables:
        console.print(table)
    return buffer.getvalue()


def plan_table(snapshot: Snapshot, plan: Plan, show_all: bool = False, width: int = 120) -> str:
    """The plan as text: one row per device (or node, for CPU jobs) that gets jobs, with its
    memory and threads after the plan, then the unplaced jobs grouped by reason.

    Args:
        snapshot: the snapshot the plan was made for.
        plan: the plan.
        show_all: also list devices and nodes that get nothing.
        width: characters per line.
    """
    pending = {j.id: j for j in snapshot.pending}
    used_mem: dict[tuple[str, str], int] = defaultdict(int)
    used_thr: dict[tuple[str, str], int] = defaultdict(int)
    running: dict[tuple[str, str], list[str]] = defaultdict(list)
    planned: dict[tuple[str, str], list[str]] = defaultdict(list)
    node_cpu: dict[str, int] = defaultdict(int)
    for r in snapshot.running:
        node_cpu[r.node] += r.cpu_milli
        for d in r.devices or ("-",):
            running[(r.node, d)].append(r.id)
            used_mem[(r.node, d)] += r.device_memory_mib
            used_thr[(r.node, d)] += r.device_threads
    new_mem: dict[tuple[str, str], int] = defaultdict(int)
    for a in plan.assignments:
        job = pending.get(a.job)
        if job is None:
            continue
        node_cpu[a.node] += job.cpu_milli * (a.processes or job.processes)
        for d in a.devices or ("-",):
            planned[(a.node, d)].append(a.job)
            new_mem[(a.node, d)] += job.device_memory_mib
            used_mem[(a.node, d)] += job.device_memory_mib
            used_thr[(a.node, d)] += job.device_threads

    title = (
        f"Plan by policy {plan.policy}: {plan.placed} of {plan.pending} pending jobs placed "
        f"({plan.seconds:.3f} s)"
    )
    table = Table(title=title, box=box.SIMPLE, title_justify="left", expand=False)
    for column in ("node", "device", "device memory MiB", "threads", "cores", "running",
                   "planned now"):  # fmt: skip
        table.add_column(column, overflow="fold")
    hidden = 0
    for node in snapshot.nodes:
        cores = f"{milli_to_cores(node_cpu[node.name])}/{node.cores}"
        keys = [(node.name, d.id, d) for d in node.devices] + [(node.name, "-", None)]
        for name, dev_id, device in keys:
            key = (name, dev_id)
            if not planned[key] and not (show_all and (device is not None or running[key])):
                hidden += device is not None
                continue
            if device is not None:
                memory = f"{used_mem[key]}/{device.memory_mib}"
                if new_mem[key]:
                    memory += f" (+{new_mem[key]})"
                threads = f"{used_thr[key]}/{device.threads}"
            else:
                memory, threads = "-", "-"
            table.add_row(name, dev_id, memory, threads, cores, _ids(running[key]),
                          _ids(planned[key]))  # fmt: skip
    parts: list[Table | str] = [table]
    if hidden:
        parts.append(f"{hidden} devices get no new job (--all lists them)")
    if plan.unplaced:
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for u in plan.unplaced:
            groups[(u.code, u.reason)].append(u.job)
        waits = Table(
            title=f"Not placed: {len(plan.unplaced)} jobs",
            box=box.SIMPLE,
            title_justify="left",
        )
        for column in ("jobs", "count", "code", "reason"):
            waits.add_column(column, overflow="fold")
        for (code, reason), ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            waits.add_row(_ids(ids), str(len(ids)), code, reason)
        parts.append(waits)
    return render_text(*parts, width=width)


def policy_summary(rows: Sequence[tuple[str, Plan]], width: int = 120) -> str:
    """One line per policy: how many jobs each places, for side-by-side comparison."""
    table = Table(title="Policies on this snapshot", box=box.SIMPLE, title_justify="left")
    for column in ("policy", "placed", "waiting", "devices used", "seconds"):
        table.add_column(column)
    for name, plan in rows:
        devices = {(a.node, d) for a in plan.assignments for d in a.devices}
        table.add_row(name, str(plan.placed), str(len(plan.unplaced)), str(len(devices)),
                      f"{plan.seconds:.4f}")  # fmt: skip
    return render_text(table, width=width)


def cycle_summary(report: CycleReport) -> str:
    """What one cycle did, for cron mail and the admin: counts, timings, and every job that
    was refused, skipped or failed with its reason."""
    apply = report.apply
    verb = "would write" if apply.dry_run else "wrote"
    lines = [
        f"cycle ({report.plan.policy}{', dry run' if apply.dry_run else ''}): "
        f"{report.plan.pending} pending, {report.plan.placed} placed, {verb} "
        f"{len(apply.applied)}, unchanged {len(apply.unchanged)}, skipped {len(apply.skipped)}, "
        f"failed {len(apply.failed)}, refused {len(report.rejected)} "
        f"(read {report.read_s:.3f} s, plan {report.plan.seconds:.3f} s, "
        f"apply {report.apply_s:.3f} s)"
    ]
    for note in report.plan.notes:
        lines.append(f"  note: {note}")
    for r in report.rejected:
        lines.append(f"  refused {r.job}: {r.reason}")
    for outcome in apply.skipped:
        lines.append(f"  skipped {outcome.job}: {outcome.detail}")
    for outcome in apply.failed:
        lines.append(f"  FAILED {outcome.job}: {outcome.detail}")
    return "\n".join(lines) + "\n"
