"""Reference documents generated from the code itself, so they cannot drift from it
man pages and ``docs/cli.md`` from the command line's own help (click), and
``docs/config.md`` from the configuration's dataclasses and their docstrings.

::

    python -m coshare.cli.reference man DIR     man pages, DIR/man1/coshare*.1 and
                                            DIR/man5/coshare.yaml.5 (make man: man/)
    python -m coshare.cli.reference docs DIR    DIR/cli.md and DIR/config.md (make docs)

``tests/unit/test_reference.py`` checks that the committed ``docs/cli.md``,
``docs/config.md`` and ``man/`` (installed with the wheel under ``share/man``) are what this
prints, and that every man page renders with groff.
A small generator rather than click-man: it walks lazily loaded groups too, adds each
command's exit statuses (:mod:`coshare.cli.exit_codes`), and needs no extra dependency.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import yaml

from coshare import __version__
from coshare.cli.exit_codes import HEADING, exit_status_lines
from coshare.cli.main import cli, document_exit_statuses
from coshare.config import DEFAULT_CONFIG_PATH, Config, to_dict

#: Shell completion, documented on the root man page and in docs/cli.md.
COMPLETION = (
    "Shell completion needs no extra: click generates it. Add to ~/.bashrc\n"
    '    eval "$(_COSHARE_COMPLETE=bash_source coshare)"\n'
    "(zsh: zsh_source in ~/.zshrc; fish: _COSHARE_COMPLETE=fish_source coshare | source)."
)


#: The EXAMPLES section of a command's man page, by command (``coshare`` and its words); a
#: command not here gets its ``--help``.
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "coshare": [
        (
            "Plan the bundled example's pending jobs and print the plan:",
            "coshare plan common/coshare/examples/paper-cluster.json",
        ),
        (
            "Write the deployment files (coshare-launch included) under /tmp/deploy:",
            "coshare deploy-files /tmp/deploy",
        ),
    ],
    "coshare plan": [
        (
            "Plan a snapshot from standard input with another policy, as JSON:",
            "coshare show --output json | coshare plan - --policy knapsack --output json",
        )
    ],
    "coshare deploy-files": [
        (
            "Write every deployment file, then install the node's helpers:",
            "coshare deploy-files /tmp/deploy\n"
            "install -m 0755 /tmp/deploy/condor/coshare-job-wrapper "
            "/tmp/deploy/condor/coshare-launch /usr/libexec/coshare/",
        )
    ],
    "coshare config check": [
        (
            "Check a config file before installing it:",
            "coshare config check /etc/coshare/config.yaml",
        )
    ],
    "coshare node gate": [
        (
            "Run the offload gate of this node (root, from coshare-node.service):",
            "coshare node gate",
        )
    ],
}


def _environment_and_files(path: tuple[str, ...]) -> list[str]:
    """The ENVIRONMENT, FILES and EXAMPLES sections of a command's page (roff lines)."""
    node = to_dict(Config())["node"]
    lines = [
        ".SH ENVIRONMENT",
        ".TP",
        ".B COSHARE_CONFIG",
        f"The configuration file, when --config names none (else {DEFAULT_CONFIG_PATH}).",
        ".TP",
        ".B COSHARE_<SECTION>_<KEY>",
        _roff(
            "One setting of the configuration (COSHARE_POLICY_NAME=random), over the "
            "file's; see coshare.yaml(5)."
        ),
        ".SH FILES",
        ".TP",
        f".B {DEFAULT_CONFIG_PATH}",
        "The configuration, when neither --config nor COSHARE_CONFIG names one; "
        "see \\fBcoshare.yaml\\fR(5).",
        ".TP",
        f".B {_roff(node['control_socket'])}",
        "The node daemon's control socket (node.control_socket).",
        ".TP",
        f".B {_roff(node['gate_socket'])}",
        "The offload gate's socket (node.gate_socket).",
        ".SH EXAMPLES",
    ]
    examples = EXAMPLES.get(" ".join(path)) or [
        ("Print this command's help and exit statuses:", " ".join((*path, "--help")))
    ]
    for text, command in examples:
        lines += [".PP", _roff(text), ".PP", ".RS 4", ".nf", _roff(command), ".fi", ".RE"]
    return lines


