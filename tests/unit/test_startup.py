"""A compute node's install: its commands and every ``--help`` load no numpy, scipy,
matplotlib or Dask (the ``planner`` and ``bound`` extras, the simulator), and a command that
plans without numpy says which extra to install.

Each command runs as an admin runs it, in a new Python process; what it imported is read from
``sys.modules`` as it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from coshare.cli import main as coshare_cli
from coshare.policies import DEFAULT_POLICY, policy_names
from coshare.policy_names import DEFAULT_POLICY as LIGHT_DEFAULT
from coshare.policy_names import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "common/coshare/examples/paper-cluster.json"

#: What a compute node must not load.
HEAVY = ("numpy", "scipy", "matplotlib", "dask", "distributed", "coshare.policies", "coshare.sim")

#: Runs ``coshare ARGS`` (``BLOCK``: modules made uninstalled) and prints, as it exits, the
#: heavy modules it imported.
RUN = """
import atexit, json, sys
for name in {block!r}:
    sys.modules[name] = None
heavy = {heavy!r}
atexit.register(lambda: print(json.dumps(sorted(
    m for m in sys.modules if sys.modules[m] is not None
    and any(m == h or m.startswith(h + ".") for h in heavy))), file=sys.stderr))
from coshare.cli.main import main
main(sys.argv[1:])
"""


def coshare(
    *args: str, block: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("COSHARE_")}
    environ["COSHARE_CONFIG"] = os.devnull
    code = RUN.format(block=list(block), heavy=HEAVY)
    ran = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
    *errors, loaded = ran.stderr.rstrip("\n").split("\n")
    ran.stderr = "".join(f"{line}\n" for line in errors)
    return ran, json.loads(loaded)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("node", "--help"),
        ("node", "gate", "--help"),
        ("node", "check"),
        ("node", "launch", "--help"),
        ("config", "show"),
        ("deploy-files", "--help"),
    ],
)
def test_node_commands_and_help_load_no_planner(args: tuple[str, ...]) -> None:
    ran, loaded = coshare(*args)
    assert ran.returncode in (0, 1), ran.stderr  # node check: 1 where cgroups are missing
    assert "Traceback" not in ran.stderr
    assert loaded == [], f"coshare {' '.join(args)} imported {loaded}"


def test_planning_without_numpy_says_which_extra_to_install() -> None:
    ran, _ = coshare("plan", str(EXAMPLE), block=("numpy",))
    assert ran.returncode == 1
    assert ran.stderr == (
        "coshare: error: coshare plan needs the 'planner' extra (module "
        "'numpy' is not installed): pip install 'coshare[planner]'\n"
    )
    helped, _ = coshare("plan", "--help", block=("numpy",))
    assert helped.returncode == 0 and "Exit status:" in helped.stdout
    assert "1  the scheduler, a node helper or a command failed, or an extra is missing" in (
        helped.stdout
    )


def test_planning_with_numpy_still_plans() -> None:
    ran, loaded = coshare("plan", str(EXAMPLE), "--output", "json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["assignments"] and "numpy" in loaded


def test_the_light_policy_names_are_the_registrys() -> None:
    assert list(POLICY_NAMES) == policy_names()
    assert LIGHT_DEFAULT == DEFAULT_POLICY


def test_the_lazy_commands_summaries_are_their_own_help() -> None:
    ctx = click.Context(coshare_cli.cli)
    assert sorted(coshare_cli.LAZY_SUMMARIES) == sorted(coshare_cli.LAZY_COMMANDS)
    for name, summary in coshare_cli.LAZY_SUMMARIES.items():
        command = coshare_cli.cli.get_command(ctx, name)
        assert command is not None and command.help is not None
        assert " ".join(command.help.split()).startswith(summary.rstrip(".")), name


def test_the_membw_probe_without_numpy_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # A coshare error (which the node's sampler logs and survives), not an ImportError.
    from coshare.cli.extras import MissingExtra
    from coshare.node.membw import measure

    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(MissingExtra, match=r"pip install 'coshare\[planner\]'"):
        measure([0], 1, seconds=0.01)
