"""``coshare node ...``: the node helpers' commands.

::

    coshare node check [--output table|json]
    coshare node probe membw [--cpus LIST] [--init] [--output table|json]
    coshare node facts [--output table|json]
    coshare node freeze|thaw --job ID [--output table|json]
    coshare node trial --job ID --partners ID,... [--socket PATH] [--timeout-s S]
    coshare node gate [--device ID=THREADS]... [--no-watch] [--log-format text|json]
    coshare node watch [--once] [--log-format text|json]
    coshare node offload [--threads N] [--device ID] -- CMD [ARG...]
    coshare node job-start --job ID [--cores N | --cpus LIST] [--memory-mib M]
                           [--device ID]... [--device-memory-mib M] [--device-threads T]
                           [--llc-ways W] [--membw-percent P]
    coshare node job-exec --job ID [--reason-file PATH] -- CMD [ARG...]
    coshare node job-attach --job ID PID...
    coshare node job-end --job ID [--output table|json]
    coshare node job-run --job ID [job-start options] -- CMD [ARG...]
    coshare node launch run --socket PATH --job ID [...] -- CMD [ARG...]
    coshare node cleanup [--output table|json]

Commands that print a result take ``--output table|json`` (``text`` is ``table``, as
before); ``gate``, ``watch``, ``offload``, ``job-exec``, ``job-run`` and ``launch`` run until
something ends and print what happens, or hand the terminal to the job.

Paths and the cgroup layout come from the ``node:`` section of the configuration (or
``COSHARE_NODE_*`` variables, e.g. ``COSHARE_NODE_STATE_DIR``).
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from coshare.cli.logs import log_format_option, setup_logging
from coshare.cli.main import AppContext, pass_app
from coshare.config import NodeConfig
from coshare.errors import JobSpecError
from coshare.node import lifecycle
from coshare.node.cgroups import JobGroup
from coshare.node.gate.client import SOCKET_ENV, GateClient
from coshare.node.jobs import JobRecord
from coshare.node.measure_cli import register as register_measurements
from coshare.node.spec import check_device_id, format_cpu_list, parse_cpu_list

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def node() -> None:
    """Node helpers: job cgroups, the offload gate, the memory watchdog."""


def _config(app: AppContext) -> NodeConfig:
    return app.config.node


def _output_option(help_text: str) -> Callable[[F], F]:
    """``--output table|json`` of the node commands that print a result (``text``, their old
    name for ``table``, still works)."""
    return click.option(
        "--output",
        type=click.Choice(["table", "text", "json"]),
        default="table",
        show_default=True,
        help=help_text,
    )


def _budgets(config: NodeConfig, devices: Sequence[str]) -> dict[str, int]:
    budgets = dict(config.devices)
    for item in devices:
        device, sep, threads = item.partition("=")
        if not sep or not threads.isdigit() or int(threads) < 1:
            raise JobSpecError(f"--device {item!r}: expected ID=THREADS, e.g. 0=240")
        budgets[check_device_id(device)] = int(threads)
    if not budgets:
        raise JobSpecError(
            "the gate manages no device: give --device ID=THREADS or set node.devices"
        )
    return budgets


@node.command()
@click.option(
    "--device",
    "devices",
    multiple=True,
    metavar="ID=THREADS",
    help="A device and its hardware threads (adds to node.devices).",
)
@click.option("--socket", "socket_path", default=None, help="Socket (default: node.gate_socket).")
@click.option(
    "--control-socket",
    default=None,
    help="Job-control socket (default: node.control_socket).",
)
@click.option("--no-watch", is_flag=True, help="Do not run the memory watchdog.")
@click.option("-v", "--verbose", is_flag=True, help="Log every connection.")
@log_format_option
@pass_app
def gate(
    app: AppContext,
    devices: tuple[str, ...],
    socket_path: str | None,
    control_socket: str | None,
    no_watch: bool,
    verbose: bool,
    log_format: str,
) -> None:
    """Run the node daemon: the offload gate, job control and the memory watchdog (and
    Prometheus metrics on node.metrics_address, when set)."""
    from dataclasses import replace

    from coshare.node import daemon

    config = _config(app)
    if socket_path is not None:
        config = replace(config, gate_socket=socket_path)
    if control_socket is not None:
        config = replace(config, control_socket=control_socket)
    setup_logging(log_format, logging.DEBUG if verbose else logging.INFO)
    daemon.main(config, _budgets(config, devices), watch=not no_watch)


@node.command()
@click.option("--once", is_flag=True, help="Check once and exit.")
@log_format_option
@pass_app
def watch(app: AppContext, once: bool, log_format: str) -> None:
    """Run the memory watchdog alone (the gate runs it too): each violation is logged (the
    job, the resource) and its reason printed on standard output."""
    from coshare.node.daemon import device_memory_backend
    from coshare.node.jobs import job_of_pid
    from coshare.node.watchdog import Watchdog

    config = _config(app)
    setup_logging(log_format, logging.INFO)
    cgroups = lifecycle.node_cgroups(config)
    watchdog = Watchdog(
        lifecycle.node_store(config),
        device_memory_backend(config),
        lambda pid: job_of_pid(pid, cgroups),
        config.kill_timeout_s,
    )
    while True:
        for violation in watchdog.check():
            click.echo(violation.reason())
        if once:
            return
        time.sleep(config.watch_interval_s)


@node.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Device threads of the offload (default: what the job declared).",
)
@click.option("--device", default=None, help="Device (default: the job's only device).")
@click.option(
    "--socket",
    "socket_path",
    default=None,
    help=f"Gate socket (default: ${SOCKET_ENV}, else node.gate_socket).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def offload(
    app: AppContext,
    threads: int | None,
    device: str | None,
    socket_path: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND as one offload: hold the device threads while it runs."""
    import os

    path = socket_path or os.environ.get(SOCKET_ENV) or _config(app).gate_socket
    with GateClient(path) as client, client.offload(threads, device):
        try:
            done = subprocess.run(list(command), check=False)
        except OSError as exc:
            raise JobSpecError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
    code = done.returncode
    sys.exit(code if code >= 0 else 128 - code)


