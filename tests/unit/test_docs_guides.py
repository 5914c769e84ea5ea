"""Every command the admin and user guides and the hand-written reference pages show is run
by a test: the table below names, for each (``docs_guides.key``: a coshare command, a deploy/
script and its subcommand, or a program), the test file that runs it and a text that file
must hold where it does (checked, so a link cannot silently go stale): the schedulers' own
administration tools on the real pool and cluster, a device this machine lacks against a
faithful fake of its tool, the Makefile's targets as make runs them. A command no test could
run would be listed apart with why (none is); coshare's own commands and deploy/ scripts may
never be. Shown deploy/ commands name a subcommand and options the script parses, the
walk-throughs start the local pool and cluster as the integration tests do, and the HTCondor
walk-through's output is what the code prints. Commands shown with their output are run and
checked by test_docs_commands. No page for admins or users names issues or test files, and
every figure has the command that draws it beside it."""

from __future__ import annotations

import ast
import functools
import re

import pytest

from tests.unit.docs_guides import (
    ROOT,
    Shown,
    guide_pages,
    key,
    resolve,
    script_usage,
    shown,
    unlabelled_shell_blocks,
)

POOL = "tests/integration/condor_pool.py"
FENCE_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
SLURM = "tests/integration/slurm/conftest.py"

