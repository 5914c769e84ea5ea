"""``coshare profile``: build and check the program profiles of the ``sns`` policy
(Spread-n-Share sections 4.1-4.2 and 5.1).

::

    coshare profile import FILE [--store DIR]         check a profile, put it in the store
    coshare profile check [--store DIR]               check every file of the store
    coshare profile show [PROGRAM] [--store DIR]      each program's source: admin, learned
                                                      from normal runs, or still learning
    coshare profile run PROGRAM --scale K --into DRAFT [--timeout S] -- CMD [ARG...]
                                                      time CMD as scale K's run alone
    coshare profile ways PROGRAM --cores N --into DRAFT [--ways K,K..] -- CMD [ARG...]
                                                      the IPC/bandwidth way sweep

``run`` times one exclusive run of a command (an argument list, never a shell: the admin's
own ``srun -N 2 ...`` or ``mpirun ...`` at that scale) and records it under
``run_time_s.K`` of a draft file, which ``import`` checks and stores once every scale and
the curves are in it. ``ways`` runs the command once per way count in a resctrl group of
that many ways under ``perf stat`` (:mod:`coshare.node.waysweep`) and records the IPC and
bandwidth curves in the draft; where resctrl, perf or the counters are absent it says
``unsupported`` with the path it looked at.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import click

from coshare.cli.app import AppContext, pass_app
from coshare.errors import InputError
from coshare.node.resctrl import Resctrl
from coshare.node.waysweep import sweep
from coshare.profiles.learned_store import load_learned
from coshare.profiles.learning import describe, for_policy, measured_lines
from coshare.profiles.programs import MAX_CORES, PROGRAM_NAME, SCALES
from coshare.profiles.store import MAX_PROFILE_CHARS, load_store, read_profile, write_profile
from coshare.system.files import TooLarge, read_bounded
from coshare.system.programs import run as run_command


def _store(app: AppContext, store: Path | None) -> Path:
    if store is not None:
        return store
    configured = app.config.policy.sns.profiles_dir
    if configured is None:
        raise InputError("no profile store: give --store DIR or set policy.sns.profiles_dir")
    return Path(configured)


@click.group("profile")
def profile() -> None:
    """Program profiles of the sns policy (Spread-n-Share): import, check, show where each
    comes from (admin or learned), time runs, sweep the LLC ways."""


@profile.command("import")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profile store (default: policy.sns.profiles_dir).",
)
@pass_app
def import_command(app: AppContext, path: Path, store: Path | None) -> None:
    """Check the profile in PATH (measured values) and write it to the store as
    PROGRAM.json; a bad field is refused naming the file and the field (exit 2)."""
    found = read_profile(path)
    target = write_profile(_store(app, store), found)
    click.echo(
        f"{target}: {found.program} ({found.program_class}, best scale "
        f"{found.best_scale}, {found.ways_for(0.9)} ways for 90%)"
    )


@profile.command("check")
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profile store (default: policy.sns.profiles_dir).",
)
@pass_app
def check_command(app: AppContext, store: Path | None) -> None:
    """Check every profile of the store, as a cycle loads them; list each one."""
    directory = _store(app, store)
    profiles = load_store(directory)
    for name, p in profiles.items():
        speedups = ", ".join(f"{k}: {p.speedup(k):.2f}" for k in p.scales)
        click.echo(
            f"{name}: {p.program_class}, speedup {speedups}; {p.ways_for(0.9)} of "
            f"{p.full_ways} ways for 90%, {p.membw_at(p.ways_for(0.9)):g} GB/s at "
            f"{p.cores} cores"
        )
    click.echo(f"{directory}: {len(profiles)} profiles ok")


@profile.command("show")
@click.argument("program", required=False)
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profile store (default: policy.sns.profiles_dir).",
)
@pass_app
def show_command(app: AppContext, program: str | None, store: Path | None) -> None:
    """Every program the store knows (or PROGRAM), and where its profile comes from: admin
    (a file of the store, which always wins), learned (from normal runs, trials over) or
    learning (the scale its next run tries alone), with the runs behind a learned entry and
    what the nodes measured or why they could not."""
    directory = _store(app, store)
    admin = load_store(directory)
    learned, problems = load_learned(directory)
    known = for_policy(admin, learned)
    if program is not None:
        if program not in known:
            raise InputError(f"program {program[:64]!r}: no profile in {directory}")
        known = {program: known[program]}
    for entry in known.values():
        click.echo(describe(entry))
        if entry.learned is not None and program is not None:
            for line in measured_lines(entry.learned):
                click.echo(line)
    for problem in problems:
        click.echo(f"warning: {problem}")
    counts = {
        s: sum(1 for k in known.values() if k.source == s) for s in ("admin", "learned", "learning")
    }
    click.echo(
        f"{directory}: {counts['admin']} admin, {counts['learned']} learned, "
        f"{counts['learning']} learning"
    )


def _draft(program: str, draft: Path) -> dict[str, object]:
    """The draft profile of ``program`` at ``draft`` (a new one when absent).

    Raises:
        InputError: a bad program name, or a draft that is not JSON or not the program's.
    """
    if PROGRAM_NAME.fullmatch(program) is None:
        raise InputError(
            f"program {program[:64]!r}: want 1-64 of A-Z a-z 0-9 _ . - (as CoshareProgram)"
        )
    if not draft.exists():
        return {"program": program}
    try:
        loaded = json.loads(read_bounded(draft, MAX_PROFILE_CHARS))
    except (OSError, ValueError, TooLarge) as exc:
        raise InputError(f"draft {draft}: cannot read it as JSON: {exc}") from exc
    if not isinstance(loaded, dict) or loaded.get("program", program) != program:
        raise InputError(f"draft {draft}: not a profile of {program}")
    return loaded


@profile.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("program")
@click.option(
    "--scale",
    type=click.Choice([str(k) for k in SCALES]),
    required=True,
    help="The scale factor this run is at (the command must run at it).",
)
@click.option(
    "--into",
    "draft",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The draft profile to record the run time in (created if absent).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(1, 7 * 24 * 3600),
    default=24 * 3600,
    show_default=True,
    help="Seconds before the run is stopped (and not recorded).",
)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def run_command_cli(
    program: str, scale: str, draft: Path, timeout_s: float, argv: tuple[str, ...]
) -> None:
    """Run ARGV once (no shell) as PROGRAM's exclusive run at SCALE and record its wall time
    in the draft's run_time_s; a failed run records nothing (exit 1)."""
    data = _draft(program, draft)
    start = time.monotonic()
    run_command(list(argv), timeout_s=timeout_s)
    seconds = time.monotonic() - start
    runs = data.get("run_time_s")
    runs = dict(runs) if isinstance(runs, dict) else {}
    runs[scale] = round(seconds, 3)
    data["run_time_s"] = runs
    draft.write_text(json.dumps(data, indent=1) + "\n")
    missing = [str(k) for k in SCALES if str(k) not in runs]
    click.echo(
        f"{draft}: {program} at scale {scale}: {seconds:.3f} s"
        + (f" (still missing scales {', '.join(missing)})" if missing else "")
    )


