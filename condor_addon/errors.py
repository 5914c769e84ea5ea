"""Errors of the HTCondor adapter, under coshare's tree (:mod:`coshare.errors`)::

SchedulerError
├── SchedulerUnavailable      the collector or schedd cannot be reached (client reads)
└── EditFailed                a queue edit was refused or did not reach the schedd
"""

from __future__ import annotations

from coshare.errors import SchedulerError


class EditFailed(SchedulerError):
    """A queue edit was refused or did not reach the schedd; nothing of it was written.

    Attributes:
        attribute: the attribute being written.
        jobs: how the jobs were named (ids or a constraint), for the message.
    """

    def __init__(self, attribute: str, jobs: str, detail: str) -> None:
        self.attribute = attribute
        self.jobs = jobs
        super().__init__(f"writing {attribute} of {jobs} failed: {detail}")