def _start_options(func: Any) -> Any:
    options = [
        click.option(
            "--membw-percent",
            type=click.IntRange(1, 100),
            default=None,
            help="Memory-bandwidth share where the node has MBA (resctrl MB:).",
        ),
        click.option(
            "--llc-ways",
            type=click.IntRange(min=1),
            default=None,
            help="LLC ways of its own (a resctrl group; Spread-n-Share).",
        ),
        click.option(
            "--device-threads",
            type=click.IntRange(min=1),
            default=None,
            help="Declared device threads (the gate's limit for this job).",
        ),
        click.option(
            "--device-memory-mib",
            type=click.IntRange(min=1),
            default=None,
            help="Declared device memory per device (the watchdog's limit).",
        ),
        click.option(
            "--device",
            "devices",
            multiple=True,
            help="A device the job may use (repeat, or comma-separated).",
        ),
        click.option(
            "--memory-mib", type=click.IntRange(min=1), default=None, help="Host memory limit."
        ),
        click.option(
            "--cpus",
            default=None,
            metavar="LIST",
            help="Exactly these CPUs (e.g. 0-3,8); they must be free.",
        ),
        click.option(
            "--cores",
            type=float,
            default=None,
            help="How many cores; coshare picks free ones (fractions round up).",
        ),
    ]
    for option in options:
        func = option(func)
    return func


def _start(
    config: NodeConfig,
    job: str,
    cores: float | None,
    cpus: str | None,
    memory_mib: int | None,
    devices: tuple[str, ...],
    device_memory_mib: int | None,
    device_threads: int | None,
    llc_ways: int | None = None,
    membw_percent: int | None = None,
) -> JobRecord:
    device_list = [d for item in devices for d in item.split(",") if d]
    return lifecycle.job_start(
        config,
        job,
        cores=cores,
        cpus=parse_cpu_list(cpus) if cpus is not None else None,
        memory_mib=memory_mib,
        devices=device_list,
        device_memory_mib=device_memory_mib,
        device_threads=device_threads,
        llc_ways=llc_ways,
        membw_percent=membw_percent,
    )


@node.command("job-start")
@click.option("--job", required=True, help="The scheduler's job id.")
@_start_options
@_output_option("json: the job's record.")
@pass_app
def job_start(
    app: AppContext,
    job: str,
    cores: float | None,
    cpus: str | None,
    memory_mib: int | None,
    devices: tuple[str, ...],
    device_memory_mib: int | None,
    device_threads: int | None,
    llc_ways: int | None,
    membw_percent: int | None,
    output: str,
) -> None:
    """Create the job's cgroup (own cores, memory limit) and register it with the node."""
    record = _start(
        _config(app),
        job,
        cores,
        cpus,
        memory_mib,
        devices,
        device_memory_mib,
        device_threads,
        llc_ways,
        membw_percent,
    )
    if output == "json":
        click.echo(json.dumps(record.to_dict(), sort_keys=True))
    else:
        spec = record.spec
        click.echo(
            f"job {spec.job}: cpus {format_cpu_list(spec.cpus) or 'not pinned'}, "
            f"memory {spec.memory_mib or 'unlimited'} MiB, devices "
            f"{','.join(spec.devices) or 'none'} (cgroup {record.cgroup_version})"
        )


