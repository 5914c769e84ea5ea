"""Tables an admin reads: planned placements per node and device, and why jobs wait.

Rendered with rich; plain text when the output is not a terminal (pipes, cron mail, tests).
Both scheduler adapters' ``cycle`` and ``show`` print through here (:func:`cycle_summary`,
:func:`show_text`, :func:`cycle_to_dict`), so they read the same.
"""

from __future__ import annotations

import io
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from coshare.ledger.bounds import shorten_text
from coshare.model import Plan, Snapshot, milli_to_cores
from coshare.ports import JobOutcome, SourceResult
from coshare.schema import plan_to_dict

if TYPE_CHECKING:  # the planner (numpy) stays unloaded where only node tables are rendered
    from coshare.cycle.run import CycleReport
    from coshare.policies.explain import Explanation

#: Job ids listed per cell before "+N more".
SHOWN_IDS = 6


def _ids(ids: Sequence[str]) -> str:
    if len(ids) <= SHOWN_IDS:
        return ", ".join(ids)
    return ", ".join(ids[:SHOWN_IDS]) + f" (+{len(ids) - SHOWN_IDS} more)"


#: Columns of text written to a pipe or file with no ``COLUMNS`` (cron mail, logs).
PIPE_WIDTH = 120


def output_width(pipe_width: int = PIPE_WIDTH) -> int:
    """The width tables are drawn to: ``COLUMNS`` when set, else the terminal's width when
    standard output is one (rich's own rule), else ``pipe_width``."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return max(console.width, 40)
    return pipe_width


def render_text(*tables: Table | str, width: int | None = None) -> str:
    """Rich tables and lines as plain text, ``width`` columns wide (default
    :func:`output_width`), with no trailing spaces.

    Names and ids come from users and schedulers, so nothing in them is interpreted: no rich
    markup (``[/x]`` in a node name raised ``MarkupError``), no ``:emoji:`` codes, and control
    characters or lone surrogates that got this far are written as escapes, never sent to
    the admin's terminal.
    """
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or output_width(),
        force_terminal=False,
        color_system=None,
        markup=False,
        emoji=False,
        highlight=False,
    )
    for table in tables:
        console.print(table)
    text = "\n".join(line.rstrip() for line in buffer.getvalue().split("\n"))
    return printable(text)


def printable(text: str) -> str:
    """``text`` with every control character (but the line break) and lone surrogate escaped."""
    if text.replace("\n", "").isprintable():
        return text
    return "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    if char.isprintable() or char == "\n":
        return char
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def plan_table(
    snapshot: Snapshot, plan: Plan, show_all: bool = False, width: int | None = None
) -> str:
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
        # A borrower's cores are its GPU job's (collocate), not the node's free ones.
        node_cpu[r.node] += 0 if r.harvest_from else r.cpu_milli
        for d in r.devices or ("-",):
            running[(r.node, d)].append(r.id)
            used_mem[(r.node, d)] += r.device_memory_mib
            used_thr[(r.node, d)] += r.device_threads
    new_mem: dict[tuple[str, str], int] = defaultdict(int)
    for a in plan.assignments:
        job = pending.get(a.job)
        if job is None:
            continue
        if a.harvest_from is None:
            node_cpu[a.node] += job.cpu_milli * (a.processes or job.processes)
        for d in a.devices or ("-",):
            planned[(a.node, d)].append(
                a.job if a.harvest_from is None else f"{a.job} (cores of {a.harvest_from})"
            )
            new_mem[(a.node, d)] += job.device_memory_mib
            used_mem[(a.node, d)] += job.device_memory_mib
            used_thr[(a.node, d)] += job.device_threads

    title = (
        f"Plan by policy {plan.policy}: {plan.placed} of {plan.pending} pending jobs placed "
        f"({plan.seconds:.3f} s)"
    )
    table = Table(title=title, box=box.SIMPLE, title_justify="left", expand=False)
    for column in (
        "node",
        "device",
        "device memory MiB",
        "threads",
        "cores",
        "running",
        "planned now",
    ):
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
            table.add_row(
                name, dev_id, memory, threads, cores, _ids(running[key]), _ids(planned[key])
            )
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
            waits.add_row(", ".join(ids), str(len(ids)), code, reason)  # every id
        parts.append(waits)
    if plan.requeue:
        parts.append(
            "To requeue (their GPU job needs its cores back): "
            + "; ".join(f"{u.job}: {u.reason}" for u in plan.requeue)
        )
    if any(len(v) > SHOWN_IDS for cells in (running, planned) for v in cells.values()):
        parts.append(f"Cells list {SHOWN_IDS} jobs each; --output json lists every job.")
    return render_text(*parts, width=width)


def policy_summary(rows: Sequence[tuple[str, Plan]], width: int | None = None) -> str:
    """One line per policy: how many jobs each places, for side-by-side comparison."""
    table = Table(title="Policies on this snapshot", box=box.SIMPLE, title_justify="left")
    for column in ("policy", "placed", "waiting", "devices used", "seconds"):
        table.add_column(column)
    for name, plan in rows:
        devices = {(a.node, d) for a in plan.assignments for d in a.devices}
        table.add_row(
            name,
            str(plan.placed),
            str(len(plan.unplaced)),
            str(len(devices)),
            f"{plan.seconds:.4f}",
        )
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
    verb = "would withdraw" if apply.dry_run else "withdrew"
    for outcome in apply.withdrawn:
        lines.append(f"  {verb} {outcome.job}: {outcome.detail}")
    verb = "would requeue" if apply.dry_run else "requeued"
    for outcome in apply.requeued:
        lines.append(f"  {verb} {outcome.job}: {outcome.detail}")
    for line in report.trials:
        lines.append(f"  trial: {line}")
    if apply.noted:
        verb = "would note" if apply.dry_run else "noted"
        lines.append(f"  {verb} the wait reason of {len(apply.noted)} jobs whose reason changed")
    return "\n".join(lines) + "\n"


def _outcomes(outcomes: Sequence[JobOutcome]) -> list[dict[str, str]]:
    return [{"job": o.job, "detail": o.detail} for o in outcomes]


def cycle_to_dict(report: CycleReport) -> dict[str, Any]:
    """One cycle as JSON (``cycle --output json``): the plan (the plan contract), what was
    written, and the refused and waiting jobs."""
    apply = report.apply
    return {
        "plan": plan_to_dict(report.plan),
        "apply": {
            "dry_run": apply.dry_run,
            "applied": list(apply.applied),
            "unchanged": list(apply.unchanged),
            "skipped": _outcomes(apply.skipped),
            "failed": _outcomes(apply.failed),
            "rejected": _outcomes(apply.rejected),
            "withdrawn": _outcomes(apply.withdrawn),
            "noted": list(apply.noted),
            # borrowers given back through the scheduler (collocate); absent when none
            **({"requeued": _outcomes(apply.requeued)} if apply.requeued else {}),
        },
        "rejected": [{"job": r.job, "reason": r.reason} for r in report.rejected],
        "waiting": [{"job": w.job, "reason": w.reason} for w in report.waiting],
        "notes": list(report.notes),
        "trials": list(report.trials),
        "seconds": {"read": report.read_s, "plan": report.plan.seconds, "apply": report.apply_s},
        "exit_status": report.exit_status,
    }


def show_text(result: SourceResult, plan: Plan, width: int | None = None) -> str:
    """What ``show`` prints: every node and device with what runs there, what is placed and
    not started, and what the next cycle would place; then every waiting annotated job with
    why it waits (or where the next cycle puts it); then the nodes that take no jobs now
    (drained, down, closed) with the scheduler's state and reason, and the notes."""
    snap = result.snapshot
    planned_count = sum(r.state == "planned" for r in snap.running)
    header = (
        f"{len(snap.nodes)} nodes, {sum(len(n.devices) for n in snap.nodes)} devices"
        f"{f' (and {len(result.unusable)} nodes taking no jobs)' if result.unusable else ''}; "
        f"{len(snap.running) - planned_count} running, {planned_count} planned not started, "
        f"{len(snap.pending)} pending, {len(result.rejected)} refused, "
        f"{len(result.waiting)} waiting"
    )
    pending = {j.id: j for j in snap.pending}
    mem: dict[tuple[str, str], int] = defaultdict(int)
    thr: dict[tuple[str, str], int] = defaultdict(int)
    new_mem: dict[tuple[str, str], int] = defaultdict(int)
    cells: dict[str, dict[tuple[str, str], list[str]]] = {
        "running": defaultdict(list),
        "planned": defaultdict(list),
        "next": defaultdict(list),
    }
    cpu: dict[str, int] = defaultdict(int)
    for r in snap.running:
        cpu[r.node] += r.cpu_milli
        for dev in r.devices or ("-",):
            cells["planned" if r.state == "planned" else "running"][(r.node, dev)].append(r.id)
            mem[(r.node, dev)] += r.device_memory_mib
            thr[(r.node, dev)] += r.device_threads
    for a in plan.assignments:
        job = pending.get(a.job)
        if job is None:
            continue
        for dev in a.devices or ("-",):
            cells["next"][(a.node, dev)].append(a.job)
            new_mem[(a.node, dev)] += job.device_memory_mib

    table = Table(
        title="Devices: running, planned (placed, not started) and next-cycle jobs",
        box=box.SIMPLE,
        title_justify="left",
    )
    for column in (
        "node",
        "device",
        "kind",
        "memory MiB",
        "threads",
        "cores",
        "running",
        "planned",
        "next cycle",
    ):
        table.add_column(column, overflow="fold")
    for node in snap.nodes:
        cores = f"{milli_to_cores(cpu[node.name])}/{node.cores}"
        for d in node.devices:
            key = (node.name, d.id)
            memory = f"{mem[key]}/{d.memory_mib}" + (f" (+{new_mem[key]})" if new_mem[key] else "")
            jobs = (_ids(cells[c][key]) for c in ("running", "planned", "next"))
            table.add_row(node.name, d.id, d.model, memory, f"{thr[key]}/{d.threads}", cores, *jobs)
        key = (node.name, "-")
        if not node.devices or any(cells[c][key] for c in cells):
            jobs = (_ids(cells[c][key]) for c in ("running", "planned", "next"))
            table.add_row(node.name, "-", "", "-", "-", cores, *jobs)

    waits = Table(title="Waiting annotated jobs", box=box.SIMPLE, title_justify="left")
    for column in ("job", "why"):
        waits.add_column(column, overflow="fold")
    for a in plan.assignments:
        where = f"{a.node}/{','.join(a.devices)}" if a.devices else a.node
        waits.add_row(a.job, f"placed on {where} by the next cycle")
    for u in plan.unplaced:
        waits.add_row(u.job, f"{u.code}: {u.reason}")
    for w in result.waiting:
        waits.add_row(w.job, w.reason)
    for refused in result.rejected:
        waits.add_row(refused.job, f"refused: {refused.reason}")
    rows = len(plan.assignments) + len(plan.unplaced) + len(result.waiting) + len(result.rejected)
    parts: list[Table | str] = [header, table, waits if rows else "No annotated job is waiting."]
    if result.unusable:
        closed = Table(title="Nodes that take no jobs now", box=box.SIMPLE, title_justify="left")
        for column in ("node", "state", "reason"):
            closed.add_column(column, overflow="fold")
        for closed_node in result.unusable:
            closed.add_row(closed_node.node, closed_node.state, shorten_text(closed_node.reason))
        parts.append(closed)
    parts.extend(f"note: {note}" for note in result.notes)
    return render_text(*parts, width=width)


