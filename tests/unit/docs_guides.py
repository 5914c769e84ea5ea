"""The commands the admin and user guides show, found in their pages: each shell block
(```` ```sh ````, or indented four spaces) split into simple commands, and each inline code
span that starts with a program. ``key`` names what a command runs: ``coshare condor
cycle``, ``deploy/condor/pool start``, ``bench/startup.py``, or the program (``sbatch``)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]

#: Programs a guide may show in an inline code span as a command (its first word). A shell
#: block's commands are found whatever their program.
PROGRAMS = frozenset(
    {
        "coshare",
        "coshare-launch",
        "condor_chirp",
        "condor_gpu_discovery",
        "condor_history",
        "condor_q",
        "condor_qedit",
        "condor_reconfig",
        "condor_release",
        "condor_reschedule",
        "condor_submit",
        "condor_vacate_job",
        "curl",
        "flock",
        "make",
        "man",
        "nvidia-smi",
        "pip",
        "python",
        "python3",
        "sacct",
        "sbatch",
        "scontrol",
        "sdiag",
        "sinfo",
        "slurmd",
        "squeue",
        "srun",
        "sysctl",
        "systemctl",
    }
)
#: Shell built-ins and file tools a walk-through uses around the commands it shows.
SHELL = frozenset(
    {"cat", "cd", "date", "do", "done", "echo", "export", "for", "printf", "sed", "sleep"}
)
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n?", re.S | re.M)
INDENTED = re.compile(r"(?:\A|\n\n)((?:    [^\n]*\n)+)")
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Shown:
    """One command a guide shows: its page, words, and whether it is in a shell block."""

    page: str
    words: tuple[str, ...]
    block: bool

    @property
    def text(self) -> str:
        return " ".join(self.words)


#: Reference pages generated from the code (``coshare.cli.reference``), checked by their own
#: test against it.
GENERATED = frozenset({"cli.md", "config.md", "environment.md"})


def follows(expected: str, printed: str) -> str | None:
    """Why ``printed`` does not show ``expected``'s lines in order (``None``: it does)."""
    lines = [line.rstrip() for line in printed.splitlines()]
    at = 0
    for want in expected.rstrip("\n").splitlines():
        text = want.rstrip()
        if text.strip() == "...":
            continue
        prefix = text.endswith("...")
        text = text.removesuffix("...").rstrip()
        while at < len(lines) and not (lines[at].startswith(text) if prefix else lines[at] == text):
            at += 1
        if at == len(lines):
            return f"not printed (in this order): {want!r}"
        at += 1
    return None


