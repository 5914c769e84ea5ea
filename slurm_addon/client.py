"""The Slurm commands coshare runs, behind one small client.

Every command goes through :func:`coshare.system.programs.run` (argument lists, a timeout each).
A command that finds slurmctld unreachable is retried here, at the adapter's edge, with
tenacity (exponential wait; the sleep is injected so tests are instant), then raises
:class:`~slurm_addon.errors.SlurmControllerDown`. Other failures raise at once.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import tenacity
from coshare.config import SlurmConfig
from coshare.errors import CommandFailed, ProgramNotFound
from coshare.system.programs import CommandResult, CommandRunner, run

from slurm_addon.allocation import ALLOCATION_FORMAT, Allocation, parse_allocation_line
from slurm_addon.errors import SlurmControllerDown
from slurm_addon.jobs import SlurmJob, fields_format, parse_squeue_fields, parse_squeue_json
from slurm_addon.nodes import SlurmNode, parse_sinfo_json
from slurm_addon.scontrol import (
    chunks,
    controller_down,
    errors_by_job,
    job_list,
    node_extra_argv,
)

T = TypeVar("T")
#: Job ids per ``squeue --jobs`` query (an argument of ~10 kB).
JOBS_PER_QUERY = 1000
#: How to point coshare at Slurm's commands, said when one of them cannot be started.
SLURM_PROGRAM_HINT = (
    "install Slurm's client commands (apt-get install slurm-client) or set slurm.bin_dir "
    "(COSHARE_SLURM_BIN_DIR) to the directory that holds squeue, sinfo and scontrol"
)
Sleep = Callable[[float], None]


class SlurmClient:
    """Runs squeue, sinfo and scontrol for the adapter and the prolog.

    Args:
        config: the ``slurm`` section (slurm.conf, binaries, timeouts, retries).
        runner: runs one command (the real one, or a recorder in tests).
        sleep: how to wait between retries.
        environ: the environment commands inherit (``os.environ`` when ``None``).
    """

    def __init__(
        self,
        config: SlurmConfig,
        runner: CommandRunner = run,
        sleep: Sleep = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self._runner = runner
        self._sleep = sleep
        base = dict(os.environ if environ is None else environ)
        if config.config_file is not None:
            base["SLURM_CONF"] = config.config_file
        self._env = base

    def _program(self, name: str) -> str:
        return os.path.join(self.config.bin_dir, name) if self.config.bin_dir else name

    def _once(
        self, argv: Sequence[str], *, input_text: str | None = None, check: bool = True
    ) -> CommandResult:
        """Run one command; an unreachable controller raises SlurmControllerDown."""
        try:
            result = self._runner(
                argv,
                timeout_s=self.config.command_timeout_s,
                check=False,
                input_text=input_text,
                env=self._env,
            )
        except ProgramNotFound as exc:
            raise exc.with_hint(SLURM_PROGRAM_HINT) from exc
        except CommandFailed as exc:
            if exc.returncode is None and "timed out" in exc.stderr:
                raise SlurmControllerDown(argv[0], "timed out") from exc
            raise
        if controller_down(result.stderr):
            raise SlurmControllerDown(os.path.basename(argv[0]), result.stderr.strip()[-300:])
        if check and result.returncode != 0:
            raise CommandFailed(argv, result.returncode, result.stdout, result.stderr)
        return result

    def retrying(self, call: Callable[[], T]) -> T:
        """``call()``, retried while the controller is unreachable."""
        retryer = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(SlurmControllerDown),
            stop=tenacity.stop_after_attempt(self.config.retry_attempts),
            wait=tenacity.wait_exponential(
                multiplier=self.config.retry_wait_s, max=8 * self.config.retry_wait_s
            ),
            sleep=self._sleep,
            reraise=True,
        )
        return retryer(call)

    def _call(
        self, argv: Sequence[str], *, input_text: str | None = None, check: bool = True
    ) -> CommandResult:
        return self.retrying(lambda: self._once(argv, input_text=input_text, check=check))

    def read_jobs(self, notes: list[str] | None = None) -> list[SlurmJob]:
        """Every job the controller remembers (``squeue --json``), parsed; unreadable
        records are skipped with a line in ``notes``."""
        argv = [self._program("squeue"), "--json"]

        def read() -> list[SlurmJob]:
            found: list[str] = []  # per attempt: a retry must not repeat the notes
            # An error object in the output means the controller is down: parsing raises it.
            jobs = parse_squeue_json(self._once(argv).stdout, found)
            if notes is not None:
                notes.extend(found)
            return jobs

        return self.retrying(read)

    def read_nodes(self, notes: list[str] | None = None) -> list[SlurmNode]:
        """Every node (``sinfo --json``), parsed; what cannot be read goes to ``notes``."""
        argv = [self._program("sinfo"), "--json"]

        def read() -> list[SlurmNode]:
            found: list[str] = []
            nodes = parse_sinfo_json(self._once(argv).stdout, found)
            if notes is not None:
                notes.extend(found)
            return nodes

        return self.retrying(read)

    def read_sinfo_text(self) -> str:
        """``sinfo --json`` as printed (the history replay keeps it as a saved file would)."""
        return self.retrying(lambda: self._once([self._program("sinfo"), "--json"]).stdout)

    def read_accounting(self, since: str, until: str | None) -> str:
        """``sacct --json`` of every user's jobs from ``since`` to ``until`` (Slurm's time
        forms: ``2026-11-01``, ``now-7days``), as printed; needs slurmdbd."""
        argv = [self._program("sacct"), "--json", "--allusers", f"--starttime={since}"]
        if until is not None:
            argv.append(f"--endtime={until}")
        return self.retrying(lambda: self._once(argv).stdout)

    def read_accounting_users(self, since: str, until: str | None) -> dict[str, str]:
        """Job id -> user name of the same window (``sacct --parsable2``, which names the user
        from the uid where ``--json`` has no name: a user without an association)."""
        argv = [
            self._program("sacct"),
            "--noheader",
            "--parsable2",
            "--allocations",
            "--allusers",
            f"--starttime={since}",
            "--format=JobID,User",
        ]
        if until is not None:
            argv.append(f"--endtime={until}")
        out = self.retrying(lambda: self._once(argv).stdout)
        pairs = (line.split("|", 1) for line in out.splitlines() if "|" in line)
        return {job: user for job, user in pairs if user}

    def read_text(self, program: str, *args: str) -> str:
        """What one of Slurm's reading commands prints (``scontrol show config``, ``sshare``,
        ``sacctmgr show qos``): the priority and limits of :mod:`slurm_addon.scheduling`.

        Raises:
            CommandFailed: it failed (slurmdbd down, no accounting).
            SlurmControllerDown: the controller did not answer, after the retries.
        """
        argv = [self._program(program), *args]
        return self.retrying(lambda: self._once(argv).stdout)

    def read_job_fields(self, job_ids: Sequence[str]) -> dict[str, SlurmJob]:
        """The few fields the Editor compares, of these jobs only (``squeue --Format``: a
        fraction of the cost of ``--json``, which cannot filter in 22.05). Its text is
        framed by a marker drawn afresh for each call (:func:`~slurm_addon.jobs.fields_format`),
        so no user's comment can pass for another job's record."""
        found: dict[str, SlurmJob] = {}
        for chunk in chunks(list(job_ids), JOBS_PER_QUERY):
            marker = "cs" + secrets.token_hex(16)
            argv = [
                self._program("squeue"),
                "--noheader",
                "--states=all",
                f"--jobs={job_list(chunk)}",
                f"--Format={fields_format(marker)}",
            ]
            found.update(parse_squeue_fields(self._call(argv).stdout, chunk, marker))
        return found

    def ping(self) -> None:
        """Make sure slurmctld answers (``scontrol ping`` is instant, where a write to a
        stopped controller waits ~9 s per job before failing)."""

        def call() -> None:
            result = self._once([self._program("scontrol"), "ping"], check=False)
            if result.returncode != 0 or "is UP" not in result.stdout:
                raise SlurmControllerDown("scontrol ping", result.stdout.strip() or "no answer")

        self.retrying(call)

    def run_script(self, lines: Sequence[str]) -> dict[str, str]:
        """Run scontrol commands given on its standard input (built by
        :func:`slurm_addon.scontrol.update_line`); returns the error line of each job that
        reported one. Call :meth:`ping` first: against a stopped controller each line would
        wait ~9 s before failing."""
        result = self._call([self._program("scontrol")], input_text="".join(lines), check=False)
        return errors_by_job(result.stderr)

    def run_scripts(self, scripts: Sequence[Sequence[str]]) -> dict[str, str]:
        """Several :meth:`run_script` at once, one scontrol process each (their lines never
        split: each line is one update); the error line of each job that reported one, from
        all of them. Raises what one of them raises, after all have finished."""
        if len(scripts) <= 1:
            return self.run_script(scripts[0]) if scripts else {}
        found: dict[str, str] = {}
        with ThreadPoolExecutor(max_workers=len(scripts)) as pool:
            for errors in list(pool.map(self.run_script, scripts)):
                found.update(errors)
        return found

    def update(self, argv: Sequence[str]) -> str | None:
        """One ``scontrol update``; returns its error text, or ``None`` on success."""
        result = self._call([self._program("scontrol"), *argv], check=False)
        if result.returncode == 0:
            return None
        return result.stderr.strip() or f"scontrol exited with status {result.returncode}"

    def _jobs_verb(self, verb: str, job_ids: Sequence[str]) -> dict[str, str]:
        result = self._call([self._program("scontrol"), verb, job_list(job_ids)], check=False)
        errors = errors_by_job(result.stderr)
        if result.returncode != 0 and not errors:
            raise CommandFailed(result.argv, result.returncode, result.stdout, result.stderr)
        return errors

    def release(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Release held jobs; returns the error of each job that could not be released."""
        return self._jobs_verb("release", job_ids)

    def hold(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Hold pending jobs; returns the error of each job that could not be held."""
        return self._jobs_verb("hold", job_ids)

    def requeue_hold(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Requeue running jobs and hold them (``scontrol requeuehold``); returns the error of
        each job that could not be requeued."""
        return self._jobs_verb("requeuehold", job_ids)

    def job_verb(self, verb: str, job_id: str) -> str | None:
        """``scontrol suspend|resume|requeuehold <job>`` (trial co-runs); returns
        its error text, or ``None`` on success."""
        if verb not in ("suspend", "resume", "requeuehold"):
            raise ValueError(f"not a trial verb: {verb!r}")
        result = self._call([self._program("scontrol"), verb, job_list([job_id])], check=False)
        if result.returncode == 0:
            return None
        return result.stderr.strip() or f"scontrol {verb} exited with status {result.returncode}"

    def step(self, job_id: str, node: str, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` as a step of running job ``job_id`` on its node ``node`` (``srun
        --jobid --overlap``: beside the job's own tasks, on its cores; one task). The step
        runs as whoever runs srun (the planner's account; srun's ``--uid`` is not used).

        Raises:
            CommandFailed: srun could not be run or took longer than ``timeout_s``.
        """
        return self._runner(
            [
                self._program("srun"),
                f"--jobid={job_id}",
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                f"--nodelist={node}",
                "--quiet",
                "--",
                *argv,
            ],
            timeout_s=timeout_s,
            check=False,
            env=self._env,
        )

    def admin_comment(self, job_id: str) -> str:
        """One job's AdminComment (``squeue -O admin_comment``: one small RPC, where
        ``squeue --json`` would print every job)."""
        result = self._call(
            [self._program("squeue"), "--noheader", "--jobs", job_id, "--Format", "admin_comment:0"]
        )
        return result.stdout.strip()

    def comment(self, job_id: str) -> str:
        """One job's comment, also once it ended (the Epilog reads its ``CoshareProgram``)."""
        result = self._call(
            [
                self._program("squeue"),
                "--noheader",
                "--states=all",
                "--jobs",
                job_id,
                "--Format",
                "comment:0",
            ]
        )
        return result.stdout.strip()

    def job_allocation(self, job_id: str) -> tuple[Allocation, str]:
        """One job's allocated cores and memory, and its AdminComment (one ``squeue``)."""
        result = self._call(
            [
                self._program("squeue"),
                "--noheader",
                "--jobs",
                job_id,
                f"--Format={ALLOCATION_FORMAT}",
            ]
        )
        return parse_allocation_line(result.stdout)

    def update_accounting(self, job_id: str, assignment: str) -> str | None:
        """Set a field of a finished job in the accounting database (``sacctmgr modify
        job``, e.g. ``AdminComment=...``); its error text, or ``None`` on success."""
        result = self._call(
            [
                self._program("sacctmgr"),
                "-i",
                "modify",
                "job",
                "where",
                f"jobid={job_id}",
                "set",
                assignment,
            ],
            check=False,
        )
        if result.returncode == 0 and "Modified" in result.stdout + result.stderr:
            return None
        return (result.stderr or result.stdout).strip() or f"sacctmgr exited {result.returncode}"

    def update_node_extra(self, node: str, facts: str) -> str | None:
        """Write a node's facts into its ``Extra`` field (operators only: Slurm refuses a
        user's node update); its error text, or ``None`` on success."""
        return self.update(node_extra_argv(node, facts))

    def show_job_detail(self, job_id: str) -> str:
        """``scontrol show job -d <id>``: with each node's cores and memory (the Prolog of
        a multi-node job reads its node's share from it)."""
        return self._call([self._program("scontrol"), "show", "job", "-d", job_id]).stdout

    def show_job(self, job_id: str) -> str:
        """``scontrol show job <id>`` (the Epilog reads the job's error file from it)."""
        return self._call([self._program("scontrol"), "show", "job", job_id]).stdout