def commands(
    command: click.Command, path: tuple[str, ...] = ("coshare",)
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``command`` (groups included, lazy ones loaded), depth first."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                document_exit_statuses(sub, " ".join((*path[1:], name)))
                yield from commands(sub, (*path, name))


def _help_text(command: click.Command) -> str:
    text = command.help or ""
    return re.sub(r"\s*\n\s*", " ", text.split("\b")[0]).strip()


def _options(command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            rows.append((record[0], re.sub(r"\s+", " ", record[1])))
    return rows


def _usage(path: tuple[str, ...], command: click.Command) -> str:
    ctx = click.Context(command, info_name=" ".join(path))
    return " ".join(path) + " " + " ".join(command.collect_usage_pieces(ctx))


def _subcommands(path: tuple[str, ...], command: click.Command) -> list[tuple[str, str]]:
    if not isinstance(command, click.Group):
        return []
    ctx = click.Context(command, info_name=path[-1])
    out = []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            out.append((name, sub.get_short_help_str(limit=200)))
    return out


def _roff(text: str) -> str:
    """Text escaped for roff: backslashes, and a leading dot or quote."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.splitlines())


def man_page(path: tuple[str, ...], command: click.Command, date: str) -> str:
    """One command's man page (section 1), from its click help."""
    name = "-".join(path)
    ctx = click.Context(command, info_name=" ".join(path))
    lines = [
        f'.TH "{name.upper()}" "1" "{date}" "coshare {__version__}" "coshare manual"',
        ".SH NAME",
        f"{_roff(name)} \\- {_roff(command.get_short_help_str(limit=120))}",
        ".SH SYNOPSIS",
        ".B " + _roff(_usage(path, command)),
        ".SH DESCRIPTION",
        _roff(_help_text(command)),
    ]
    options = _options(command, ctx)
    if options:
        lines.append(".SH OPTIONS")
        for flags, text in options:
            lines += [".TP", f".B {_roff(flags)}", _roff(text)]
    subs = _subcommands(path, command)
    if subs:
        lines.append(".SH COMMANDS")
        for sub, text in subs:
            lines += [".TP", f".B {_roff(' '.join((*path[1:], sub)))}", _roff(text)]
    if not isinstance(command, click.Group):
        lines.append(".SH EXIT STATUS")
        for code, meaning in exit_status_lines(" ".join(path[1:])):
            lines += [".TP", f".B {code}", _roff(meaning)]
    lines += _environment_and_files(path)
    if len(path) == 1:
        lines += [".SH SHELL COMPLETION", ".nf", _roff(COMPLETION), ".fi"]
    others = ", ".join(
        f"\\fB{'-'.join(p)}\\fR(1)" for p, _ in commands(cli) if p != path and len(p) <= 2
    )
    lines += [".SH SEE ALSO", others + ", \\fBcoshare.yaml\\fR(5)"]
    return "\n".join(lines) + "\n"


def man_pages(date: str) -> dict[str, str]:
    """Every command's man page, by file name (``coshare-condor-cycle.1``)."""
    return {"-".join(path) + ".1": man_page(path, command, date) for path, command in commands(cli)}


def _yaml(value: object) -> str:
    """A default as YAML writes it (``null``, ``true``, ``[a, b]``, ``{k: v}``), on one line."""
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10**6)
        .strip()
        .removesuffix("...")
        .strip()
    )


_REST = re.compile(r":\w+:`~?([^`]+)`")


def _plain(text: str) -> str:
    """A docstring's reST as Markdown: ``x`` and :mod:`x` become `x`."""
    return _REST.sub(r"`\1`", text).replace("``", "`")


