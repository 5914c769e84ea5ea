"""Who may start, join and end a job over the control socket: the checks, pure.

The root daemon cannot believe what a client writes, only what the kernel says about it
(``SO_PEERCRED`` and /proc). The rules:

- **START** (make a job's group and limits): only a *launcher*, i.e. a process whose parent is
  a trusted scheduler daemon (its executable named in ``node.trusted_launchers``, running as
  an account of ``node.trusted_launcher_uids``: HTCondor's ``condor_starter``, Slurm's
  ``slurmstepd``) and that is in no job's group yet. A job's own processes are in its group,
  so a job can never START itself a second, larger, job. A task of a Slurm job (its parent's
  title names the job) never STARTs: Slurm's jobs are set up by coshare's Prolog, as root, so
  an ordinary Slurm job cannot take cores, or another job's id, on a node coshare manages.
  Root may START anything.
- **JOIN** (move a process into a job's group): the process moved (the caller, or its parent
  for Slurm's TaskProlog, whose parent is the task about to ``exec`` the user's program)
  must run as the job's account, be in no job's group, and be a child of the job's
  launcher (a job started by a launcher) or of a trusted daemon that serves that very job (a
  job started by root, Slurm's Prolog: the ``slurmstepd`` whose title names the job, as
  ``slurmstepd: [1234.batch]``; a user's task of another job of theirs cannot join it). So a
  process can only ever be moved *into* a group, by the path the scheduler starts jobs,
  never out of one or from one job into another.
- **END** (kill what is left, remove the group): the job's launcher, or root.

A refusal is a :class:`Refused` with a code for the protocol and a text naming the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coshare.errors import ReplyError
from coshare.node.process import ProcessInfo

#: How slurmstepd retitles itself: ``slurmstepd: [<job>.<step>]`` (``batch``, ``extern``, 0..).
_STEPD_TITLE = re.compile(r"slurmstepd: \[([0-9]+)(?:\.[A-Za-z0-9_+]+)?\]")


class Refused(ReplyError):
    """A request the rules do not allow.

    Attributes:
        code: the protocol's error code (``not_launcher``, ``in_group``, ``wrong_user``,
            ``not_allowed``, ``gone``).
        text: the reason, naming the job and the process.
    """


@dataclass(frozen=True)
class TrustPolicy:
    """Which scheduler daemons start jobs on this node.

    Attributes:
        launchers: executable basenames (``condor_starter``) or absolute paths.
        launcher_uids: the accounts those daemons run as.
    """

    launchers: tuple[str, ...]
    launcher_uids: tuple[int, ...] = (0,)

    def is_launcher(self, proc: ProcessInfo | None) -> bool:
        """Whether ``proc`` is a trusted scheduler daemon."""
        if proc is None or proc.exe is None or proc.uid not in self.launcher_uids:
            return False
        for entry in self.launchers:
            if entry.startswith("/") and proc.exe == entry:
                return True
            if "/" not in entry and proc.program == entry:
                return True
        return False

    def describe(self) -> str:
        """The launchers and accounts, for messages."""
        uids = ",".join(str(u) for u in self.launcher_uids)
        return f"{', '.join(self.launchers) or 'none'} running as uid {uids}"


def _who(proc: ProcessInfo) -> str:
    return f"process {proc.pid} ({proc.program or '?'}, uid {proc.uid})"


def check_start(
    policy: TrustPolicy,
    job: str,
    caller: ProcessInfo | None,
    caller_uid: int,
    parent: ProcessInfo | None,
    caller_job: str | None,
    parent_job: str | None = None,
) -> None:
    """May ``caller`` START ``job``?

    Args:
        policy: the trusted launchers.
        job: the job asked for.
        caller: the peer (``SO_PEERCRED`` pid), ``None`` when it is gone.
        caller_uid: the peer's uid as the socket says.
        parent: the caller's parent, ``None`` when gone.
        caller_job: the job whose group holds the caller, if any.
        parent_job: the job the parent's title names (:func:`job_of_launcher`), if any.

    Raises:
        Refused: naming the job and why.
    """
    if caller is None:
        raise Refused("gone", f"job {job}: the requesting process is gone")
    if caller_job is not None:
        raise Refused(
            "in_group",
            f"job {job}: {_who(caller)} is inside job {caller_job}'s group; "
            "a job cannot start another",
        )
    if caller_uid == 0:
        return
    if not policy.is_launcher(parent):
        named = _who(parent) if parent is not None else "a process that is gone"
        raise Refused(
            "not_launcher",
            f"job {job}: {_who(caller)} was not started by a trusted launcher (its parent is "
            f"{named}; trusted: {policy.describe()})",
        )
    if parent_job is not None:
        raise Refused(
            "not_launcher",
            f"job {job}: {_who(caller)} is a task of Slurm job {parent_job}; Slurm jobs are "
            "set up by coshare's Prolog (root), never by a task",
        )


def check_join(
    policy: TrustPolicy,
    job: str,
    job_uid: int | None,
    launcher: tuple[int, int] | None,
    caller_uid: int,
    target: ProcessInfo | None,
    target_parent: ProcessInfo | None,
    target_job: str | None,
    parent_job: str | None = None,
) -> bool:
    """May ``target`` be moved into ``job``'s group at the request of a ``caller_uid`` peer?

    Args:
        policy: the trusted launchers.
        job: the job.
        job_uid: the job's account (``None``: unknown, only root may join processes).
        launcher: ``(pid, start_ticks)`` of the job's launcher, ``None`` for a job root
            started.
        caller_uid: the peer's uid.
        target: the process to move.
        target_parent: its parent.
        target_job: the job whose group holds ``target`` now, if any.
        parent_job: the job ``target_parent``'s title names (:func:`job_of_launcher`), if any.

    Returns:
        ``False`` when ``target`` is in ``job``'s group already (nothing to do), else ``True``.

    Raises:
        Refused: naming the job and why.
    """
    if target is None:
        raise Refused("gone", f"job {job}: the process to join is gone")
    if target_job == job:
        return False
    if target_job is not None:
        raise Refused(
            "in_group", f"job {job}: {_who(target)} is already in job {target_job}'s group"
        )
    if caller_uid == 0:
        return True
    if job_uid is None:
        raise Refused("not_allowed", f"job {job} runs as no known user: only root joins it")
    if caller_uid != job_uid or target.uid != job_uid or target.euid != job_uid:
        raise Refused(
            "wrong_user",
            f"job {job} runs as uid {job_uid}; {_who(target)} (asked by uid {caller_uid}) "
            "may not join it",
        )
    if launcher is not None:
        if target_parent is None or (target_parent.pid, target_parent.start_ticks) != launcher:
            raise Refused(
                "not_allowed",
                f"job {job}: {_who(target)} is not a child of the job's launcher "
                f"(process {launcher[0]})",
            )
        return True
    if not policy.is_launcher(target_parent):
        raise Refused(
            "not_allowed",
            f"job {job}: {_who(target)} was not started by a trusted launcher "
            f"({policy.describe()})",
        )
    if parent_job != job:
        assert target_parent is not None
        serves = f"serves job {parent_job}" if parent_job else "names no job in its title"
        raise Refused(
            "not_allowed",
            f"job {job}: {_who(target)} was started by {_who(target_parent)}, which {serves}",
        )
    return True


def check_end(
    job: str, launcher: tuple[int, int] | None, caller: ProcessInfo | None, caller_uid: int
) -> None:
    """May the caller END ``job``? Root, or the job's own launcher.

    Raises:
        Refused: naming the job and why.
    """
    if caller_uid == 0:
        return
    if (
        caller is not None
        and launcher is not None
        and (
            caller.pid,
            caller.start_ticks,
        )
        == launcher
    ):
        return
    raise Refused("not_allowed", f"job {job}: only its launcher or root may end it")


def job_of_launcher(cmdline: str) -> str | None:
    """The job a trusted launcher serves, from the title it gives itself (Slurm's
    ``slurmstepd: [1234.batch]``); ``None`` when it names none (HTCondor's starter)."""
    match = _STEPD_TITLE.match(cmdline)
    return match.group(1) if match else None
