"""The commands the README and the guides show with their output print that output: each
fenced block that starts with ``$ coshare ...`` is run, and every line it shows must appear
in what the command prints, in order (a line ending in ``...`` is a prefix; a line of just
``...`` stands for lines left out). Commands shown without output (deploy steps on a real
cluster) are checked to name commands and options that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli

from tests.unit.docs_guides import follows, resolve

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOWN = re.compile(r"^```[a-z]*\n\$ (coshare [^\n]*)\n(.*?)^```", re.S | re.M)
#: Files the shown commands read that the pages describe rather than ship.
FILES = {
    "bad.json": '{"nodes": [], "running": [], "pending": [{"id": "8.0", '
    '"device_memory_mib": "abc", "device_threads": 60, "colour": "red"}]}\n',
}


def shown() -> list[tuple[str, str, str]]:
    return [
        (page.name, found.group(1), found.group(2))
        for page in PAGES
        for found in SHOWN.finditer(page.read_text())
    ]


@pytest.mark.parametrize(("page", "command", "output"), shown(), ids=lambda v: str(v)[:40])
def test_a_command_shown_with_its_output_prints_it(
    page: str, command: str, output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    args = [str(tmp_path / a) if a in FILES else a for a in shlex.split(command)[1:]]
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    ran = CliRunner().invoke(cli, args, env={"COSHARE_CONFIG": "/dev/null", "COLUMNS": "120"})
    printed = ran.output.replace(str(tmp_path) + "/", "")
    assert follows(output, printed) is None, (
        f"{page}: {command}\n{follows(output, printed)}\n{printed}"
    )


def test_there_are_commands_shown_with_output() -> None:
    assert {page for page, _, _ in shown()} >= {"README.md", "waiting.md"}


#: A ``coshare ...`` command line in a shell block of a guide (not the generated cli.md).
COMMAND = re.compile(r"^(?:\.venv/bin/)?coshare( [^\n#|<>&;]*)", re.M)


def guide_commands() -> list[tuple[str, list[str]]]:
    out = []
    for page in PAGES:
        if page.name == "cli.md":
            continue
        for block in re.findall(r"^```(?:sh|bash)?\n(.*?)^```", page.read_text(), re.S | re.M):
            for found in COMMAND.finditer(block):
                out.append((page.name, shlex.split(found.group(1).replace("\\", " "))))
    return out


def test_the_commands_the_guides_name_exist() -> None:
    named = guide_commands()
    assert len(named) >= 10
    # the check itself: a misspelt command or option is caught
    assert resolve(["condor", "cycel"])[2] == ["cycel"]
    assert resolve(["plan", "x.json", "--polcy", "knapsack"])[2] == ["--polcy"]
    for page, words in named:
        command, _, unknown = resolve(words)
        assert command is not cli and not unknown, f"{page}: coshare {' '.join(words)}: {unknown}"