def config_keys() -> list[tuple[str, str, object, str]]:
    """Every key the configuration file takes: ``(section, dotted key, default, meaning)``,
    nested sections (``policy.membw``) with their own keys; a mapping section (``device_kinds``)
    is one row with an empty key."""
    defaults = to_dict(Config())
    out: list[tuple[str, str, object, str]] = []

    def walk(cls: type, prefix: str, values: dict[str, Any]) -> None:
        docs = _attributes(cls)
        hints = typing.get_type_hints(cls)
        nested = []
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                nested.append(f.name)
                continue
            out.append((prefix, f.name, values[f.name], _plain(docs.get(f.name, ""))))
        for name in nested:
            walk(hints[name], f"{prefix}.{name}", values[name])

    hints = typing.get_type_hints(Config)
    for section in (f.name for f in dataclasses.fields(Config)):
        if dataclasses.is_dataclass(hints[section]):
            walk(hints[section], section, defaults[section])
        else:
            out.append((section, "", defaults[section], ""))
    return out


def config_man_page(date: str) -> str:
    """``coshare.yaml(5)``: the configuration file, every section and key with its default
    and meaning (what docs/config.md says)."""
    lines = [
        f'.TH "COSHARE.YAML" "5" "{date}" "coshare {__version__}" "coshare manual"',
        ".SH NAME",
        "coshare.yaml \\- the configuration of coshare",
        ".SH SYNOPSIS",
        f".B {DEFAULT_CONFIG_PATH}",
        ".SH DESCRIPTION",
        _roff(
            "A YAML file at --config PATH, $COSHARE_CONFIG, or "
            f"{DEFAULT_CONFIG_PATH}. Precedence: defaults < file < environment < "
            "command-line flags. Every key can be set from the environment as "
            "COSHARE_<SECTION>_<KEY> (COSHARE_POLICY_NAME=random), except mappings. "
            "Unknown keys are errors listing the valid ones; coshare config check FILE "
            "reports every problem at once; coshare config show prints the effective "
            "values."
        ),
    ]
    heading = None
    for section, key, default, meaning in config_keys():
        if section != heading:
            heading = section
            lines += [".SH " + _roff(section.upper())]
        if not key:
            lines.append(
                _roff(
                    "Device kinds the scheduler does not advertise, by name: "
                    f"{{memory_mib: M, threads: T}} each. Default: {_yaml(default)}."
                )
            )
            continue
        lines += [
            ".TP",
            f".B {_roff(f'{section}.{key}')}",
            f"{_roff(meaning.replace('`', ''))} Default: {_roff(_yaml(default))}.",
        ]
    lines += [
        ".SH ENVIRONMENT",
        ".TP",
        ".B COSHARE_CONFIG",
        "The file, when --config names none.",
        ".SH EXAMPLES",
        ".PP",
        ".RS 4",
        ".nf",
        _roff(
            "policy:\n  name: sharepack\n  threads: strict\nnode:\n"
            "  control_socket: /run/coshare/control.sock"
        ),
        ".fi",
        ".RE",
        ".SH SEE ALSO",
        "\\fBcoshare\\fR(1), \\fBcoshare\\-config\\fR(1)",
    ]
    return "\n".join(lines) + "\n"