#: command -> (the test file that runs it, a text that file holds where it does).
RUN_BY: dict[str, tuple[str, str]] = {
    "coshare": ("tests/unit/test_cli.py", '"--help"'),
    "python -m coshare.cli.reference": (
        "tests/unit/test_reference.py",
        '"-m", "coshare.cli.reference", "man"',
    ),
    "python -m coshare.contracts.json_schema": (
        "tests/unit/test_contracts.py",
        '"-m", "coshare.contracts.json_schema"',
    ),
    "coshare condor": ("tests/integration/test_condor_pool.py", '"condor", "cycle"'),
    "coshare condor cycle": ("tests/integration/test_condor_pool.py", '"condor", "cycle"'),
    "coshare condor explain": ("tests/integration/test_condor_pool.py", '"condor", "explain"'),
    "coshare condor show": ("tests/integration/test_condor_pool.py", '"condor", "show"'),
    "coshare condor trigger": ("tests/integration/test_condor_trigger.py", "trigger-on"),
    "coshare config check": ("tests/unit/test_cli.py", '"config", "check"'),
    "coshare config show": ("tests/unit/test_cli.py", '"config", "show"'),
    "coshare deploy-files": ("tests/integration/test_wheel_install.py", '"deploy-files"'),
    "coshare node check": ("tests/unit/test_node_check.py", '"node", "check"'),
    "coshare node cleanup": ("tests/unit/test_node_cli.py", '"node", "cleanup"'),
    "coshare node facts": ("tests/unit/test_node_check.py", '"node", "facts"'),
    "coshare node freeze": ("tests/unit/test_node_check.py", '"node", "freeze"'),
    "coshare node thaw": ("tests/unit/test_node_check.py", '"node", "thaw"'),
    "coshare node gate": ("tests/unit/test_node_cli.py", '"node", "gate"'),
    "coshare node gpus": ("tests/unit/test_node_gpus.py", '"node", "gpus"'),
    "coshare node job-attach": ("tests/unit/test_node_cli.py", '"job-attach"'),
    "coshare node job-end": ("tests/unit/test_node_cli.py", '"job-end"'),
    "coshare node job-exec": ("tests/unit/test_node_cli.py", '"job-exec"'),
    "coshare node job-run": ("tests/unit/test_node_cli.py", '"job-run"'),
    "coshare node job-start": ("tests/unit/test_node_cli.py", '"job-start"'),
    "coshare node launch": ("tests/unit/test_startup.py", '"node", "launch"'),
    "coshare node": ("tests/unit/test_node_cli.py", '"node", "--help"'),
    "coshare node lend": ("tests/node/test_harvest_real.py", '"lend"'),
    "coshare node reclaim": ("tests/node/test_harvest_real.py", '"reclaim"'),
    "coshare node offload": ("tests/unit/test_node_cli.py", '"node", "offload"'),
    "coshare node trial": ("tests/unit/test_node_cli.py", '"node", "trial"'),
    "coshare node probe membw": ("tests/node/test_trial_real.py", '"probe", "membw"'),
    "coshare plan": ("tests/unit/test_cli.py", '"plan"'),
    "coshare profile": ("tests/unit/test_profile_ways.py", '"profile"'),
    "coshare profile check": ("tests/unit/test_policy_sns.py", '"profile", "check"'),
    "coshare profile run": ("tests/unit/test_policy_sns.py", '"profile", "run"'),
    "coshare profile import": ("tests/unit/test_profile_ways.py", '"profile", "import"'),
    "coshare profile show": ("tests/unit/test_learning.py", '"profile", "show"'),
    "coshare profile ways": ("tests/unit/test_profile_ways.py", '"profile", "ways"'),
    "coshare schema": ("tests/unit/test_hostile_inputs.py", '"schema", "snapshot"'),
    "coshare node watch": ("tests/unit/test_node_cli.py", '"node", "watch"'),
    "coshare simulate": ("tests/unit/test_cli.py", '"simulate"'),
    "coshare slurm": ("tests/integration/slurm/test_slurm_annotations.py", '"slurm", "cycle"'),
    "coshare slurm cycle": (
        "tests/integration/slurm/test_slurm_annotations.py",
        '"slurm", "cycle"',
    ),
    "coshare slurm explain": ("tests/integration/slurm/test_slurm_annotations.py", '"explain"'),
    "coshare slurm show": ("tests/integration/slurm/test_slurm_annotations.py", '"slurm", "show"'),
    "coshare-launch": (
        "tests/unit/test_slurm_prolog.py",
        "test_the_deployed_task_prolog_runs_coshare_launch_with_the_system_python",
    ),
    "python3": (
        "tests/unit/test_slurm_prolog.py",
        "test_the_deployed_task_prolog_runs_coshare_launch_with_the_system_python",
    ),
    "deploy/condor/pool start": (POOL, 'pool("start"'),
    "deploy/condor/pool stop": (POOL, 'pool("stop"'),
    "deploy/condor/pool exec": ("tests/integration/test_condor_pool.py", 'pool("exec"'),
    "deploy/condor/pool trigger-on": ("tests/integration/test_condor_trigger.py", "trigger-on"),
    "deploy/condor/pool trigger-off": ("tests/integration/test_condor_trigger.py", "trigger-off"),
    "deploy/condor/pool accounting-on": (
        "tests/integration/test_condor_priorities.py",
        'pool("accounting-on")',
    ),
    "deploy/slurm/local-cluster start": (SLURM, '"start",'),
    "deploy/slurm/local-cluster stop": (SLURM, '"stop"'),
    "condor_chirp": ("tests/unit/test_condor_node_scripts.py", "condor_chirp"),
    "condor_gpu_discovery": ("tests/unit/test_device_names.py", "condor_gpu_discovery"),
    "condor_history": ("tests/integration/test_condor_history.py", "condor_history"),
    "condor_status": ("tests/integration/test_condor_history.py", "condor_status"),
    "condor_q": ("tests/integration/test_condor_pool.py", '"condor_q"'),
    "pip install": ("tests/integration/test_wheel_install.py", '"pip", "install"'),
    "sacct": ("tests/integration/slurm/test_slurm_history.py", '"sacct"'),
    "sbatch": ("tests/integration/slurm/cluster.py", '"sbatch"'),
    "scontrol": ("tests/integration/slurm/test_slurm_node.py", '"scontrol"'),
    "scontrol release": ("tests/integration/slurm/test_slurm_node.py", '"scontrol", "release"'),
    "scontrol requeuehold": ("tests/contract/test_slurm_adapter.py", "requeuehold"),
    "scontrol resume": ("tests/integration/slurm/test_slurm_trials.py", "resume"),
    "scontrol show": ("tests/integration/slurm/test_slurm_node.py", '"scontrol", "show"'),
    "scontrol suspend": ("tests/integration/slurm/test_slurm_trials.py", "suspend"),
    "scontrol update": ("tests/integration/slurm/test_slurm_node.py", '"scontrol", "update"'),
    "sinfo": ("tests/contract/test_slurm_adapter.py", '"sinfo"'),
    "slurmd": ("tests/unit/test_device_names.py", "slurmd -G"),
    "squeue": ("tests/integration/slurm/cluster.py", '"squeue"'),
    "srun": ("tests/integration/slurm/test_slurm_gangs.py", "srun"),
    "condor_submit": ("tests/integration/test_condor_admin_tools.py", '"condor_submit"'),
    "condor_qedit": ("tests/integration/test_condor_admin_tools.py", '"condor_qedit"'),
    "condor_release": ("tests/integration/test_condor_admin_tools.py", '"condor_release"'),
    "condor_reconfig": ("tests/integration/test_condor_admin_tools.py", '"condor_reconfig"'),
    "condor_reschedule": ("tests/integration/test_condor_admin_tools.py", '"condor_reschedule"'),
    "condor_vacate_job": ("tests/integration/test_condor_admin_tools.py", '"condor_vacate_job"'),
    "scontrol reconfigure": (
        "tests/integration/slurm/test_slurm_admin_tools.py",
        '"scontrol", "reconfigure"',
    ),
    "sdiag": ("tests/integration/slurm/test_slurm_admin_tools.py", '"sdiag"'),
    "sysctl": ("tests/unit/test_guide_tools.py", 'shutil.which("sysctl")'),
    "nvidia-smi": ("tests/unit/test_guide_tools.py", '"nvidia-smi"'),
    "man": ("tests/unit/test_guide_tools.py", '["man", "-P", "cat"'),
    "bench/snapshot_decode.py": ("tests/unit/test_guide_tools.py", '"snapshot_decode.py"'),
    "bench/startup.py": ("tests/integration/test_wheel_install.py", '"startup.py"'),
    "make dist": ("tests/integration/test_wheel_install.py", '"dist")'),
    "make docs": ("tests/unit/test_make_targets.py", 'make(tmp_path, "docs", "man")'),
    "make man": ("tests/unit/test_make_targets.py", 'make(tmp_path, "docs", "man")'),
    "make demo": ("tests/unit/test_make_targets.py", 'make(tmp_path, "demo")'),
    "make test": ("tests/unit/test_make_targets.py", '"make", "-n", f"VENV={fresh}", "test"'),
    "make .venv/.test": ("tests/unit/test_make_targets.py", "# make .venv/.test"),
}