#: How the ``ways`` command opens the node's resctrl mount (a test hands in its fake kernel).
open_resctrl: Callable[[Path, str], Resctrl] = Resctrl


@profile.command("ways", context_settings={"ignore_unknown_options": True})
@click.argument("program")
@click.option(
    "--into",
    "draft",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The draft profile to record the curves in (created if absent).",
)
@click.option(
    "--cores",
    type=click.IntRange(1, MAX_CORES),
    required=True,
    help="Processes the command runs on this node (the profile's cores).",
)
@click.option(
    "--ways",
    "way_list",
    default=None,
    metavar="K,K,...",
    help="Way counts of the sweep [default: 2, 4, 8, ... and all the node's].",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Runs per way count; the median is recorded.",
)
@click.option(
    "--resctrl",
    "root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The resctrl mount [default: node.resctrl_root].",
)
@click.option(
    "--perf",
    default="perf",
    show_default=True,
    help="The perf program that counts instructions and cycles.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(1, 7 * 24 * 3600),
    default=3600,
    show_default=True,
    help="Seconds before one run is stopped (nothing recorded).",
)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_app
def ways_command(
    app: AppContext,
    program: str,
    draft: Path,
    cores: int,
    way_list: str | None,
    repeat: int,
    root: Path | None,
    perf: str,
    timeout_s: float,
    argv: tuple[str, ...],
) -> None:
    """The IPC-LLC and BW-LLC curves of PROGRAM (sections 4.1, 5.1): run ARGV (no shell) once
    per way count in a resctrl group holding that many LLC ways, count instructions and cycles
    with perf stat and the group's memory traffic with resctrl MBM, and record the curves in
    the draft. Without resctrl, perf or the counters it says unsupported (exit 1) with the
    path it looked at."""
    data = _draft(program, draft)
    counts = None
    if way_list is not None:
        try:
            counts = [int(k) for k in way_list.split(",")]
        except ValueError as exc:
            raise InputError(f"--ways {way_list[:40]!r}: want way counts like 2,4,8,20") from exc
    node = app.config.node
    resctrl = open_resctrl(
        root if root is not None else Path(node.resctrl_root), node.cgroup_parent
    )
    found = sweep(
        resctrl, program, list(argv), counts, perf=perf, repeat=repeat, timeout_s=timeout_s
    )
    for p in found.points:
        bandwidth = f"{p.membw_gbps:.3f} GB/s" if p.membw_gbps is not None else "- GB/s"
        click.echo(
            f"{p.ways:>3} of {found.node_ways} ways: IPC {p.ipc:.4f}, {bandwidth}, "
            + ", ".join(f"{s:.2f}" for s in p.seconds)
            + " s"
        )
    data["ways"] = [p.ways for p in found.points]
    data["ipc"] = [round(p.ipc, 6) for p in found.points]
    data["cores"] = cores
    sources = data.get("sources")
    sources = dict(sources) if isinstance(sources, dict) else {}
    how = (
        f"coshare profile ways on {socket.gethostname()}: {cores} processes, "
        f"{repeat} run(s) per way count, median"
    )
    sources["ipc"] = f"{how}; perf stat instructions/cycles"
    if found.membw_unsupported is None:
        data["membw_gbps"] = [round(p.membw_gbps or 0.0, 6) for p in found.points]
        sources["membw_gbps"] = f"{how}; resctrl mbm_total_bytes over wall time"
    else:
        data.pop("membw_gbps", None)
        sources.pop("membw_gbps", None)
    data["sources"] = sources
    draft.write_text(json.dumps(data, indent=1) + "\n")
    click.echo(f"{draft}: {program}: IPC at {len(found.points)} way counts recorded")
    if found.membw_unsupported is not None:
        click.echo(
            f"membw_gbps not measured ({found.membw_unsupported}): add it to the draft "
            "before coshare profile import"
        )
    for fall in found.falls():
        click.echo(f"warning: {fall}: import refuses a falling curve; measure again with --repeat")
