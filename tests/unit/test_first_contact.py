"""What a new admin meets first: ``--help`` of every command with the base install
alone, commands that need a missing extra say which to install, and ``COSHARE_*`` variables
that are not settings never stop a command.

The commands run as the admin runs them: a separate Python process. "The base install" is
this environment with the extras' modules made unimportable (``sys.modules[name] = None``,
what ``import`` reports as not installed), so the test runs on any machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from coshare.cli.extras import EXTRA_OF_MODULE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "common/coshare/examples/paper-cluster.json"

#: The scheduler and node extras' modules (the planner's numpy and scipy, which planning
#: needs, have their own test: test_startup).
BLOCKED = sorted(m for m, extra in EXTRA_OF_MODULE.items() if extra not in ("planner", "bound"))

#: Runs the ``coshare`` entry point in a process where the extras are not installed.
BASE_ONLY = (
    "import sys\n"
    f"for name in {BLOCKED!r}:\n"
    "    sys.modules[name] = None\n"
    "from coshare.cli.main import main\n"
    "main(sys.argv[1:])\n"
)


def coshare(
    *args: str, env: dict[str, str] | None = None, base_only: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``coshare ARGS`` in a new process (no system config, no inherited COSHARE_*)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("COSHARE_")}
    environ["COSHARE_CONFIG"] = os.devnull
    environ.update(env or {})
    code = BASE_ONLY if base_only else BASE_ONLY.split("for name")[0] + BASE_ONLY.split("None\n")[1]
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def test_the_extras_are_really_blocked() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", BASE_ONLY.split("from coshare")[0] + "import classad2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr


def test_every_help_prints_without_the_extras() -> None:
    top = coshare("--help")
    assert top.returncode == 0, top.stderr
    for name in ("condor", "slurm", "node", "plan", "simulate", "config", "demo"):
        assert f"  {name} " in top.stdout
    for group, commands in {
        "condor": ("cycle", "show", "explain"),
        "slurm": ("cycle", "show", "explain"),
        "node": ("check", "gate", "job-start"),
        "config": ("show", "check"),
    }.items():
        helped = coshare(group, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "Traceback" not in helped.stderr
        for command in commands:
            assert f"  {command} " in helped.stdout, (group, command)
            sub = coshare(group, command, "--help")
            assert sub.returncode == 0 and "Exit status:" in sub.stdout, (group, command)


@pytest.mark.parametrize(
    ("group", "extra", "module"), [("condor", "condor", "classad2"), ("slurm", "slurm", "hostlist")]
)
def test_a_command_whose_extra_is_missing_says_what_to_install(
    group: str, extra: str, module: str
) -> None:
    ran = coshare(group, "show")
    assert ran.returncode == 1
    assert ran.stderr == (
        f"coshare: error: coshare {group} needs the '{extra}' extra (module "
        f"'{module}' is not installed): pip install 'coshare[{extra}]'\n"
    )


def test_coshare_variables_that_are_not_settings_stop_nothing(tmp_path: Path) -> None:
    # The README tells the reader to set COSHARE_TRACE_DIR; coshare itself sets COSHARE_JOB_ID
    # (and the others) inside a job. Each of these once exited 2: they are not settings.
    env = {
        "COSHARE_TRACE_DIR": "/work/shared/data",
        "COSHARE_JOB_ID": "12.0",
        "COSHARE_DEVICES": "0",
        "COSHARE_NODE": "n1",
        "COSHARE_SPREAD": "1",
        "COSHARE_LLC_WAYS": "0-3",
        "COSHARE_SLURM_CTLD_PORT": "16817",
    }
    planned = coshare("plan", str(EXAMPLE), "--output", "json", env=env)
    assert planned.returncode == 0 and planned.stderr == ""
    shown = coshare("config", "show", env=env)
    assert shown.returncode == 0 and "policy:" in shown.stdout and shown.stderr == ""
    checked = coshare("node", "check", env=env)
    assert checked.returncode in (0, 1), checked.stderr  # 1: cgroups missing here, not config
    assert "COSHARE_" not in checked.stderr
    # the adapters get as far as the scheduler (none here: exit 1, one message), not exit 2
    empty = tmp_path / "bin"
    empty.mkdir()
    slurm = coshare(
        "slurm",
        "show",
        base_only=False,
        env={**env, "COSHARE_SLURM_BIN_DIR": str(empty), "COSHARE_SLURM_RETRY_ATTEMPTS": "1"},
    )
    assert slurm.returncode == 1 and "warning" not in slurm.stderr, slurm.stderr
    condor = coshare(
        "condor",
        "show",
        base_only=False,
        env={
            **env,
            "COSHARE_CONDOR_COLLECTOR": "127.0.0.1:9",
            "COSHARE_CONDOR_RETRY_ATTEMPTS": "1",
            "COSHARE_CONDOR_RETRY_WAIT_S": "0",
        },
    )
    assert condor.returncode == 1 and "warning" not in condor.stderr, condor.stderr


def test_a_mistyped_setting_is_said_once_and_ignored() -> None:
    ran = coshare("config", "show", env={"COSHARE_POLICY_NAEM": "random"})
    assert ran.returncode == 0
    assert ran.stderr == (
        "coshare: warning: environment variable COSHARE_POLICY_NAEM is not a "
        "setting and is ignored (did you mean COSHARE_POLICY_NAME?)\n"
    )
    assert "name: knapsack" in ran.stdout or "name: " in ran.stdout


@pytest.mark.parametrize(
    ("variable", "hint"),
    [
        (
            "COSHARE_POLICY",
            "settings are COSHARE_<SECTION>_<KEY>; the policy section's keys are age_limit_s, ",
        ),
        ("COSHARE_SEED", "did you mean COSHARE_POLICY_SEED?"),
        ("COSHARE_THREADS", "did you mean COSHARE_POLICY_THREADS?"),
        (
            "COSHARE_SOMETHING_ELSE",
            "settings are COSHARE_<SECTION>_<KEY>, listed by `coshare config show`",
        ),
    ],
)
def test_every_coshare_variable_is_a_setting_or_warned_about(variable: str, hint: str) -> None:
    ran = coshare("config", "show", "--output", "json", env={variable: "soft"})
    assert ran.returncode == 0
    assert ran.stderr.startswith(
        f"coshare: warning: environment variable {variable} is not a setting and is ignored ({hint}"
    )
    assert ran.stderr.count("\n") == 1


def test_a_missing_scheduler_program_is_named_with_how_to_point_coshare_at_it(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    ran = coshare("slurm", "show", base_only=False, env={"COSHARE_SLURM_BIN_DIR": str(empty)})
    assert ran.returncode == 1
    assert ran.stderr == (
        f"coshare: error: cannot run {empty}/sinfo: no such file or "
        "directory; install Slurm's client commands (apt-get install "
        "slurm-client) or set slurm.bin_dir (COSHARE_SLURM_BIN_DIR) to the "
        "directory that holds squeue, sinfo and scontrol\n"
    )


def test_htcondor_with_no_pool_configured_says_how_at_once(tmp_path: Path) -> None:
    # An HTCondor configuration that names no collector: one line, no retries of a
    # configuration error, and where to point coshare.
    (tmp_path / "condor_config").write_text("# no pool here\n")
    (tmp_path / "coshare.yaml").write_text(
        f"condor: {{lock_file: {tmp_path / 'cycle.lock'}, retry_wait_s: 30}}\n"
    )
    ran = coshare(
        "condor",
        "cycle",
        base_only=False,
        env={
            "CONDOR_CONFIG": str(tmp_path / "condor_config"),
            "COSHARE_CONFIG": str(tmp_path / "coshare.yaml"),
        },
    )
    assert ran.returncode == 1
    assert ran.stderr == (
        "coshare: error: no HTCondor pool is configured here (the HTCondor "
        "configuration has no COLLECTOR_HOST): set condor.config_file "
        "(COSHARE_CONDOR_CONFIG_FILE, or CONDOR_CONFIG) to the pool's "
        "condor_config, or condor.collector (COSHARE_CONDOR_COLLECTOR) to the "
        "collector's host:port\n"
    )


def test_tables_fit_the_width_the_terminal_gives_and_json_is_unaffected() -> None:
    narrow = coshare("plan", str(EXAMPLE), env={"COLUMNS": "60"}, base_only=False)
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 60
    assert all(line == line.rstrip() for line in lines)  # no padding to the width
    piped = coshare("plan", str(EXAMPLE), base_only=False)  # a pipe, no COLUMNS: 120
    assert max(map(len, piped.stdout.splitlines())) > 60
    assert all(line == line.rstrip() for line in piped.stdout.splitlines())
    plans = []
    for env in ({"COLUMNS": "60"}, {}):
        ran = coshare("plan", str(EXAMPLE), "--output", "json", env=env, base_only=False)
        plan = json.loads(ran.stdout)
        del plan["stats"]["seconds"]  # the time it took, never the same twice
        plans.append(plan)
    assert plans[0] == plans[1] and plans[0]["assignments"]