#: Commands a guide shows that no test here runs, and why.
NOT_RUN: dict[str, str] = {}


@functools.cache
def all_shown() -> tuple[Shown, ...]:
    return tuple(command for page in guide_pages() for command in shown(page))


def test_the_guides_are_the_navs_admin_and_user_guides_and_hand_written_reference() -> None:
    names = {page.name for page in guide_pages()}
    assert {"install.md", "deploy-htcondor.md", "operations.md", "waiting.md"} <= names
    assert {"metrics.md", "exit-codes.md"} <= names
    assert "cli.md" not in names and "benchmarks.md" not in names


def test_the_extraction_finds_block_and_inline_commands() -> None:
    commands = {key(c.words) for c in all_shown()}
    assert {"deploy/condor/pool start", "sbatch", "coshare condor cycle", "pip install"} <= commands
    assert all(not c.words[0].startswith(("#", "[")) for c in all_shown())


def test_every_command_a_guide_shows_is_run_by_a_named_test() -> None:
    missing = sorted(
        {f"{c.page}: {c.text}  [{key(c.words)}]" for c in all_shown()}
        - {
            f"{c.page}: {c.text}  [{key(c.words)}]"
            for c in all_shown()
            if key(c.words) in RUN_BY or key(c.words) in NOT_RUN
        }
    )
    assert not missing, "shown in a guide but run by no test listed in RUN_BY:\n" + "\n".join(
        missing
    )


@pytest.mark.parametrize("command", sorted(RUN_BY))
def test_each_named_test_runs_its_command(command: str) -> None:
    path, evidence = RUN_BY[command]
    source = (ROOT / path).read_text()
    assert evidence in source, f"{path} does not hold {evidence!r} ({command})"
    last = command.split()[-1].removeprefix("bench/").removesuffix(".py")
    named = evidence.replace("_", "-").replace("-", " ")
    assert (
        last in evidence or last.replace("-", " ").removesuffix("3") in named or (last == "coshare")
    ), (command, evidence)
    ast.parse(source)  # a test module, not a note


def test_no_listed_command_is_left_over() -> None:
    used = {key(c.words) for c in all_shown()}
    stale = sorted((set(RUN_BY) | set(NOT_RUN)) - used)
    assert not stale, f"listed, but no guide shows them: {stale}"
    # what must be run cannot be excused
    assert not [k for k in NOT_RUN if k.startswith(("coshare", "deploy/"))]


def test_the_coshare_commands_the_guides_name_exist() -> None:
    for command in all_shown():
        if command.words[0].removeprefix(".venv/bin/") == "coshare":
            _, _, unknown = resolve(command.words[1:])
            assert not unknown, f"{command.page}: {command.text}: {unknown}"


