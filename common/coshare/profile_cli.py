"""``coshare profile``: build and check the program profiles of the ``sns`` policy
(Spread-n-Share sections 4.1-4.2 and 5.1; issue 19 item 1).

::

    coshare profile import FILE [--store DIR]         check a profile, put it in the store
    coshare profile check [--store DIR]               check every file of the store
    coshare profile run PROGRAM --scale K --into DRAFT [--timeout S] -- CMD [ARG...]
                                                      time CMD as scale K's run alone
    coshare profile ways PROGRAM [--resctrl DIR]      the IPC/bandwidth way sweep

``run`` times one exclusive run of a command (an argument list, never a shell: the admin's
own ``srun -N 2 ...`` or ``mpirun ...`` at that scale) and records it under
``run_time_s.K`` of a draft file, which ``import`` checks and stores once every scale and
the curves are in it. ``ways`` needs resctrl's L3 allocation and IPC counters: where
resctrl is absent it says ``unsupported`` with the path it looked at; coshare does not
sample IPC yet, so on a node with resctrl it says that too (the curves are imported).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from coshare.cli import AppContext, pass_app
from coshare.commands import run as run_command
from coshare.errors import InputError, Unsupported
from coshare.files import TooLarge, read_bounded
from coshare.node.resctrl import Resctrl
from coshare.profile_store import MAX_PROFILE_CHARS, load_store, read_profile, write_profile
from coshare.profiles import PROGRAM_NAME, SCALES


def _store(app: AppContext, store: Path | None) -> Path:
    if store is not None:
        return store
    configured = app.config.policy.sns.profiles_dir
    if configured is None:
        raise InputError("no profile store: give --store DIR or set policy.sns.profiles_dir")
    return Path(configured)


@click.group("profile")
def profile() -> None:
    """Program profiles of the sns policy (Spread-n-Share): import, check, time runs."""


@profile.command("import")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--store", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The profile store (default: policy.sns.profiles_dir).")
@pass_app
def import_command(app: AppContext, path: Path, store: Path | None) -> None:
    """Check the profile in PATH (measured values) and write it to the store as
    PROGRAM.json; a bad field is refused naming the file and the field (exit 2)."""
    found = read_profile(path)
    target = write_profile(_store(app, store), found)
    click.echo(f"{target}: {found.program} ({found.program_class}, best scale "
               f"{found.best_scale}, {found.ways_for(0.9)} ways for 90%)")


@profile.command("check")
@click.option("--store", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The profile store (default: policy.sns.profiles_dir).")
@pass_app
def check_command(app: AppContext, store: Path | None) -> None:
    """Check every profile of the store, as a cycle loads them; list each one."""
    directory = _store(app, store)
    profiles = load_store(directory)
    for name, p in profiles.items():
        speedups = ", ".join(f"{k}: {p.speedup(k):.2f}" for k in p.scales)
        click.echo(f"{name}: {p.program_class}, speedup {speedups}; {p.ways_for(0.9)} of "
                   f"{p.full_ways} ways for 90%, {p.membw_at(p.ways_for(0.9)):g} GB/s at "
                   f"{p.cores} cores")  # fmt: skip
    click.echo(f"{directory}: {len(profiles)} profiles ok")


@profile.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("program")
@click.option("--scale", type=click.Choice([str(k) for k in SCALES]), required=True,
              help="The scale factor this run is at (the command must run at it).")
@click.option("--into", "draft", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The draft profile to record the run time in (created if absent).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1, 7 * 24 * 3600), default=24 * 3600,
              show_default=True, help="Seconds before the run is stopped (and not recorded).")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def run_command_cli(program: str, scale: str, draft: Path, timeout_s: float,
                    argv: tuple[str, ...]) -> None:  # fmt: skip
    """Run ARGV once (no shell) as PROGRAM's exclusive run at SCALE and record its wall time
    in the draft's run_time_s; a failed run records nothing (exit 1)."""
    if PROGRAM_NAME.fullmatch(program) is None:
        raise InputError(f"program {program[:64]!r}: want 1-64 of A-Z a-z 0-9 _ . - (as "
                         "CoshareProgram)")  # fmt: skip
    data: dict[str, object] = {"program": program}
    if draft.exists():
        try:
            loaded = json.loads(read_bounded(draft, MAX_PROFILE_CHARS))
        except (OSError, ValueError, TooLarge) as exc:
            raise InputError(f"draft {draft}: cannot read it as JSON: {exc}") from exc
        if not isinstance(loaded, dict) or loaded.get("program", program) != program:
            raise InputError(f"draft {draft}: not a profile of {program}")
        data = loaded
    start = time.monotonic()
    run_command(list(argv), timeout_s=timeout_s)
    seconds = time.monotonic() - start
    runs = data.get("run_time_s")
    runs = dict(runs) if isinstance(runs, dict) else {}
    runs[scale] = round(seconds, 3)
    data["run_time_s"] = runs
    draft.write_text(json.dumps(data, indent=1) + "\n")
    missing = [str(k) for k in SCALES if str(k) not in runs]
    click.echo(f"{draft}: {program} at scale {scale}: {seconds:.3f} s"
               + (f" (still missing scales {', '.join(missing)})" if missing else ""))


@profile.command("ways")
@click.argument("program")
@click.option("--resctrl", "root", type=click.Path(path_type=Path, file_okay=False),
              default=Path("/sys/fs/resctrl"), show_default=True, help="The resctrl mount.")
def ways_command(program: str, root: Path) -> None:
    """The IPC-LLC and BW-LLC sweep of PROGRAM (section 5.1: 2, 4, 8, 20 ways): needs
    resctrl's L3 allocation; says unsupported (exit 1) with the path it looked at."""
    Resctrl(root).cache()  # raises Unsupported, naming the path, where there is no resctrl
    raise Unsupported("IPC counters for the way sweep", str(root),
                      "coshare does not sample IPC per way count yet; import the measured "
                      "curves with coshare profile import")  # fmt: skip
