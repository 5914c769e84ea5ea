"""The exit statuses of every ``coshare`` command, in one table.

Each command's ``--help`` ends with the statuses it can exit with (:func:`exit_status_help`),
its man page lists them, and the code that exits uses these names: cron, systemd and
scripts read them.

=====  ===============================================================================
0      success (a cycle: every write went through; jobs may still wait)
1      the scheduler, a node helper or an external command failed, or an extra is missing
2      bad input: a snapshot, config, flag, annotation or job id that cannot be used
3      a cycle ran but some jobs' writes failed (they are planned again next cycle)
=====  ===============================================================================

Pure: constants and text only.
"""

from __future__ import annotations

from collections.abc import Mapping

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_INPUT = 2
EXIT_PARTIAL = 3

#: What each status means, for every command that does not say otherwise.
MEANINGS: Mapping[int, str] = {
    EXIT_OK: "success",
    EXIT_RUNTIME: "the scheduler, a node helper or a command failed, or an extra is missing",
    EXIT_INPUT: "bad input: snapshot, config, flags, annotations or job id",
    EXIT_PARTIAL: "the cycle ran but some jobs' writes failed (planned again next cycle)",
}

#: The statuses of a command that are not the default ``0, 1, 2``, by command path.
COMMAND_CODES: Mapping[str, tuple[int, ...]] = {
    # plan, demo and config check: 1 where the 'planner' extra (numpy) is not installed
    "schema": (EXIT_OK, EXIT_INPUT),
    "config show": (EXIT_OK, EXIT_INPUT),
    "condor cycle": (EXIT_OK, EXIT_RUNTIME, EXIT_INPUT, EXIT_PARTIAL),
    "slurm cycle": (EXIT_OK, EXIT_RUNTIME, EXIT_INPUT, EXIT_PARTIAL),
}

#: Commands that exit with the status of a command they run, and what else they say.
PASS_THROUGH: Mapping[str, str] = {
    "node job-exec": "the command's own status (128+N: killed by signal N); 137: coshare "
    "killed the job (the reason on standard error)",
    "node job-run": "the command's own status (128+N: killed by signal N); 137: coshare "
    "killed the job (the reason on standard error)",
    "node offload": "the command's own status (128+N: killed by signal N)",
    "node launch": "the job's own status; 137: coshare killed the job; 1: the node daemon "
    "refused to start it",
}

DEFAULT_CODES = (EXIT_OK, EXIT_RUNTIME, EXIT_INPUT)

#: Lead line of the section (click keeps lines after ``\\b`` as they are).
HEADING = "Exit status:"


def codes_of(path: str) -> tuple[int, ...]:
    """The statuses command ``path`` (``"condor cycle"``) may exit with."""
    return COMMAND_CODES.get(path, DEFAULT_CODES)


def exit_status_lines(path: str) -> list[tuple[str, str]]:
    """``(status, meaning)`` rows of command ``path``, for help texts and man pages."""
    rows = [(str(code), MEANINGS[code]) for code in codes_of(path)]
    if path in PASS_THROUGH:
        rows = [r for r in rows if r[0] != str(EXIT_OK)]
        rows.insert(0, ("N", PASS_THROUGH[path]))
    return rows


def exit_status_help(path: str) -> str:
    """The ``Exit status:`` section of command ``path``'s ``--help`` (click epilog text)."""
    lines = [f"  {code:<3}{meaning}" for code, meaning in exit_status_lines(path)]
    return "\b\n" + HEADING + "\n" + "\n".join(lines)
