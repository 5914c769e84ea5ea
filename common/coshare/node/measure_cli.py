"""``coshare node check | probe membw | facts | freeze | thaw | lend | reclaim | trial``: what
the node measures and the controls an operator uses.

::

    coshare node check [--output table|json]
    coshare node probe membw [--cpus LIST] [--init] [--output table|json]
    coshare node facts [--output table|json]
    coshare node freeze --job ID [--socket PATH] [--output table|json]
    coshare node thaw --job ID [--socket PATH] [--output table|json]
    coshare node lend --job GPU_JOB --to CPU_JOB --cpus LIST [--socket PATH] [--output ...]
    coshare node reclaim --job GPU_JOB --from CPU_JOB [--cpus LIST] [--socket PATH] [--output ...]
    coshare node trial --job ID --partners ID,... [--socket PATH] [--timeout-s S]

``check`` lists every capability found or missing and where it looked
(:mod:`coshare.node.check`); ``probe membw`` streams on cores and compares with the idle
baseline ``--init`` records (:mod:`coshare.node.membw`); ``facts`` shows what the node daemon
last wrote for the planner; ``freeze``/``thaw`` ask the daemon over the control socket
(operators only; both idempotent, and they say when nothing was to do); ``lend``/``reclaim``
move harvested cores between a GPU job's and a CPU job's cpusets (operators only, idempotent;
:mod:`coshare.node.harvest`); ``trial`` asks the daemon to measure a ``membw`` trial co-run
and prints its answer line (what a planner runs on the node through the scheduler).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from coshare.cli.exit_codes import EXIT_RUNTIME
from coshare.cli.main import AppContext, pass_app
from coshare.cli.render import render_text
from coshare.errors import FactsError, NodeError, ReplyError
from coshare.ledger.facts import NodeFacts, parse_facts
from coshare.node import lifecycle
from coshare.node.check import missing_enforcement, node_capabilities
from coshare.node.membw import ProbeFiles, probe
from coshare.node.sampler import facts_path
from coshare.node.spec import check_job_id, format_cpu_list, parse_cpu_list


def output_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--output table|json`` (every node measurement and control command)."""
    return click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table: for people; json: for tools.",
    )(func)


@click.command()
@output_option
@pass_app
def check(app: AppContext, output: str) -> None:
    """List every capability this node has or lacks, and where it looked."""
    config = app.config.node
    caps = node_capabilities(
        config, lambda: lifecycle.node_cgroups(config), lifecycle.node_resctrl(config)
    )
    unenforced = missing_enforcement(caps)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "capabilities": [c.to_dict() for c in caps],
                    "enforcement": "missing" if unenforced else "found",
                },
                indent=1,
            )
        )
    else:
        table = Table(box=box.SIMPLE, title="Node capabilities", title_justify="left")
        for column in ("capability", "status", "where", "detail"):
            table.add_column(column, overflow="fold")
        for cap in caps:
            table.add_row(cap.name, cap.status, cap.where, cap.detail)
        missing = sum(c.status == "missing" for c in caps)
        click.echo(render_text(table, f"{len(caps) - missing} found, {missing} missing"), nl=False)
    if unenforced:
        names = ", ".join(c.name for c in unenforced)
        click.echo(
            f"coshare: error: this node cannot enforce jobs' limits ({names} missing): "
            "jobs placed here would run without them",
            err=True,
        )
        raise SystemExit(EXIT_RUNTIME)


