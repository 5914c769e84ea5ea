"""The ``coshare`` command line.

::

    coshare plan SNAPSHOT|- [--policy NAME] [--output table|json] [--threads strict|soft]
    coshare simulate [--workload NAME|trace:PATH] [--policies a,b] [--footprint] ...
    coshare demo [--jobs N] [--nodes N] [--seeds K]
    coshare config show | coshare config check FILE

Subcommands of the adapters, the node helpers and the simulator are loaded only when used
(:data:`LAZY_COMMANDS`), so ``coshare plan`` does not import scheduler bindings.

Exit statuses (:mod:`coshare.cli.exit_codes`, listed in each command's ``--help``): 0 success;
1 the scheduler or a command failed; 2 bad input (snapshot, config, flags); 3 a cycle ran
but some edits failed. Errors print one message, never a traceback. The command list and
every ``--help`` print with the base install alone; a command whose extra is missing says
which to install when it is run (:mod:`coshare.cli.extras`).
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from coshare.cli.app import AppContext as AppContext
from coshare.cli.app import pass_app as pass_app
from coshare.cli.exit_codes import exit_status_help
from coshare.cli.extras import MissingExtra, missing_extra
from coshare.config import Config, load_config, to_dict, with_overrides
from coshare.errors import CoshareError, InputError, PolicyError, SnapshotError
from coshare.ledger.bounds import unknown_name
from coshare.ledger.trials import merge_programs
from coshare.model import Plan, Snapshot
from coshare.policy_names import DEFAULT_POLICY, POLICY_NAMES
from coshare.profiles.programs import Profile
from coshare.schema import decode_json, parse_snapshot, plan_to_dict
from coshare.system.files import MAX_SNAPSHOT_CHARS, TooLarge, read_bounded, read_stream

if TYPE_CHECKING:
    from coshare.policies import Policy, PolicyOptions
    from coshare.policies.explain import Explanation

# The planner (coshare.cycle.run, coshare.policies, coshare.policies.explain: numpy, the 'planner'
# extra)
# is imported by the commands that plan, not here: a node's commands and --help stay light.

#: Subcommands that live in other modules: name -> "module:attribute".
LAZY_COMMANDS: dict[str, str] = {
    "condor": "condor_addon.cli:condor",
    "node": "coshare.node.cli:node",
    "profile": "coshare.cli.profile:profile",
    "simulate": "coshare.sim.cli:simulate",
    "slurm": "slurm_addon.cli:slurm",
}

#: What ``coshare --help`` says of each of :data:`LAZY_COMMANDS`, without importing it (the
#: simulator loads Dask, the add-ons their bindings): the start of its help, which a unit test
#: keeps equal to the command's own.
LAZY_SUMMARIES: dict[str, str] = {
    "condor": "The HTCondor add-on: plan annotated idle jobs onto shared devices.",
    "node": "Node helpers: job cgroups, the offload gate, the memory watchdog.",
    "profile": "Program profiles of the sns policy (Spread-n-Share): import, check, show where "
    "each comes from (admin or learned), time runs, sweep the LLC ways.",
    "simulate": "Simulate policies on a workload and compare makespan, utilization, footprint "
    "(or, on the Alibaba trace, unallocated GPU capacity).",
    "slurm": "The Slurm add-on: plan annotated Slurm jobs onto shared devices, on the controller.",
}

EXAMPLE_SNAPSHOT = "paper-cluster.json"


class CoshareGroup(click.Group):
    """A click group that loads some subcommands lazily and turns coshare errors into one
    message and the error's exit status."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, as click writes it, without importing the lazy commands."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in LAZY_SUMMARIES:
                summary = click.Command(name, help=LAZY_SUMMARIES[name])
                rows.append((name, summary.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command: click.Command | None
        if cmd_name in LAZY_COMMANDS:
            module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module), attribute)
            except ImportError as exc:
                found = missing_extra(exc)
                if found is None:
                    raise
                command = _needs_extra(cmd_name, *found)
            assert isinstance(command, click.Command)
        else:
            command = super().get_command(ctx, cmd_name)
        if command is not None:
            document_exit_statuses(command, cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CoshareError as exc:
            click.echo(f"coshare: error: {exc}", err=True)
            ctx.exit(exc.exit_status)
        except ImportError as exc:  # a command's module needs an extra not installed here
            found = missing_extra(exc)
            if found is None:
                raise
            missing = MissingExtra(f"coshare {ctx.invoked_subcommand or ''}".strip(), *found)
            click.echo(f"coshare: error: {missing}", err=True)
            ctx.exit(missing.exit_status)


def document_exit_statuses(command: click.Command, path: str) -> None:
    """End the help of ``command`` and of every command under it with its exit statuses
    (:mod:`coshare.cli.exit_codes`), once."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            document_exit_statuses(sub, f"{path} {name}")
        return
    if not getattr(command, "_coshare_exits", False):
        section = exit_status_help(path)
        command.epilog = f"{command.epilog}\n\n{section}" if command.epilog else section
        command._coshare_exits = True  # type: ignore[attr-defined]


def _needs_extra(name: str, extra: str, module: str) -> click.Command:
    """A stand-in for command ``name`` whose module needs a missing extra: listed and
    helped like the others; run, it says what to install (exit status 1)."""

    def refuse(args: tuple[str, ...]) -> None:
        raise MissingExtra(f"coshare {name}", extra, module)

    return click.Command(
        name,
        callback=refuse,
        short_help=f"(needs: pip install 'coshare[{extra}]')",
        help=f"Not installed here: coshare {name} needs the '{extra}' extra "
        f"(pip install 'coshare[{extra}]').",
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


@click.group(cls=CoshareGroup)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="YAML config (default: $COSHARE_CONFIG, else /etc/coshare/config.yaml if present).",
)
@click.version_option(package_name="coshare")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None) -> None:
    """coshare: sharing-aware co-scheduling for HTCondor and Slurm."""
    ctx.obj = AppContext(config_path)


def membw_programs(config: Config) -> dict[str, float]:
    """The programs ``membw`` plans with: those measured by trial co-runs
    (``policy.membw.record_file``), and ``policy.membw.programs`` over them.

    Raises:
        ConfigError: the record file cannot be read (naming it and the entry).
    """
    from coshare.cycle.trials import read_record_file

    membw = config.policy.membw
    return merge_programs(membw.programs, read_record_file(membw.record_file))


def policy_options(config: Config) -> PolicyOptions:
    """The policy options of a configuration."""
    from coshare.policies import PolicyOptions

    profiles, explore = _profiles(config)
    return PolicyOptions(
        threads=config.policy.threads,
        seed=config.policy.seed,
        age_limit_s=config.policy.age_limit_s,
        max_reserved_devices=config.policy.max_reserved_devices,
        max_reserved_gangs=config.policy.max_reserved_gangs,
        priority_band=config.policy.priority_band,
        memory_grid_mib=config.knapsack.memory_grid_mib,
        max_thread_cells=config.knapsack.max_thread_cells,
        max_memory_cells=config.knapsack.max_memory_cells,
        max_dp_cells=config.knapsack.max_dp_cells,
        membw_max_share=config.policy.membw.max_share,
        membw_programs=membw_programs(config),
        membw_init_s=config.policy.membw.init_s,
        membw_trials=config.policy.membw.trials,
        monitor_fraction=config.collocate.monitor_fraction,
        max_harvest_cores=config.collocate.max_harvest_cores,
        copy_bw_limit_mbps=config.collocate.copy_bw_limit_mbps,
        sns_profiles=profiles,
        sns_explore=explore,
        sns_default_alpha=config.policy.sns.default_alpha,
        sns_ways_weight=config.policy.sns.ways_weight,
        sns_mba=config.policy.sns.mba,
    )


def _profiles(config: Config) -> tuple[dict[str, Profile], dict[str, int]]:
    """The profile store of ``policy.sns.profiles_dir`` (none when unset), every admin's file
    checked, with the entries learned from normal runs (an admin's profile wins), and the
    programs whose trials go on (``policy.sns.learn``; :mod:`coshare.profiles.learning`)."""
    if config.policy.sns.profiles_dir is None:
        return {}, {}
    from coshare.profiles.learn_cycle import policy_profiles

    return policy_profiles(config)


def read_snapshot(path: str) -> Snapshot:
    """Read a snapshot from a file, or from standard input for ``-``.

    Raises:
        SnapshotError: unreadable file, bad JSON, or a broken contract.
    """
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = read_stream(sys.stdin, MAX_SNAPSHOT_CHARS)
        else:
            text = read_bounded(Path(path), MAX_SNAPSHOT_CHARS)
    except OSError as exc:
        raise SnapshotError([f"cannot read: {exc.strerror}"], source) from exc
    except UnicodeDecodeError as exc:
        raise SnapshotError(["not UTF-8 text"], source) from exc
    except TooLarge as exc:
        raise SnapshotError([f"not read: {exc}"], source) from exc
    return decode_json(text, source, parse_snapshot)


def policy_flags(func: Any) -> Any:
    """``--policy``, ``--threads`` and ``--seed``: one definition for every command that
    plans (``plan`` and both adapters' ``cycle`` and ``show``)."""
    func = click.option(
        "--seed", type=int, default=None, help="Seed of the random policy (config: policy.seed)."
    )(func)
    func = click.option(
        "--threads",
        type=click.Choice(["strict", "soft"]),
        default=None,
        help="strict: declared threads per device never exceed its hardware threads; "
        "soft: they may, where the offload gate serializes (config: policy.threads).",
    )(func)
    func = click.option(
        "--policy",
        "policy_name",
        type=str,
        default=None,
        help=f"Policy: {', '.join(POLICY_NAMES)} (config: policy.name, default {DEFAULT_POLICY}).",
    )(func)
    return func


def configured(
    app: AppContext, policy_name: str | None, threads: str | None, seed: int | None
) -> Config:
    """The config with the command line's policy flags applied (flags win)."""
    if policy_name is not None and policy_name not in POLICY_NAMES:
        # Blame the flag the person typed, not the setting it overrides.
        raise PolicyError(f"--policy: {unknown_name('policy', policy_name, list(POLICY_NAMES))}")
    return with_overrides(app.config, "policy", name=policy_name, threads=threads, seed=seed)


@cli.command()
@click.argument("snapshot", metavar="SNAPSHOT|-")
@policy_flags
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--all", "show_all", is_flag=True, help="Table: also list devices that get nothing.")
@click.option(
    "--explain",
    "explain_job",
    metavar="JOB",
    default=None,
    help="Explain one job instead: every node and device considered, the first "
    "limit that keeps it out, and what would make it fit.",
)
@pass_app
def plan(
    app: AppContext,
    snapshot: str,
    policy_name: str | None,
    threads: str | None,
    seed: int | None,
    output: str,
    show_all: bool,
    explain_job: str | None,
) -> None:
    """Plan the pending jobs of a snapshot (JSON file, or - for stdin) and print the plan."""
    from coshare.cycle.run import checked_plan
    from coshare.ledger.facts import without_stale_probes
    from coshare.policies import make_policy

    config = configured(app, policy_name, threads, seed)
    policy = make_policy(config.policy.name, policy_options(config))
    with collector_paused():  # until the plan is printed
        # A snapshot without "now" is aged against this machine's clock, as a cycle's read.
        max_age_s = config.cycle.node_facts_max_age_s
        snap, stale = without_stale_probes(read_snapshot(snapshot), max_age_s, time.time())
        for note in stale:
            click.echo(f"coshare: note: {note}", err=True)
        checked = checked_plan(policy, snap, strict_threads=config.policy.threads == "strict")
        print_plan(snap, checked.plan, policy, config, output, show_all, explain_job)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one command builds and drops a large
    snapshot and plan.

    Decoding, validating and planning 100,000 jobs allocates millions of objects that hold no
    reference cycles (decoded JSON, jobs, tuples, the plan); each allocation-triggered pass of
    the collector walks the ones still alive, about a sixth of ``coshare plan``'s CPU time on
    that snapshot. Reference counting frees them as usual; the collector runs again after, so
    whatever cycles were made are collected then."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def print_plan(
    snap: Snapshot,
    result: Plan,
    policy: Policy,
    config: Config,
    output: str,
    show_all: bool,
    explain_job: str | None,
) -> None:
    """``coshare plan``'s output: the notes, then the plan or one job's explanation."""
    for note in result.notes:
        click.echo(f"coshare: note: {note}", err=True)
    if explain_job is not None:
        from coshare.policies.explain import explain

        echo_explanation(
            explain(
                snap,
                policy,
                explain_job,
                plan=result,
                strict_threads=config.policy.threads == "strict",
            ),
            output,
        )
        return
    if output == "json":
        # compact: the C encoder (an indent takes Python's, 0.7 s for 100,000 jobs)
        click.echo(json.dumps(plan_to_dict(result), separators=(",", ":")))
    else:
        from coshare.cli.render import plan_table  # rich loads only for tables

        click.echo(plan_table(snap, result, show_all=show_all), nl=False)


def echo_explanation(explanation: Explanation, output: str) -> None:
    """Print one job's explanation as a table or JSON (every ``explain`` command)."""
    from coshare.cli.render import explanation_text  # rich loads only for tables
    from coshare.policies.explain import explanation_to_dict

    if output == "json":
        click.echo(json.dumps(explanation_to_dict(explanation), indent=1))
    else:
        click.echo(explanation_text(explanation), nl=False)


def example_snapshot() -> Snapshot:
    """The bundled example: four Xeon Phi nodes of three models, Table I jobs."""
    text = resources.files("coshare.examples").joinpath(EXAMPLE_SNAPSHOT).read_text()
    return decode_json(text, EXAMPLE_SNAPSHOT, parse_snapshot)


@cli.command()
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Table I jobs in the reproduction.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Cluster size of the reproduction.",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Seeds 0..K-1 (mean and range).",
)
@pass_app
def demo(app: AppContext, jobs: int, nodes: int, seeds: int) -> None:
    """Reproduce the paper's Table II in simulation, then plan the bundled example snapshot."""
    from coshare.cycle.run import checked_plan
    from coshare.policies import make_policy
    from coshare.sim.runners import table2_report  # the simulator loads only when needed

    text, _ = table2_report(jobs, nodes, tuple(range(seeds)))
    click.echo(text)
    config = app.config
    snap = example_snapshot()
    click.echo(
        f"Live planning on the bundled example cluster: {len(snap.nodes)} nodes, "
        f"{sum(len(n.devices) for n in snap.nodes)} Xeon Phi devices of 3 models, "
        f"{len(snap.running)} jobs holding devices, {len(snap.pending)} pending "
        "(Table I applications of the coprocessor-sharing paper).\n"
    )
    rows = []
    plans = {}
    for name in ("exclusive", "random", "knapsack", DEFAULT_POLICY):
        plans[name] = checked_plan(
            make_policy(name, policy_options(config)),
            snap,
            strict_threads=config.policy.threads == "strict",
        ).plan
        rows.append((name, plans[name]))
    from coshare.cli.render import plan_table, policy_summary

    click.echo(plan_table(snap, plans[DEFAULT_POLICY]), nl=False)
    click.echo(policy_summary(rows), nl=False)


@cli.group()
def config() -> None:
    """Show or check the configuration."""


@config.command("show")
@click.option(
    "--output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: as a config file is written; json: for tools.",
)
@pass_app
def config_show(app: AppContext, output: str) -> None:
    """Print the effective configuration (defaults < file < environment)."""
    if output == "json":
        click.echo(json.dumps(to_dict(app.config), indent=1))
        return
    click.echo(yaml.safe_dump(to_dict(app.config), sort_keys=False), nl=False)


@config.command("check")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
def config_check(path: Path) -> None:
    """Check a config file; exit 2 with the problem if it is unusable."""
    from coshare.policies import make_policy

    loaded = load_config(path, environ={})
    make_policy(loaded.policy.name, policy_options(loaded))  # an unknown policy fails every cycle
    click.echo(f"{path}: ok (policy {loaded.policy.name}, {len(loaded.device_kinds)} device kinds)")


#: The JSON Schema files shipped in the package (``common/coshare/schemas``), by contract.
SCHEMAS = {"snapshot": "snapshot.schema.json", "plan": "plan.schema.json"}


def schema_text(name: str) -> str:
    """The JSON Schema of contract ``name`` (``snapshot`` or ``plan``), as shipped."""
    return resources.files("coshare").joinpath("schemas").joinpath(SCHEMAS[name]).read_text()


@cli.command("schema")
@click.argument("contract", type=click.Choice(sorted(SCHEMAS)))
def schema_command(contract: str) -> None:
    """Print the JSON Schema of the snapshot (input of `coshare plan`, output of `show
    --output json`) or of the plan (`plan --output json`); docs/ describes both."""
    click.echo(schema_text(contract), nl=False)


@cli.command("deploy-files")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def deploy_files(directory: Path, force: bool) -> None:
    """Write the deployment files shipped in the package (systemd units, cron entries,
    HTCondor and Slurm configuration snippets, the job wrapper, the TaskProlog, the local
    test cluster scripts) under DIRECTORY, as in the repository's deploy/, and coshare-launch
    (the node daemon's user-side client) next to the job wrapper and the TaskProlog."""
    source = resources.files("coshare").joinpath("deploy")
    files = sorted([*_walk(source, ()), *_launchers()])
    existing = [rel for rel, _ in files if (directory.joinpath(*rel)).exists()]
    if existing and not force:
        shown = ", ".join("/".join(rel) for rel in existing[:5])
        raise InputError(
            f"{directory}: {len(existing)} files exist ({shown}); nothing written "
            "(--force overwrites them)"
        )
    for rel, item in files:
        target = directory.joinpath(*rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = item.read_bytes()
        target.write_bytes(data)
        # Scripts are executable in the repository; a wheel does not keep file modes.
        target.chmod(0o755 if data.startswith(b"#!") else 0o644)
        click.echo(str(target))


#: Where coshare-launch goes among the deploy files: next to the HTCondor job wrapper and
#: next to Slurm's TaskProlog, which run it from their own directory.
LAUNCHER_PLACES = (("condor", "coshare-launch"), ("node", "coshare-launch"))


def _launchers() -> Iterator[tuple[tuple[str, ...], Any]]:
    """coshare-launch (the module :mod:`coshare.node.control.launcher`, one file, standard
    library only) as a deploy file in each of :data:`LAUNCHER_PLACES`."""
    launcher = resources.files("coshare.node.control").joinpath("launcher.py")
    for rel in LAUNCHER_PLACES:
        yield rel, launcher


def _walk(item: Any, rel: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    for child in item.iterdir():
        if child.name == "__pycache__":
            continue
        if child.is_dir():
            yield from _walk(child, (*rel, child.name))
        else:
            yield (*rel, child.name), child


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``coshare`` console script."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="coshare")
    except InputError as exc:  # raised outside a group invocation (should not happen)
        click.echo(f"coshare: error: {exc}", err=True)
        sys.exit(exc.exit_status)
