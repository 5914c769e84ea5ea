"""The one choke point through which coshare runs external commands.

Argument lists only, never a shell, never a string built from job data; a timeout on every
call; a failure raises :class:`~coshare.errors.CommandFailed` with the argv, status and
output. Adapters take a :class:`CommandRunner` so contract tests can hand them a recorder.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from coshare.errors import CommandFailed, ProgramNotFound


@dataclass(frozen=True)
class CommandResult:
    """What a finished command printed.

    Attributes:
        argv: the argument list that ran.
        returncode: its exit status.
        stdout: standard output, decoded as UTF-8 (bad bytes replaced).
        stderr: standard error, likewise.
    """

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    """Runs one command.

    Contract: runs ``argv`` without a shell, waits at most ``timeout_s`` seconds, and returns
    its result when it exits with status 0 (or ``check`` is false); otherwise raises
    :class:`~coshare.errors.CommandFailed` (``returncode=None`` on timeout; its subclass
    :class:`~coshare.errors.ProgramNotFound` when the program is missing or not executable).
    """

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = True,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run ``argv`` and return what it printed."""
        ...


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    check: bool = True,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run a command (see :class:`CommandRunner` for the contract)."""
    args = [str(a) for a in argv]
    try:
        done = subprocess.run(
            args,
            input=input_text.encode() if input_text is not None else None,
            capture_output=True,
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(
            args, None, _text(exc.stdout), _text(exc.stderr) + "\n(timed out)"
        ) from exc
    except OSError as exc:
        # Not a time-out: the program is missing or not executable, and stays so.
        raise ProgramNotFound(args, exc.strerror or type(exc).__name__) from exc
    result = CommandResult(tuple(args), done.returncode, _text(done.stdout), _text(done.stderr))
    if check and done.returncode != 0:
        raise CommandFailed(args, done.returncode, result.stdout, result.stderr)
    return result


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")