@click.command()
@output_option
def gpus(output: str) -> None:
    """List each GPU and MIG instance NVML sees: id, UUID, memory, SMs, MIG profile and
    parent, and which of them the planner may place jobs on."""
    from coshare.node.gpus import discover
    from coshare.node.nvml import start_nvml

    found = discover(start_nvml())
    if output == "json":
        click.echo(json.dumps({"gpus": [d.to_dict() for d in found]}, indent=1))
        return
    table = Table(box=box.SIMPLE, title="GPUs (NVML)", title_justify="left")
    for column in ("id", "kind", "memory MiB", "SMs", "profile", "planned", "uuid", "note"):
        table.add_column(column, overflow="fold")
    for d in found:
        table.add_row(
            d.id,
            d.kind,
            str(d.memory_mib),
            "-" if d.sms is None else str(d.sms),
            d.profile or "-",
            "yes" if d.planned else "no",
            d.uuid,
            d.reason,
        )
    planned = sum(d.planned for d in found)
    click.echo(render_text(table, f"{planned} of {len(found)} planned as devices"), nl=False)


@click.group()
def probe_group() -> None:
    """Measure the node (memory bandwidth)."""


@probe_group.command()
@click.option(
    "--cpus",
    default=None,
    metavar="LIST",
    help="Cores to stream on (e.g. 2-3); default: every core coshare may use.",
)
@click.option(
    "--init",
    is_flag=True,
    help="First record the idle node's baseline (run once, on an idle node).",
)
@output_option
@pass_app
def membw(app: AppContext, cpus: str | None, init: bool, output: str) -> None:
    """Stream over an array larger than the LLC on the given cores; print GB/s and the share
    of the idle node's bandwidth (libDistGen's probe, poncos section 6)."""
    config = app.config.node
    allowed = lifecycle.node_cgroups(config).allowed_cpus()
    chosen = parse_cpu_list(cpus) if cpus is not None else None
    result, baseline = probe(
        ProbeFiles(Path(config.state_dir)),
        allowed,
        chosen,
        init=init,
        size_mib=config.probe_array_mib,
    )
    if output == "json":
        data: dict[str, Any] = {"probe": result.to_dict()}
        if baseline is not None:
            data["baseline"] = baseline.to_dict()
        click.echo(json.dumps(data, indent=1))
        return
    m = result.measurement
    if baseline is not None:
        for cores, gbps in sorted(baseline.by_cpus.items(), key=lambda kv: (len(kv[0]), kv)):
            click.echo(f"baseline: cores {format_cpu_list(cores)}: {gbps:.2f} GB/s")
    click.echo(
        f"membw on cores {format_cpu_list(m.cpus)}: {m.gbps:.2f} GB/s, "
        f"{100 * result.fraction:.0f}% of the idle {result.baseline_gbps:.2f} GB/s "
        f"(baseline of {result.baseline_source}); {m.seconds:.2f} s streaming "
        f"{m.array_mib} MiB ({m.method})"
    )


def facts_dict(facts: NodeFacts) -> dict[str, Any]:
    """Facts as JSON (units in the names)."""
    membw = facts.membw
    return {
        "at_s": facts.at_s,
        "membw": None
        if membw is None
        else {
            "avail_gbps": membw.avail_gbps,
            "baseline_gbps": membw.baseline_gbps,
            "available": round(membw.fraction, 4),
            "cores": membw.cores,
            "at_s": membw.at_s,
        },
        "llc_ways": facts.llc_ways,
        "llc_ways_free": facts.llc_ways_free,
        "loads": [
            {
                "job": x.job,
                "mean_cores": x.mean_cores,
                "last_cores": x.last_cores,
                "max_cores": x.max_cores,
                "window_s": x.window_s,
            }
            for x in facts.loads
        ],
        "copies": [{"job": x.job, "mbps": x.mbps} for x in facts.copies],
    }


