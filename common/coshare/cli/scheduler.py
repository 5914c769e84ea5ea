"""``coshare condor|slurm cycle|show``: the commands both scheduler adapters share, defined once.

::

    coshare SCHEDULER cycle [--policy NAME] [--threads strict|soft] [--seed N] [--dry-run]
                            [-v] [--output table|json] [--log-format text|json]
    coshare SCHEDULER show  [--policy NAME] [--threads strict|soft] [--seed N]
                            [-v] [--output table|json]
    coshare SCHEDULER explain JOB [--policy NAME] [--threads strict|soft] [--seed N]
                            [--output table|json]

An adapter package builds its group with :func:`scheduler_group`, giving only how to open
its adapter (:class:`coshare.ports.Adapter`) from the configuration and where its cycle
lock is. ``cycle`` reads, plans, checks and writes under the queue's lock (a second cycle
on the same queue says so and exits 0); ``show`` reads and plans, and writes nothing;
``explain`` reads and explains one job (:mod:`coshare.policies.explain`), and writes nothing.

A cycle that writes exports its Prometheus metrics where ``metrics:`` says
(:mod:`coshare.cycle.metrics`); ``--log-format json`` writes its log records (one for the cycle,
with its figures, and one per refused, skipped, failed or withdrawn job; with ``-v``, what
the adapter does) as JSON lines on standard error (:mod:`coshare.cli.logs`).

Exit statuses of ``cycle``, for cron: 0 every write went through (jobs may still wait); 1
the scheduler could not be read or written (the next cycle recovers); 2 bad configuration;
3 some jobs' writes failed (they are planned again next cycle).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import click

from coshare.cli.cycles import log_notes, run_once
from coshare.cli.logs import log_format_option, setup_logging
from coshare.cli.main import (
    AppContext,
    configured,
    echo_explanation,
    pass_app,
    policy_flags,
    policy_options,
)
from coshare.cli.render import cycle_summary, cycle_to_dict, plan_table, show_text
from coshare.config import Config
from coshare.cycle.run import checked_plan
from coshare.errors import CoshareError, CycleBusy
from coshare.policies import make_policy
from coshare.policies.explain import SNAPSHOT_NAMES, explain, find_job
from coshare.ports import Adapter
from coshare.profiles.learn_cycle import learn_step
from coshare.schema import snapshot_to_dict

OpenAdapter = Callable[[Config], Adapter]
"""Builds a scheduler's adapter from the configuration (the adapter package's ``open``)."""


def _verbose_flag(func: Any) -> Any:
    return click.option(
        "--verbose",
        "-v",
        is_flag=True,
        help="Also log what the adapter does, and print the plan per device.",
    )(func)


def _output_flag(func: Any) -> Any:
    return click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="json: for tools (cycle: the plan and what was written; show: "
        "the snapshot, input of `coshare plan`).",
    )(func)


def _logging(verbose: bool, log_format: str = "text") -> None:
    # JSON logs are for log shippers: they get the cycle's own record (INFO) without -v.
    level = logging.INFO if verbose or log_format == "json" else logging.WARNING
    setup_logging(log_format, level, text_format="coshare: %(levelname)s: %(message)s")


def _warn(notes: tuple[str, ...]) -> None:
    for note in notes:
        click.echo(f"coshare: warning: {note}", err=True)


def scheduler_group(
    name: str,
    summary: str,
    open_adapter: OpenAdapter,
    lock_file: Callable[[Config], str | None],
    names: Mapping[str, str] = SNAPSHOT_NAMES,
) -> click.Group:
    """The ``coshare NAME`` group with its ``cycle``, ``show`` and ``explain`` commands.

    Args:
        name: the scheduler's command (and configuration section) name.
        summary: the group's help text.
        open_adapter: builds the adapter from the configuration.
        lock_file: the cycle lock of a configuration (``None``: no lock).
        names: how a user of this scheduler sets each job value (``explain``'s advice).
    """

    @click.group(name=name, help=summary)
    def group() -> None:
        pass

    @group.command()
    @policy_flags
    @click.option(
        "--dry-run", is_flag=True, help="Read and plan, write nothing; say what would be written."
    )
    @_verbose_flag
    @_output_flag
    @log_format_option
    @pass_app
    @click.pass_context
    def cycle(
        ctx: click.Context,
        app: AppContext,
        policy_name: str | None,
        threads: str | None,
        seed: int | None,
        dry_run: bool,
        verbose: bool,
        output: str,
        log_format: str,
    ) -> None:
        """Run one planning cycle: read the queue, plan, check the plan, write it in batches."""
        _logging(verbose, log_format)
        config = configured(app, policy_name, threads, seed)
        learned = learn_step(config, time.time(), dry_run)
        policy = make_policy(config.policy.name, policy_options(config))
        try:
            report = run_once(
                name,
                config,
                policy,
                open_adapter,
                lock_file(config),
                dry_run=dry_run,
                log_cycle=log_format == "json",
            )
        except CycleBusy as busy:
            click.echo(f"coshare: {busy}")
            return
        except CoshareError as error:
            if log_format != "json":
                raise  # one plain message from the command line's error handler
            # Standard error stays one JSON object per line.
            logging.getLogger("coshare.cycle").error(
                "cycle failed: %s", error, extra={"scheduler": name, "status": error.exit_status}
            )
            ctx.exit(error.exit_status)
        notes = (*report.notes, *learned.notes)
        if log_format == "json":
            log_notes(name, notes)
            for line in learned.counted:
                logging.getLogger("coshare.cycle").info(
                    "learned: %s", line, extra={"scheduler": name, "outcome": "learned"}
                )
        else:
            _warn(notes)
            for line in learned.counted:
                click.echo(f"coshare: learned: {line}", err=True)
        if output == "json":
            click.echo(json.dumps(cycle_to_dict(report), indent=1))
        else:
            if verbose and report.snapshot is not None:
                click.echo(plan_table(report.snapshot, report.plan), nl=False)
            click.echo(cycle_summary(report), nl=False)
        ctx.exit(report.exit_status)

    @group.command()
    @policy_flags
    @_verbose_flag
    @_output_flag
    @pass_app
    def show(
        app: AppContext,
        policy_name: str | None,
        threads: str | None,
        seed: int | None,
        verbose: bool,
        output: str,
    ) -> None:
        """Show the queue as coshare reads it: every node and device with what runs and is
        planned there, and why each waiting job waits (writes nothing)."""
        _logging(verbose)
        config = configured(app, policy_name, threads, seed)
        result = open_adapter(config).read()
        if output == "json":
            _warn(result.notes)
            click.echo(json.dumps(snapshot_to_dict(result.snapshot), indent=1))
            return
        plan = checked_plan(
            make_policy(config.policy.name, policy_options(config)),
            result.snapshot,
            strict_threads=config.policy.threads == "strict",
        ).plan
        click.echo(show_text(result, plan), nl=False)

    @group.command("explain")
    @click.argument("job")
    @policy_flags
    @click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="json: for tools.",
    )
    @pass_app
    def explain_command(
        app: AppContext,
        job: str,
        policy_name: str | None,
        threads: str | None,
        seed: int | None,
        output: str,
    ) -> None:
        """Explain one job: its annotations as parsed, every node and device considered with
        the first limit that keeps it out, and what would make it fit (writes nothing)."""
        config = configured(app, policy_name, threads, seed)
        policy = make_policy(config.policy.name, policy_options(config))
        result = open_adapter(config).read()
        _warn(result.notes)
        strict = config.policy.threads == "strict"
        plan = None
        if find_job(job, [j.id for j in result.snapshot.pending]) is not None:
            # planned as the cycle plans it: a job it leaves out is explained with its reason
            plan = checked_plan(policy, result.snapshot, strict_threads=strict).plan
        explanation = explain(
            result.snapshot,
            policy,
            job,
            plan=plan,
            rejected=result.rejected,
            waiting=result.waiting,
            names=names,
            strict_threads=strict,
        )
        echo_explanation(explanation, output)

    return group