def cli_markdown() -> str:
    """``docs/cli.md``: every command's usage, help, options and exit statuses."""
    out = [
        "# Command line reference",
        "",
        "Generated from the commands' own help by `make docs` (`python -m coshare.cli.reference "
        "docs docs`); `coshare COMMAND --help` prints the same.",
        "",
        "```",
        COMPLETION,
        "```",
        "",
    ]
    for path, command in commands(cli):
        ctx = click.Context(command, info_name=" ".join(path))
        out += [
            f"## {' '.join(path)}",
            "",
            "```",
            _usage(path, command),
            "```",
            "",
            _help_text(command),
            "",
        ]
        options = _options(command, ctx)
        if options:
            out += ["| option | meaning |", "|---|---|"]
            out += [f"| `{flags}` | {_cell(text)} |" for flags, text in options] + [""]
        subs = _subcommands(path, command)
        if subs:
            out += ["| command | what it does |", "|---|---|"]
            out += [f"| `{sub}` | {_cell(text)} |" for sub, text in subs] + [""]
        if not isinstance(command, click.Group):
            rows = exit_status_lines(" ".join(path[1:]))
            out += [f"{HEADING} " + "; ".join(f"{code} {meaning}" for code, meaning in rows), ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _attributes(cls: object) -> dict[str, str]:
    """The ``Attributes:`` entries of a dataclass docstring, by name."""
    doc = cls.__doc__ or ""
    found: dict[str, str] = {}
    name = ""
    for line in doc.split("Attributes:", 1)[-1].splitlines():
        match = re.match(r"^\s{8}(\w+): (.*)$", line)
        if match:
            name = match.group(1)
            found[name] = match.group(2)
        elif name and line.startswith(" " * 12):
            found[name] += " " + line.strip()
    return found


def config_markdown() -> str:
    """``docs/config.md``: every section and key with its default (as YAML) and meaning."""
    out = [
        "# Configuration reference",
        "",
        "Generated from `coshare/config.py` by `make docs` (`python -m coshare.cli.reference docs "
        "docs`); `coshare config show` prints the effective values.",
        "",
        "A YAML file at `--config PATH`, `$COSHARE_CONFIG`, or `/etc/coshare/config.yaml`. "
        "Precedence: defaults < file < environment < command-line flags. Every key can be "
        "set from the environment as `COSHARE_<SECTION>_<KEY>` (`COSHARE_POLICY_NAME="
        "random`), except mappings (`device_kinds`, `node.devices`); only variables that "
        "name a section and key are settings, any other `COSHARE_` variable is ignored "
        "(one that looks like a mistyped setting with a warning). Unknown keys in the "
        "file are errors listing the valid ones; `coshare config check FILE` reports every "
        "problem at once. Numbers must be finite and in range: a key's own bounds, else "
        "0 up to a year for durations (`_s`), 2^30 for sizes in MiB (`_mib`), and 1,000 "
        "for counts.",
        "",
    ]
    rows = config_keys()
    for i, (section, key, default, meaning) in enumerate(rows):
        if i == 0 or rows[i - 1][0] != section:
            out += [f"## `{section}`", ""]
            if key:
                out += ["| key | default | meaning |", "|---|---|---|"]
        if not key:
            out += [
                "Device kinds the scheduler does not advertise, by name (compared ignoring "
                "case, spaces, `-` and `_`): `{memory_mib: M, threads: T}` each. "
                f"Default: `{_yaml(default)}`.",
                "",
            ]
            continue
        out.append(f"| `{key}` | `{_cell(_yaml(default))}` | {_cell(meaning)} |")
        if i + 1 == len(rows) or rows[i + 1][0] != section:
            renamed = getattr(_section_class(section), "RENAMED", {})
            if renamed:
                old = ", ".join(f"`{o}` (now `{n}`)" for o, n in renamed.items())
                out += ["", f"Old names still read, with a warning: {old}."]
            out.append("")
    return "\n".join(out)


def _section_class(section: str) -> Any:
    """The dataclass of a dotted section (``policy.membw``)."""
    cls: Any = Config
    for part in section.split("."):
        cls = typing.get_type_hints(cls)[part]
    return cls


def main(argv: list[str]) -> int:
    """``python -m coshare.cli.reference man|docs DIR``."""
    if len(argv) != 2 or argv[0] not in ("man", "docs"):
        print("usage: python -m coshare.cli.reference man|docs DIR", file=sys.stderr)
        return 2
    target = Path(argv[1])
    if argv[0] == "docs":
        target.mkdir(parents=True, exist_ok=True)
        (target / "cli.md").write_text(cli_markdown())
        (target / "config.md").write_text(config_markdown())
        return 0
    write_man_pages(target, MAN_DATE)
    print(f"{len(list(target.glob('man*/*')))} man pages in {target}")
    return 0


#: The date on the shipped man pages: the release's, not the day they were generated (so
#: that regenerating them changes nothing until the commands do).
MAN_DATE = "2026-11-28"


def write_man_pages(target: Path, date: str) -> dict[Path, str]:
    """Every man page under ``target`` (``man1/``, ``man5/``), stale ones removed; returns
    what it wrote."""
    pages = {target / "man1" / name: text for name, text in man_pages(date).items()}
    pages[target / "man5" / "coshare.yaml.5"] = config_man_page(date)
    for section in ("man1", "man5"):
        (target / section).mkdir(parents=True, exist_ok=True)
        for old in (target / section).iterdir():
            if old not in pages:
                old.unlink()
    for path, text in pages.items():
        path.write_text(text)
    return pages


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