def test_each_deploy_command_names_a_subcommand_and_options_its_script_parses() -> None:
    deploy = [c for c in all_shown() if c.words[0].startswith("deploy/")]
    assert len(deploy) >= 6
    for command in deploy:
        script = ROOT / command.words[0]
        assert script.is_file(), f"{command.page}: {command.text}"
        subcommands, options = script_usage(script)
        assert command.words[1] in subcommands, f"{command.page}: {command.text}: {subcommands}"
        if command.words[1] == "exec":
            continue  # the rest is a command run in the pool
        given = {w.split("=", 1)[0] for w in command.words[2:] if w.startswith("--")}
        assert given <= options, f"{command.page}: {command.text}: {given - options}"
    # the check itself: an option the script does not parse is caught
    assert "--nodez" not in script_usage(ROOT / "deploy/slurm/local-cluster")[1]


def test_shell_blocks_say_sh_so_their_commands_are_checked() -> None:
    for page in guide_pages():
        assert not unlabelled_shell_blocks(page), page.name


def fixture_start_options() -> list[str]:
    """The options tests/integration/slurm/conftest.py starts the local cluster with."""
    tree = ast.parse((ROOT / SLURM).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "START_OPTIONS" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{SLURM} has no START_OPTIONS")


def test_the_slurm_walk_through_starts_the_cluster_as_the_integration_tests_do() -> None:
    (start,) = [
        c
        for c in shown(ROOT / "docs" / "deploy-slurm.md")
        if c.words[:2] == ("deploy/slurm/local-cluster", "start")
    ]
    options = [w for w in start.words[3:]]
    bin_at = options.index("--coshare-bin")
    assert options[:bin_at] + options[bin_at + 2 :] == fixture_start_options()


def test_the_shipped_units_and_cron_entries_run_commands_that_exist() -> None:
    """The guides name deploy/'s systemd units and cron files: the coshare command each
    runs exists with its options, each other program is one the package installs, and each
    timer starts a service that is shipped beside it."""
    table = (ROOT / "pyproject.toml").read_text().split("[project.scripts]\n", 1)[1]
    scripts = set(re.findall(r"^([\w-]+) = ", table.split("\n\n", 1)[0], re.M))
    files = [
        *ROOT.glob("deploy/**/*.service"),
        *ROOT.glob("deploy/**/*.cron"),
        *ROOT.glob("deploy/condor/cron.d/*"),
    ]
    assert len(files) >= 6
    ran = []
    for path in files:
        for line in path.read_text().splitlines():
            found = re.search(r"(?:ExecStart=|\s)(/\S+/bin/(coshare[\w-]*))((?: [^;>]*)?)", line)
            if found is None or line.lstrip().startswith("#"):
                continue
            program, args = found.group(2), found.group(3).split()
            assert program in scripts, f"{path.name}: {program}"
            if program == "coshare":
                _, command, unknown = resolve(args)
                assert command and not unknown, f"{path.name}: {line}"
            ran.append((path.name, program, *args))
    assert ("coshare-slurm-cycle.service", "coshare", "slurm", "cycle") in ran
    for timer in ROOT.glob("deploy/**/*.timer"):
        unit = re.search(r"^Unit=(\S+)", timer.read_text(), re.M)
        service = unit.group(1) if unit else timer.with_suffix(".service").name
        assert (timer.parent / service).is_file(), timer


#: Pages of the site's Development section speak to developers, and name test files.
#: benchmarks.md is generated with its measurements, by its own script.
FOR_DEVELOPERS = {"benchmarks.md"}
#: An issue tracker's numbers and the test suite's files: not what an admin or user reads.
DEVELOPER_TALK = re.compile(
    r"\b[Ii]ssues? #?\d+|\btests/|\btest_\w+\.py|\bpytest\b|::test_|\bconftest\b"
)


def development_pages() -> set[str]:
    nav = (ROOT / "mkdocs.yml").read_text()
    section = nav.split("  - Development:", 1)[1]
    return set(re.findall(r"(\S+\.md)\s*$", section, re.M))


def test_no_page_for_admins_or_users_speaks_of_issues_or_test_files() -> None:
    skip = development_pages() | FOR_DEVELOPERS
    assert "development-tests.md" in skip and "install.md" not in skip
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in skip]
    assert len(pages) >= 40
    found = [
        f"{page.name}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if DEVELOPER_TALK.search(line)
    ]
    assert not found, "\n".join(found)
    # the check itself
    assert DEVELOPER_TALK.search("fixed in issue 33") and DEVELOPER_TALK.search(
        "see `tests/unit/test_x.py`"
    )
    assert not DEVELOPER_TALK.search("Table II, 1,000 jobs, `make test`")