def guide_pages() -> list[Path]:
    """The pages of the site's Admin guide and User guide, and the Reference pages written by
    hand (mkdocs.yml's nav)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    guides = nav.split("  - Admin guide:", 1)[1].split("  - Research:", 1)[0]
    names = re.findall(r"(\S+\.md)\s*$", guides, re.M)
    return [ROOT / "docs" / name for name in names if name not in GENERATED]


def shell_lines(block: str) -> Iterator[str]:
    """A shell block's lines, continuations joined, here-document bodies and comments left
    out."""
    lines = iter(block.replace("\\\n", " ").splitlines())
    for line in lines:
        code = re.sub(r"(^|\s)#.*", "", line).strip()
        if not code:
            continue
        yield code
        if found := HEREDOC.search(code):
            for body in lines:
                if body.strip() == found.group(1):
                    break


def simple_commands(line: str) -> Iterator[tuple[str, ...]]:
    """The simple commands of one shell line: command substitutions apart, split at ``;``,
    `` | ``, ``&&``, with redirections, usage brackets (``[--jobs N]``), leading variable
    assignments and shell built-ins left out; ``a|b`` alternatives of a usage give one
    command each."""
    line = HEREDOC.sub("", line)
    while inner := re.search(r"\$\(([^()]*)\)", line):
        yield from simple_commands(inner.group(1))
        line = line[: inner.start()] + "X" + line[inner.end() :]
    while (unbracketed := re.sub(r"\[[^\[\]]*\]", "", line)) != line:
        line = unbracketed
    line = re.sub(r"\d?>>?&?\s*[^\s;|&]+|<\s*[^\s;|&]+", "", line)
    for part in re.split(r";|\s\|\s|&&|\|\|", line):
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        while words and (ASSIGNMENT.match(words[0]) or words[0] in ("do", "sudo")):
            words = words[1:]
        if not words or words[0] in SHELL or words[0].startswith(("./", "/")):
            continue
        alternatives = r"[a-z-]+([|/][a-z-]+)+" if words[0] == "coshare" else r"[a-z-]+(\|[a-z-]+)+"
        split = next((i for i, w in enumerate(words[1:], 1) if re.fullmatch(alternatives, w)), None)
        if split is None:
            yield tuple(words)
        else:
            for alternative in re.split(r"[|/]", words[split]):
                yield (*words[:split], alternative, *words[split + 1 :])


def shown(page: Path) -> Iterator[Shown]:
    """Every command ``page`` shows (``deploy/condor/pool exec CMD``: also ``CMD``)."""
    for command in _shown(page):
        yield command
        if command.words[:2] == ("deploy/condor/pool", "exec") and len(command.words) > 2:
            yield Shown(command.page, command.words[2:], command.block)


def _shown(page: Path) -> Iterator[Shown]:
    text = page.read_text()
    for found in FENCE.finditer(text):
        if found.group(1) in ("sh", "bash"):
            for line in shell_lines(found.group(2)):
                for words in simple_commands(line):
                    yield Shown(page.name, words, True)
    prose = FENCE.sub("\n\n", text)
    for found in INDENTED.finditer(prose):
        block = "\n".join(line[4:] for line in found.group(1).splitlines())
        for line in shell_lines(block):
            for words in simple_commands(line):
                yield Shown(page.name, words, True)
    for found in INLINE.finditer(re.sub(r"^    [^\n]*$", "", prose, flags=re.M)):
        span = " ".join(found.group(1).split())
        plain = span.split()
        while plain and ASSIGNMENT.match(plain[0]):
            plain = plain[1:]
        first = plain[0] if plain else ""
        program = first.removeprefix(".venv/bin/")
        alone = " " not in span.replace("|", " ")
        if program == "coshare" and ": " in span:
            continue  # one of coshare's messages (``coshare killed job 12.0: ...``)
        if first.startswith("deploy/") and not is_script(first):
            continue  # a file deploy/ ships
        if (alone and program in PROGRAMS - {"coshare", "coshare-launch"}) or (
            not alone
            and (program in PROGRAMS or first.startswith(("deploy/", "bench/", ".venv/bin/")))
        ):
            for words in simple_commands(span):
                yield Shown(page.name, words, False)


def is_script(path: str) -> bool:
    """Whether ``path`` (relative to the repository) is a program one runs."""
    file = ROOT / path
    return file.is_file() and os.access(file, os.X_OK)


def unlabelled_shell_blocks(page: Path) -> list[str]:
    """Fenced blocks without a language whose first line is a command: they must say ``sh``
    so that their commands are checked."""
    out = []
    for found in FENCE.finditer(page.read_text()):
        first = found.group(2).split("\n", 1)[0].split()
        program = first[0].removeprefix(".venv/bin/") if first else ""
        if not found.group(1) and (program in PROGRAMS or program.startswith("deploy/")):
            out.append(found.group(2).split("\n", 1)[0])
    return out


def script_usage(script: Path) -> tuple[set[str], set[str]]:
    """The subcommands and options a deploy/ script accepts, read from its argument parsing:
    the words of its last ``case`` (the dispatch) and every ``--option)`` branch."""
    text = script.read_text()
    cases = list(re.finditer(r'^case "?\$\{?1', text, re.M))
    dispatch = text[cases[-1].start() :] if cases else ""
    commands: set[str] = set()
    for alternatives in re.findall(r"^\s*([a-z][a-z|-]*)\)", dispatch, re.M):
        commands.update(alternatives.split("|"))
    options = set(re.findall(r"^\s*(--[a-z][a-z-]*)\)", text, re.M))
    return commands, options


def resolve(words: Sequence[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command ``coshare WORDS`` names (options and their values skipped), its path of
    command names, and the options or commands it was given that do not exist."""
    from coshare.cli.main import cli

    command: click.Command = cli
    path: list[str] = []
    unknown: list[str] = []
    skip = False
    for word in words:
        if word == "--" or word.startswith("["):  # the command's own arguments, or a usage
            break
        if skip:
            skip = False
            continue
        if word.startswith("-") and word != "-":  # a lone - is standard input
            name = word.split("=", 1)[0]
            option = next((p for p in command.params if name in getattr(p, "opts", ())), None)
            if option is None and name not in ("--help", "-h"):
                unknown.append(name)
            skip = option is not None and not getattr(option, "is_flag", False) and "=" not in word
            continue
        if not isinstance(command, click.Group):
            continue  # an argument
        sub = command.get_command(click.Context(command), word)  # lazy: condor, slurm
        if sub is None:
            unknown.append(word)
            break
        command = sub
        path.append(word)
    return command, path, unknown


def key(words: Sequence[str]) -> str:
    """What a shown command runs: ``coshare condor cycle`` (the command, options left out),
    ``deploy/condor/pool start`` (the script and its subcommand), ``bench/startup.py``, or
    the program."""
    program = words[0].removeprefix(".venv/bin/")
    if program == "coshare":
        return " ".join(["coshare", *resolve(words[1:])[1]])
    if program.startswith("deploy/"):
        return " ".join(words[:2])
    if program in ("make", "pip", "scontrol"):
        action = next((w for w in words[1:] if not w.startswith("-")), None)
        return f"{program} {action}" if action else program
    if program in ("python", "python3", "flock"):
        script = next((w for w in words[1:] if w.startswith("bench/")), None)
        if script is not None:
            return script
        if len(words) > 2 and words[1] == "-m":
            return f"python -m {words[2]}"
    return program