@click.command()
@output_option
@pass_app
def facts(app: AppContext, output: str) -> None:
    """Show the facts the node daemon last wrote for the planner (state_dir/facts)."""
    path = facts_path(app.config.node)
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise NodeError(
            f"no node facts at {path} ({exc.strerror}): is the node daemon "
            "(coshare node gate) running?"
        ) from exc
    try:
        found = parse_facts(text)
    except FactsError as exc:
        raise NodeError(f"the node facts at {path} are unreadable: {exc}") from exc
    if output == "json":
        click.echo(json.dumps(facts_dict(found), indent=1))
        return
    age = time.time() - found.at_s
    lines = [f"facts of {age:.0f} s ago ({path})"]
    m = found.membw
    lines.append(
        "membw: no probe yet"
        if m is None
        else f"membw: {m.avail_gbps:.2f} GB/s on {m.cores} cores, {100 * m.fraction:.0f}% of "
        f"the idle {m.baseline_gbps:.2f} GB/s, probed {time.time() - m.at_s:.0f} s ago"
    )
    lines.append(
        "LLC ways: no resctrl"
        if found.llc_ways is None
        else f"LLC ways: {found.llc_ways_free} of {found.llc_ways} free"
    )
    table = Table(box=box.SIMPLE, title="CPU load per job (cores busy)", title_justify="left")
    for column in ("job", "mean", "last", "max", "over s"):
        table.add_column(column)
    for x in found.loads:
        table.add_row(
            x.job,
            f"{x.mean_cores:.2f}",
            f"{x.last_cores:.2f}",
            f"{x.max_cores:.2f}",
            f"{x.window_s:.0f}",
        )
    copies = ", ".join(f"{x.job} {x.mbps:.1f} MB/s" for x in found.copies)
    lines.append(f"copy bandwidth (NVML PCIe): {copies or 'none measured'}")
    click.echo(render_text(*lines, table if found.loads else "no job's load sampled yet"), nl=False)


def _control(verb: str, job: str, socket_path: str) -> dict[str, str]:
    return _request(f"{verb} job={check_job_id(job)}", socket_path)


def _freeze_command(verb: str, done: str, already: str) -> click.Command:
    @click.command(
        name=verb.lower(),
        help=f"{verb.capitalize()} every process of a job's group (operators only; idempotent).",
    )
    @click.option("--job", required=True, help="The job.")
    @click.option(
        "--socket",
        "socket_path",
        default=None,
        help="Control socket (default: node.control_socket).",
    )
    @output_option
    @pass_app
    def command(app: AppContext, job: str, socket_path: str | None, output: str) -> None:
        fields = _control(verb, job, socket_path or app.config.node.control_socket)
        changed = fields.get("changed") == "1"
        if output == "json":
            click.echo(
                json.dumps(
                    {
                        "job": fields.get("job", job),
                        "frozen": fields.get("frozen") == "1",
                        "changed": changed,
                    }
                )
            )
        else:
            click.echo(f"job {job} {done}" if changed else f"job {job} was {already}; nothing done")

    return command


freeze = _freeze_command("FREEZE", "frozen", "frozen already")
thaw = _freeze_command("THAW", "thawed", "not frozen")


def _loan_reply(fields: dict[str, str], output: str, line: str) -> None:
    if output == "json":
        click.echo(
            json.dumps(
                {k: (v == "1" if k in ("changed", "requeue") else v) for k, v in fields.items()}
            )
        )
    else:
        click.echo(line)


@click.command(name="lend")
@click.option("--job", required=True, help="The GPU job that lends.")
@click.option("--to", "to", required=True, help="The CPU-only job that gets the cores.")
@click.option("--cpus", required=True, help="The cores, in the kernel's list format (3-5,8).")
@click.option(
    "--socket", "socket_path", default=None, help="Control socket (default: node.control_socket)."
)
@output_option
@pass_app
def lend(
    app: AppContext, job: str, to: str, cpus: str, socket_path: str | None, output: str
) -> None:
    """Take cores out of a running GPU job's cpuset and give them to a CPU-only job's group
    (never shared; operators only; idempotent)."""
    line = (
        f"LEND job={check_job_id(job)} to={check_job_id(to)} "
        f"cpus={format_cpu_list(parse_cpu_list(cpus))}"
    )
    fields = _request(line, socket_path or app.config.node.control_socket)
    _loan_reply(
        fields,
        output,
        (
            f"job {job} lent cpus {fields.get('lent')} to job {to}: "
            f"{job} has {fields.get('cpus')}, {to} has {fields.get('to_cpus')}"
            if fields.get("changed") == "1"
            else f"job {job} had lent cpus {fields.get('lent')} to job {to} already; nothing done"
        ),
    )


