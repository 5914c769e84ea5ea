"""Errors of the Slurm adapter, under coshare's tree (:mod:`coshare.errors`)::

    SchedulerError
    ├── SchedulerUnavailable
    │   └── SlurmControllerDown   slurmctld does not answer (after the retries)
    ├── SlurmOutputError          squeue/sinfo printed something we cannot read
    └── PlacementError            an AdminComment that claims a placement but cannot be read

A value that cannot be written through scontrol's command language is
:class:`coshare.errors.UnsafeValue`.
"""

from __future__ import annotations

from coshare.errors import SchedulerError, SchedulerUnavailable


class SlurmControllerDown(SchedulerUnavailable):
    """slurmctld could not be reached; nothing more can be read or written this cycle.

    Attributes:
        command: the Slurm command that found it down.
        detail: what the command printed.
    """

    def __init__(self, command: str, detail: str) -> None:
        self.command = command
        self.detail = detail
        super().__init__(
            f"slurmctld is not answering ({command}: {detail}); nothing was changed that the "
            "next cycle cannot finish"
        )


class SlurmOutputError(SchedulerError):
    """A Slurm command's output is not what this adapter understands."""

    def __init__(self, command: str, problem: str) -> None:
        self.command = command
        self.problem = problem
        super().__init__(f"cannot read the output of {command}: {problem}")


class PlacementError(SchedulerError, ValueError):
    """An AdminComment that starts like a coshare placement but cannot be read back (also a
    ValueError, as parsers' errors are)."""