def explanation_text(e: Explanation, width: int | None = None) -> str:
    """What ``explain`` prints: where the job stands and why, the job as parsed, every node
    and device considered with the first limit that keeps it out, and what would make it
    fit."""
    code = f" ({e.code})" if e.code else ""
    lines: list[Table | str] = [f"job {e.job}: {e.state.replace('_', ' ')}{code}", f"  {e.reason}"]
    if e.job_fields:
        values = " ".join(f"{k}={v}" for k, v in e.job_fields.items() if k != "id")
        lines.append(f"as parsed: {values}")
    if e.checks:
        counts: dict[str, int] = defaultdict(int)
        for c in e.checks:
            counts[c.limit or "fits"] += 1
        summary = ", ".join(f"{limit} {n}" for limit, n in counts.items())
        table = Table(
            title=f"Considered by policy {e.policy} ({summary})",
            box=box.SIMPLE,
            title_justify="left",
        )
        for column in ("node", "device", "first limit", "detail"):
            table.add_column(column, overflow="fold")
        for c in e.checks:
            table.add_row(c.node, c.device or "-", c.limit or "fits", c.detail)
        lines.append(table)
    if e.remedies:
        lines.append("What would make it fit:")
        lines.extend(f"  - {r}" for r in e.remedies)
    if e.ahead:
        lines.append("Later jobs placed where it could go:")
        lines.extend(f"  - {a}" for a in e.ahead)
    return render_text(*lines, width=width)