@click.command(name="reclaim")
@click.option("--job", required=True, help="The GPU job that gets its cores back.")
@click.option("--from", "from_", required=True, help="The CPU-only job that gives them back.")
@click.option("--cpus", default=None, help="Only these cores (default: all lent to it).")
@click.option(
    "--socket", "socket_path", default=None, help="Control socket (default: node.control_socket)."
)
@output_option
@pass_app
def reclaim(
    app: AppContext, job: str, from_: str, cpus: str | None, socket_path: str | None, output: str
) -> None:
    """Give a GPU job back cores it lent; the CPU job is shrunk to what remains, or, when
    nothing would, reported for requeueing (exit 0; nothing changed)."""
    line = f"RECLAIM job={check_job_id(job)} from={check_job_id(from_)}"
    if cpus is not None:
        line += f" cpus={format_cpu_list(parse_cpu_list(cpus))}"
    fields = _request(line, socket_path or app.config.node.control_socket)
    if fields.get("requeue") == "1":
        text = (
            f"job {from_} has no core of its own: giving back cpus {fields.get('lent')} "
            f"would leave it none; nothing done: requeue job {from_} through the scheduler "
            f"(its end gives job {job} the cores back)"
        )
    elif fields.get("changed") == "1":
        text = (
            f"job {job} got cores back from job {from_}: {job} has {fields.get('cpus')}, "
            f"{from_} has {fields.get('from_cpus')}"
        )
    else:
        text = f"job {job} had its cores back from job {from_} already; nothing done"
    _loan_reply(fields, output, text)


@click.command(name="trial")
@click.option("--job", required=True, help="The job on trial (as this node knows it).")
@click.option(
    "--partners", required=True, help="The jobs frozen while it is measured, comma-separated."
)
@click.option(
    "--socket", "socket_path", default=None, help="Control socket (default: node.control_socket)."
)
@click.option(
    "--timeout-s",
    type=click.FloatRange(0.1, 3600),
    default=30.0,
    show_default=True,
    help="How long to wait for the daemon's answer.",
)
@pass_app
def trial(
    app: AppContext, job: str, partners: str, socket_path: str | None, timeout_s: float
) -> None:
    """Measure a trial co-run of the ``membw`` policy on this node: the daemon freezes the
    partners, probes the memory bandwidth left on their cores, and thaws them (operators
    only). Prints the daemon's answer as one line, ``OK job=J share=S ...`` or ``ERR code
    text`` (exit 1): what a planner runs here through the scheduler
    (``policy.membw.probe_via: step``)."""
    from coshare.node.control import launcher

    line = (
        f"TRIAL job={check_job_id(job)} partners="
        f"{','.join(check_job_id(p) for p in partners.split(','))}"
    )
    path = socket_path or app.config.node.control_socket
    try:
        fields = launcher.request(path, line, timeout_s)
    except launcher.ControlError as exc:
        click.echo(f"ERR {exc.code} {' '.join(exc.text.split())}")
        raise SystemExit(1) from None
    click.echo("OK " + " ".join(f"{k}={v}" for k, v in fields.items()))


def _request(line: str, socket_path: str) -> dict[str, str]:
    from coshare.node.control import launcher

    try:
        return launcher.request(socket_path, line)
    except launcher.ControlError as exc:
        raise ReplyError(exc.code, exc.text) from exc


def register(group: click.Group) -> None:
    """Add these commands to ``coshare node``."""
    group.add_command(check)
    group.add_command(gpus)
    group.add_command(probe_group, name="probe")
    group.add_command(facts)
    group.add_command(freeze)
    group.add_command(thaw)
    group.add_command(lend)
    group.add_command(reclaim)
    group.add_command(trial)
