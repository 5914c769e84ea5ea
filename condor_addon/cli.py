"""``coshare condor``: run a planning cycle on an HTCondor pool, or show what it would do.

::

    coshare condor cycle [--dry-run] [--policy NAME]    read, plan, check, write (cron/systemd)
    coshare condor show [--output table|json] [--all]   the pool as coshare sees it, and the plan

Registered lazily in :data:`coshare.cli.LAZY_COMMANDS`, so other commands never import the
bindings. Exit statuses: 0 ok; 1 the pool could not be read or written; 2 bad configuration;
3 some edits failed (those jobs are planned again next cycle).
"""

from __future__ import annotations

import json

import click
from coshare.cli import AppContext, configured, pass_app, policy_options
from coshare.config import Config
from coshare.planner import run_cycle, timed_plan
from coshare.policies import make_policy, policy_names
from coshare.render import cycle_summary, plan_table
from coshare.schema import snapshot_to_dict

from condor_addon.client import CondorClient
from condor_addon.editor import CondorEditor
from condor_addon.source import CondorSource


def _source(config: Config, client: CondorClient) -> CondorSource:
    return CondorSource(client, device_kinds=config.device_kinds,
                        replan_after_s=config.cycle.replan_after_s)  # fmt: skip


def _warn(source: CondorSource) -> None:
    for warning in source.warnings:
        click.echo(f"coshare: warning: {warning}", err=True)


_policy_option = click.option(
    "--policy", "policy_name", default=None,
    help=f"Policy: {', '.join(policy_names())} (config: policy.name, default knapsack).",
)  # fmt: skip


@click.group()
def condor() -> None:
    """The HTCondor add-on: plan annotated idle jobs onto shared devices."""


@condor.command()
@click.option("--dry-run", is_flag=True, help="Read and plan, write nothing; say what would be.")
@_policy_option
@pass_app
@click.pass_context
def cycle(ctx: click.Context, app: AppContext, dry_run: bool, policy_name: str | None) -> None:
    """Run one planning cycle: read the pool, plan, check the plan, write it in batches."""
    config = configured(app, policy_name, None, None)
    client = CondorClient(config.condor)
    source = _source(config, client)
    editor = CondorEditor(client, hold_invalid=config.condor.hold_invalid,
                          read=lambda: source.jobs)  # fmt: skip
    report = run_cycle(source, make_policy(config.policy.name, policy_options(config)), editor,
                       dry_run=dry_run, strict_threads=config.policy.threads == "strict")
    _warn(source)
    click.echo(cycle_summary(report), nl=False)
    ctx.exit(report.exit_status)


@condor.command()
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="json: the snapshot, as input for `coshare plan`.")
@click.option("--all", "show_all", is_flag=True, help="Also list devices that get nothing.")
@_policy_option
@pass_app
def show(app: AppContext, output: str, show_all: bool, policy_name: str | None) -> None:
    """Show the pool as coshare reads it and what the next cycle would place (writes nothing)."""
    config = configured(app, policy_name, None, None)
    source = _source(config, CondorClient(config.condor))
    result = source.read()
    _warn(source)
    if output == "json":
        click.echo(json.dumps(snapshot_to_dict(result.snapshot), indent=1))
        return
    plan = timed_plan(make_policy(config.policy.name, policy_options(config)), result.snapshot)
    snap = result.snapshot
    planned = sum(r.state == "planned" for r in snap.running)
    click.echo(
        f"{len(snap.nodes)} nodes, {sum(len(n.devices) for n in snap.nodes)} devices; "
        f"{len(snap.running) - planned} running, {planned} planned not started, "
        f"{len(snap.pending)} pending, {len(result.rejected)} refused"
    )
    click.echo(plan_table(snap, plan, show_all=show_all), nl=False)
    for r in result.rejected:
        click.echo(f"  refused {r.job}: {r.reason}")
