"""The generated references (coshare.cli.reference): docs/cli.md and docs/config.md are up to date
with the code, the man pages cover every command and render, every help lists its exit
statuses, and shell completion works without extras."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.cli.reference import (
    cli_markdown,
    commands,
    config_markdown,
    environment_markdown,
    man_pages,
)

from tests.unit.test_first_contact import BASE_ONLY

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "generate"),
    [
        ("cli.md", cli_markdown),
        ("config.md", config_markdown),
        ("environment.md", environment_markdown),
    ],
)
def test_the_committed_references_are_up_to_date(name: str, generate: object) -> None:
    assert callable(generate)
    assert (ROOT / "docs" / name).read_text() == generate(), (
        f"docs/{name} is out of date: run make docs"
    )


def test_every_command_has_a_man_page_with_its_exit_statuses() -> None:
    pages = man_pages("2026-01-01")
    paths = [p for p, _ in commands(cli)]
    assert {"-".join(p) + ".1" for p in paths} == set(pages)
    for path in (("coshare", "condor", "cycle"), ("coshare", "plan"), ("coshare", "schema")):
        assert path in paths
    cycle = pages["coshare-condor-cycle.1"]
    assert cycle.startswith('.TH "COSHARE-CONDOR-CYCLE" "1" "2026-01-01"')
    for section in (".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH EXIT STATUS", ".SH SEE ALSO"):
        assert section in cycle
    assert ".B 3\nthe cycle ran but some jobs' writes failed" in cycle
    assert "_COSHARE_COMPLETE=bash_source" in pages["coshare.1"]
    for name, page in pages.items():  # no text line that roff would take for a request
        for line in page.splitlines():
            request = r"^[.'](?!TH |SH |TP$|B |nf$|fi$|PP$|RS 4$|RE$)"
            assert not re.match(request, line), (name, line)


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed here")
def test_the_man_pages_render_without_warnings(tmp_path: Path) -> None:
    for name, page in man_pages("2026-01-01").items():
        path = tmp_path / name
        path.write_text(page)
        result = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0 and result.stderr == "", (name, result.stderr)


def test_every_command_help_lists_its_exit_statuses() -> None:
    for path, command in commands(cli):
        if path in (("coshare",), ("coshare", "node", "launch")) or hasattr(command, "commands"):
            continue  # groups; launch hands its arguments, --help included, to coshare-launch
        helped = subprocess.run(
            [sys.executable, "-c", BASE_ONLY, *path[1:], "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert helped.returncode == 0, (path, helped.stderr)
        assert (
            "Exit status:\n    0  " in helped.stdout or "Exit status:\n    N  " in helped.stdout
        ), path


def test_the_launchers_help_lists_its_exit_statuses() -> None:
    # `coshare node launch` hands --help to coshare-launch (standard library only), whose
    # argparse help listed no exit status at all, while every command's --help lists its
    # exit statuses. Its statuses must be the ones coshare.cli.exit_codes documents.
    from coshare.cli.exit_codes import PASS_THROUGH

    outputs = {}
    for args in ((), ("run",), ("task-prolog",)):
        helped = subprocess.run(
            [sys.executable, "-c", BASE_ONLY, "node", "launch", *args, "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert helped.returncode == 0, (args, helped.stderr)
        outputs[args] = helped.stdout
    assert "Exit status of run:\n  N    the job's own status" in outputs[()]
    assert "Exit status of task-prolog:\n  0    " in outputs[()]
    assert "Exit status:\n  N    the job's own status" in outputs[("run",)]
    assert "\n  137  coshare killed the job" in outputs[("run",)]
    assert "\n  1    the node daemon refused to start it" in outputs[("run",)]
    assert "Exit status:\n  0    " in outputs[("task-prolog",)]
    assert "137: coshare killed the job; 1: the node daemon refused" in PASS_THROUGH["node launch"]


def complete(words: str, base_only: bool = True) -> list[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COSHARE_")},
        "_COSHARE_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    code = BASE_ONLY.replace("main(sys.argv[1:])", "main()")
    code = code.replace(
        "from coshare.cli.main import main",
        "sys.argv[0] = 'coshare'\nfrom coshare.cli.main import main",
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]  # "plain,condor"


def test_shell_completion_works_without_the_extras() -> None:
    assert {"condor", "config"} <= set(complete("coshare con"))
    assert set(complete("coshare condor ")) == {"cycle", "explain", "show", "trigger"}
    assert "--policy" in complete("coshare slurm cycle --p")
    assert complete("coshare schema ") == ["plan", "snapshot"]
    source = subprocess.run(
        [
            sys.executable,
            "-c",
            BASE_ONLY.replace("main(sys.argv[1:])", "sys.argv[0] = 'coshare'; main()"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "_COSHARE_COMPLETE": "bash_source"},
    )
    assert "complete -o nosort -F _coshare_completion coshare" in source.stdout


def test_the_shipped_man_pages_are_up_to_date(tmp_path: Path) -> None:
    # man/ is what the wheel installs under share/man (pyproject's data-files): make man,
    # which runs the generator as an admin without the repository does (docs/contracts.md).
    done = subprocess.run(
        [sys.executable, "-m", "coshare.cli.reference", "man", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    written = {p: p.read_text() for p in tmp_path.rglob("*.[15]")}
    shipped = sorted(p.relative_to(ROOT / "man").as_posix() for p in (ROOT / "man").rglob("*.[15]"))
    assert shipped == sorted(p.relative_to(tmp_path).as_posix() for p in written)
    assert "man5/coshare.yaml.5" in shipped and "man1/coshare-node-gate.1" in shipped
    for path, text in written.items():
        name = path.relative_to(tmp_path).as_posix()
        assert (ROOT / "man" / name).read_text() == text, f"man/{name} is stale: make man"
        if name.startswith("man1/"):
            for section in (".SH ENVIRONMENT", ".SH FILES", ".SH EXAMPLES"):
                assert section in text, (name, section)


def test_the_config_reference_lists_every_key_the_loader_accepts(tmp_path: Path) -> None:
    # Ask the loader itself: an unknown key in each section makes it list that section's
    # valid keys; docs/config.md must have a row for each, nested sections included, and
    # no default written as Python (None, True, False, quoted dict keys).
    text = (ROOT / "docs" / "config.md").read_text()
    documented: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("## `"):
            section = line[4:-1]
        elif line.startswith("| `") and section:
            documented.setdefault(section, set()).add(line.split("`")[1])
    sections = [s for s in documented if s != "device_kinds"]
    assert {"policy", "policy.membw", "policy.sns", "node", "slurm", "condor"} <= set(sections)
    for name in sections:
        nested: object = {"not_a_key": 1}
        for part in reversed(name.split(".")):
            nested = {part: nested}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(nested))
        ran = CliRunner().invoke(cli, ["config", "check", str(path)])
        found = re.search(
            rf"{re.escape(name)}: unknown key 'not_a_key' \(valid keys: ([^)]*)\)", ran.stderr
        )
        assert found is not None, ran.stderr
        valid = set(found.group(1).split(", "))
        subsections = {s.rsplit(".", 1)[1] for s in sections if s.startswith(name + ".")}
        assert valid - subsections == documented[name], name
    for python in ("| `None` |", "| `True` |", "| `False` |", "{'"):
        assert python not in text


def test_every_coshare_variable_deploy_and_the_node_helpers_use_is_in_the_reference() -> None:
    """The environment reference lists every ``COSHARE_`` name the deploy scripts, the
    scheduler configuration snippets and the node helpers use: a setting, or one of coshare's
    own (a prefix such as ``COSHARE_NODE_`` that the code completes is a setting's)."""
    from coshare.config import NOT_SETTINGS

    text = (ROOT / "docs" / "environment.md").read_text()
    used: set[str] = set()  # names inside longer macro names (STARTD_CRON_COSHARE_...) are not
    for folder in ("deploy", "common/coshare/node", "slurm_addon", "condor_addon"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix not in (".pyc", ".png"):
                found = re.findall(
                    r"(?<![A-Z_])COSHARE_[A-Z_]*[A-Z]", path.read_text(errors="replace")
                )
                used |= set(found)
    assert used, "no COSHARE_ variable found: the scan looks in the wrong place"
    missing = sorted(v for v in used if f"`{v}`" not in text)
    assert missing == []
    assert all(f"`{name}`" in text for name in NOT_SETTINGS)
