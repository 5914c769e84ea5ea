"""``coshare slurm ...``: the Slurm adapter's commands.

::

    coshare slurm cycle [--dry-run] [--policy NAME] [--threads strict|soft] [--verbose]
    coshare slurm show

``cycle`` exits 0 when every write went through (jobs may still wait), 1 when Slurm could
not be read or written (slurmctld down: the next cycle recovers), 2 for a bad
configuration, 3 when some jobs' writes failed. An overlapping cycle (cron) that finds the
lock taken exits 0 at once and says so.
"""

from __future__ import annotations

import logging

import click
from coshare.cli import AppContext, configured, pass_app, policy_options
from coshare.planner import run_cycle, timed_plan
from coshare.policies import make_policy
from coshare.render import cycle_summary, plan_table

from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient
from slurm_addon.lock import CycleBusy, cycle_lock
from slurm_addon.show import render_show


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="coshare: %(levelname)s: %(message)s",
    )


@click.group()
def slurm() -> None:
    """Plan annotated Slurm jobs onto shared devices (run on the controller)."""


@slurm.command()
@click.option("--dry-run", is_flag=True, help="Read and plan, but write nothing; say what "
              "would be written.")  # fmt: skip
@click.option("--policy", "policy_name", default=None, help="Policy (config: policy.name).")
@click.option("--threads", type=click.Choice(["strict", "soft"]), default=None,
              help="Thread limit mode (config: policy.threads).")  # fmt: skip
@click.option("--verbose", "-v", is_flag=True, help="Also print the plan per device.")
@pass_app
@click.pass_context
def cycle(
    ctx: click.Context, app: AppContext, dry_run: bool, policy_name: str | None,
    threads: str | None, verbose: bool,
) -> None:  # fmt: skip
    """Run one planning cycle: read Slurm, plan, write placements and release."""
    _logging(verbose)
    config = configured(app, policy_name, threads, None)
    policy = make_policy(config.policy.name, policy_options(config))
    adapter = SlurmAdapter(SlurmClient(config.slurm), config)
    try:
        with cycle_lock(config.slurm.lock_file):
            report = run_cycle(
                adapter, policy, adapter, dry_run=dry_run,
                strict_threads=config.policy.threads == "strict",
            )  # fmt: skip
    except CycleBusy as busy:
        click.echo(f"coshare: another cycle holds {busy.args[0]}; this one did nothing")
        return
    if verbose and report.snapshot is not None:
        click.echo(plan_table(report.snapshot, report.plan), nl=False)
    click.echo(cycle_summary(report), nl=False)
    verb = "would hold" if dry_run else "held"
    for held in adapter.held:
        click.echo(f"  {verb} {held.job}: {held.reason}")
    ctx.exit(report.exit_status)


@slurm.command()
@pass_app
def show(app: AppContext) -> None:
    """Show running and planned jobs per node and device, and why each waiting job waits."""
    _logging(False)
    config = app.config
    adapter = SlurmAdapter(SlurmClient(config.slurm), config)
    result = adapter.read()
    assert adapter.view is not None
    plan = timed_plan(make_policy(config.policy.name, policy_options(config)), result.snapshot)
    click.echo(render_show(adapter.view, plan), nl=False)