def _forwarding(child: subprocess.Popen[bytes], group: JobGroup) -> None:
    # Installed from the command (the process's main), never from library code.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, lambda s, _f: lifecycle.forward_signal(group, s))


def _exec(config: NodeConfig, job: str, command: tuple[str, ...], reason_file: Path | None) -> int:
    result = lifecycle.job_exec(config, job, command, on_spawn=_forwarding)
    if result.reason is not None:
        click.echo(result.reason, err=True)
        if reason_file is not None:
            reason_file.write_text(result.reason + "\n")
    return result.status


@node.command("job-exec", context_settings={"ignore_unknown_options": True})
@click.option("--job", required=True, help="A job started with job-start.")
@click.option(
    "--reason-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write why coshare killed the job here (nothing is written otherwise).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def job_exec(app: AppContext, job: str, reason_file: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND inside the job's group; exit with its status (137 if coshare killed it)."""
    sys.exit(_exec(_config(app), job, command, reason_file))


@node.command("job-attach")
@click.option("--job", required=True, help="A job started with job-start.")
@click.argument("pids", nargs=-1, required=True, type=click.IntRange(min=1))
@pass_app
def job_attach(app: AppContext, job: str, pids: tuple[int, ...]) -> None:
    """Move running processes into the job's group."""
    lifecycle.job_attach(_config(app), job, pids)


def _end_report(result: lifecycle.EndResult, output: str) -> None:
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "job": result.job,
                    "started": result.started,
                    "leftover": result.leftover,
                    "reason": result.reason,
                }
            )
        )
    elif result.reason is not None:
        click.echo(result.reason)


@node.command("job-end")
@click.option("--job", required=True, help="The job.")
@_output_option("table: the kill reason, if any; json: {job, started, leftover, reason}.")
@pass_app
def job_end(app: AppContext, job: str, output: str) -> None:
    """Kill what is left of the job, remove its group and record."""
    _end_report(lifecycle.job_end(_config(app), job), output)


@node.command("job-run", context_settings={"ignore_unknown_options": True})
@click.option("--job", required=True, help="The scheduler's job id.")
@_start_options
@click.option(
    "--reason-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write why coshare killed the job here.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def job_run(
    app: AppContext,
    job: str,
    cores: float | None,
    cpus: str | None,
    memory_mib: int | None,
    devices: tuple[str, ...],
    device_memory_mib: int | None,
    device_threads: int | None,
    llc_ways: int | None,
    membw_percent: int | None,
    reason_file: Path | None,
    command: tuple[str, ...],
) -> None:
    """job-start, job-exec and job-end in one: run COMMAND as the whole job."""
    config = _config(app)
    _start(
        config,
        job,
        cores,
        cpus,
        memory_mib,
        devices,
        device_memory_mib,
        device_threads,
        llc_ways,
        membw_percent,
    )
    try:
        status = _exec(config, job, command, reason_file)
    finally:
        lifecycle.job_end(config, job)
    sys.exit(status)


@node.command(
    "launch",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def launch(args: tuple[str, ...]) -> None:
    """Run a job inside its group as its user, through the node daemon (coshare-launch)."""
    from coshare.node.control import launcher

    launcher.main(list(args))


@node.command()
@_output_option("json: one {job, leftover} per job ended.")
@pass_app
def cleanup(app: AppContext, output: str) -> None:
    """End every job of this node and remove coshare's parent group (node shut-down)."""
    results = lifecycle.node_cleanup(_config(app))
    if output == "json":
        click.echo(json.dumps([{"job": r.job, "leftover": r.leftover} for r in results]))
        return
    for result in results:
        click.echo(
            f"job {result.job}: removed"
            + (f" ({result.leftover} processes killed)" if result.leftover else "")
        )


# The node's measurements and controls (check, probe, facts, freeze, thaw): their own module.
register_measurements(node)