def test_each_figure_in_the_docs_has_the_command_that_draws_it_beside_it() -> None:
    """Every PNG under docs/figures/ is shown by a page, and right under it the page prints
    the ``coshare`` command that draws that file (``--plot docs/figures/NAME.png``), with a
    caption that states the error bars."""
    figures = sorted((ROOT / "docs" / "figures").glob("*.png"))
    assert figures
    shown_at: dict[str, str] = {}
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        for found in re.finditer(r"!\[[^\]]*\]\(figures/([\w.-]+\.png)\)", text):
            beside = text[found.end() :].split("\n\n![", 1)[0][:600]
            command = re.search(r"`(?:\.venv/bin/)?coshare ([^`]+)`", beside)
            assert command, f"{page.name}: {found.group(1)} has no command beside it"
            words = command.group(1).split()
            _, path, unknown = resolve(words)
            assert path and not unknown, f"{page.name}: {command.group(0)}"
            assert f"docs/figures/{found.group(1)}" in words, command.group(0)
            assert "error bars" in beside, f"{page.name}: {found.group(1)}: no error bars said"
            shown_at[found.group(1)] = page.name
    assert sorted(shown_at) == [f.name for f in figures]


def test_the_condor_walk_throughs_output_is_what_its_commands_print() -> None:
    """The HTCondor walk-through runs on a real pool (``deploy/condor/pool``, as the
    integration tests start it), so its output is checked here line by line against what
    the code prints: the cycle's summary as ``cycle_summary`` writes it for the jobs shown
    (timings aside), and the ``condor_q -af:h`` header as the attributes the command asks."""
    from coshare.cli.render import cycle_summary
    from coshare.cycle.run import CycleReport
    from coshare.model import Assignment, Plan
    from coshare.ports import ApplyReport

    page = (ROOT / "docs" / "deploy-htcondor.md").read_text()
    walk = page.split("## Walk-through with the local pool", 1)[1]
    blocks = FENCE_BLOCK.findall(walk)
    commands, output = blocks[0], blocks[1].splitlines()
    submitted = int(re.search(r"^queue (\d+)$", commands, re.M).group(1))  # type: ignore[union-attr]
    jobs = tuple(f"1.{i}" for i in range(submitted))
    plan = Plan("sharepack", tuple(Assignment(j, "node1", ("0",)) for j in jobs))
    printed = cycle_summary(CycleReport(plan=plan, apply=ApplyReport(applied=jobs)))
    timings = re.compile(r"\(read [\d.]+ s, plan [\d.]+ s, apply [\d.]+ s\)")
    assert timings.sub("", output[0]) == timings.sub("", printed.splitlines()[0])
    asked = re.search(r"condor_q -af:h (.*)$", commands, re.M)
    assert asked is not None and output[1].split() == asked.group(1).split()
    rows = [line.split() for line in output[2:] if line != "..."]
    assert rows and all(len(row) == len(output[1].split()) for row in rows)
    assert {row[3] for row in rows} <= {"node1", "node2", "node3", 'node4 " || true || "'}


def test_each_make_target_a_guide_shows_is_in_the_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w./$()-]+):", makefile, re.M))
    targets |= {t.replace("$(VENV)", ".venv") for t in targets}
    shown_targets = {c.words[1] for c in all_shown() if c.words[0] == "make"}
    assert {"dist", "test"} <= shown_targets
    assert shown_targets <= targets, shown_targets - targets


def test_the_condor_walk_through_starts_the_pool_as_the_integration_tests_do() -> None:
    """The pool's start line sets the environment tests/integration/condor_pool.py's
    ``pool`` sets (the number of schedds aside: the script's default, one)."""
    helper = (ROOT / POOL).read_text().split("def pool(", 1)[1].split("\ndef ", 1)[0]
    tests_set = set(re.findall(r'"(CONDOR_POOL_\w+)":', helper)) - {"CONDOR_POOL_SCHEDDS"}
    assert tests_set
    page = (ROOT / "docs" / "deploy-htcondor.md").read_text()
    (line,) = re.findall(r"^(.*)deploy/condor/pool start\b", page, re.M)
    assert set(re.findall(r"(CONDOR_POOL_\w+)=", line)) == tests_set
