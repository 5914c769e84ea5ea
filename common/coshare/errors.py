"""Exceptions raised by coshare.

Every error coshare raises on purpose derives from :class:`CoshareError`, so the command
line can turn it into one readable message and a meaningful exit status, never a traceback.
Foreign exceptions (``json.JSONDecodeError``, ``yaml.YAMLError``, ``OSError``, errors of the
scheduler bindings) are translated at the boundary with ``raise ... from exc``.

The tree (every exception coshare raises, adapters and node helpers included; only the
stand-alone ``coshare-launch`` has its own, being standard library only)::

    CoshareError
    ├── InputError                bad input from a person: exit status 2
    │   ├── SnapshotError         a snapshot or plan JSON that breaks the contract
    │   ├── ConfigError           a YAML config with unknown keys or bad values
    │   ├── AnnotationError       a job whose declared keys are unusable (names job and keys)
    │   ├── PolicyError           an unknown policy name or bad policy option
    │   ├── UnsafeValue           a value that cannot be written safely (also a ValueError)
    │   ├── TraceError            a trace file that breaks its format (coshare.sim.traces)
    │   └── JobSpecError          bad job inputs of a node helper (also a NodeError)
    ├── PlanInvariantError        a plan that would oversubscribe something (a bug: never applied)
    ├── CycleBusy                 another cycle holds the queue's lock: exit status 0
    │   └── Standby               another instance of this planner holds its lease: exit 0
    ├── CoordinationError         several planners' engine: exit status 1
    │   ├── EngineUnavailable     the engine (PostgreSQL) is unreachable: names its address
    │   └── LeaseLost             this planner lost its lease: it stopped before writing
    ├── SimulationError           the simulator's ledger caught an unsound plan
    ├── CollocationSimError       the same in the Wu & Hong simulator (coshare.sim.collocation)
    ├── DoubleBooking             a reservation store asked to book a core a job holds (a bug:
    │                             refused; coshare.alloc.store)
    ├── FactsError                a node's facts text that breaks its format (coshare.ledger.facts);
    │                             never stops a cycle: the node is planned without its facts
    ├── ExecutorError             simulate's executor (Dask) unreachable, or runs failed: exit 1
    ├── SchedulerError            the scheduler could not be read or written: exit status 1
    │   ├── SchedulerUnavailable  daemon down or unreachable
    │   │   └── SlurmControllerDown      slurm_addon.errors
    │   ├── CommandFailed         one external command failed (argv, returncode, output)
    │   │   └── ProgramNotFound   the program is not installed where coshare looked
    │   ├── EditFailed            an HTCondor queue edit was refused (condor_addon.errors)
    │   ├── SlurmOutputError      squeue/sinfo printed something unreadable (slurm_addon.errors)
    │   └── PlacementError        a Slurm placement that cannot be read back (also a ValueError)
    └── NodeError                 a node helper (coshare.node) failed: exit status 1
        ├── JobSpecError          bad job inputs (id, cpu list, limits): exit status 2
        ├── CgroupUnavailable     the kernel lacks what a limit needs (names what is missing)
        ├── CgroupError           a cgroup file could not be read or written (path, errno text)
        ├── JobStateError         unknown job, job already started, leftover processes
        ├── GateError             the offload gate refused a request (code) or is unreachable
        ├── Unsupported           this node lacks a capability (resctrl, counters): names the path
        ├── ProbeError            a measurement (the membw probe) cannot be made here
        └── ReplyError            a node socket's ERR reply (ProtocolError, Refused, ...)

Adapters and node helpers add their own subclasses under these. Two ``ValueError``s stay
inside coshare and never reach a caller: :class:`coshare.ledger.bounds.BadValue` (a scheduler's
record out of bounds: the adapters turn it into a note or a refusal naming the node or job)
and :class:`coshare.system.files.TooLarge` (an input over its size bound: the readers turn it into a
``SnapshotError``, ``ConfigError`` or ``TraceError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coshare.cli.exit_codes import EXIT_INPUT as EXIT_INPUT  # the one table of exit statuses
from coshare.cli.exit_codes import EXIT_RUNTIME as EXIT_RUNTIME
from coshare.ledger.bounds import shorten, shorten_text


class CoshareError(Exception):
    """Root of every error coshare raises on purpose."""

    exit_status: int = EXIT_RUNTIME


class InputError(CoshareError):
    """Something a person gave us (file, flag, annotation) is unusable."""

    exit_status = EXIT_INPUT


class SnapshotError(InputError):
    """A snapshot or plan document breaks the JSON contract of DESIGN.md.

    Attributes:
        problems: one line per problem, each naming the job or node and the field.
        source: where the document came from (a path, ``<stdin>``), for the message.
    """

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        where = f"{source}: " if source else ""
        shown = list(self.problems[:20])
        if len(self.problems) > 20:
            shown.append(f"... and {len(self.problems) - 20} more problems")
        if len(shown) == 1:
            super().__init__(f"{where}{shown[0]}")
        else:
            super().__init__(f"{where}{len(self.problems)} problems:\n  " + "\n  ".join(shown))


class ConfigError(InputError):
    """A configuration file or override is unusable (unknown key, wrong type, bad range)."""


class PolicyError(InputError):
    """An unknown policy name or an option the policy does not accept."""


@dataclass(frozen=True)
class FieldProblem:
    """One unusable annotation of one job.

    Attributes:
        key: the annotation key as the user wrote it (``CoshareDeviceMemory``).
        value: the raw value, as text.
        allowed: the allowed range or form, for the message (``integer MiB in 1..16384``).
        why: what is wrong (``not a number``, ``negative``, ``exceeds every device``).
    """

    key: str
    value: str
    allowed: str
    why: str

    def __str__(self) -> str:
        # The key and value are the user's: bounded, whatever their size.
        key, value = shorten_text(self.key), shorten(self.value)
        return f"{key}={value} {self.why} (allowed: {self.allowed})"


class AnnotationError(InputError):
    """A job's declared coshare keys are unusable; the job is left out of the plan.

    Attributes:
        job: the job id.
        problems: every unusable key of that job.
    """

    def __init__(self, job: str, problems: Sequence[FieldProblem]) -> None:
        self.job = job
        self.problems = tuple(problems)
        super().__init__(f"job {job}: " + "; ".join(str(p) for p in self.problems))


class PlanInvariantError(CoshareError):
    """A policy produced a plan that oversubscribes a resource or loses a job.

    This is a bug in coshare, never the user's fault; the plan is not applied.
    """

    def __init__(self, policy: str, violations: Sequence[str]) -> None:
        self.policy = policy
        self.violations = tuple(violations)
        super().__init__(
            f"policy {policy!r} produced an invalid plan (not applied): "
            + "; ".join(violations[:5])
        )


class UnsafeValue(InputError, ValueError):
    """A value (a job id, a node name, a text) that cannot be written safely into the
    scheduler: coshare refuses to write it rather than quote it wrongly."""


class ExecutorError(CoshareError):
    """``coshare simulate`` could not run its runs: the Dask scheduler is unreachable, no
    worker came, or some runs failed (each named; the other results were still printed)."""


class DoubleBooking(CoshareError):
    """A reservation store was asked to reserve a core that another job reserves or holds
    (:mod:`coshare.alloc.store`). A bug in the allocation protocol, never applied."""

    def __init__(self, domain: str, core: str, holder: str, job: str) -> None:
        self.domain = domain
        self.core = core
        self.holder = holder
        self.job = job
        super().__init__(
            f"domain {domain!r}: core {core} is booked by job {holder!r}; job "
            f"{job!r} may not book it too (refused)"
        )


class CycleBusy(CoshareError):
    """Another cycle holds the lock of this queue; this one does nothing (exit status 0: the
    other cycle does the work).

    Attributes:
        path: the lock file.
    """

    exit_status = 0

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"another cycle holds {path}; this one did nothing")


class Standby(CycleBusy):
    """Another instance of this planner holds the planner's lease (high availability):
    this instance does nothing this cycle (exit status 0) and takes over once the lease
    expires.

    Attributes:
        planner: the planner's domain name.
        holder: the instance that holds the lease.
        left_s: seconds the holder's lease has left.
    """

    def __init__(self, planner: str, instance: str, holder: str, left_s: float) -> None:
        self.planner = planner
        self.holder = holder
        self.left_s = left_s
        CoshareError.__init__(
            self,
            f"planner {planner!r}: instance {holder!r} holds the lease for {left_s:.1f} s "
            f"more; this instance ({instance!r}) is standby and did nothing",
        )
        self.path = f"lease of {planner}"


class CoordinationError(CoshareError):
    """The engine several planners coordinate through failed this cycle: the
    cycle wrote nothing (exit status 1); the next cycle starts afresh."""


class EngineUnavailable(CoordinationError):
    """The coordination engine could not be reached or dropped the connection.

    Attributes:
        address: where it was looked for (host or socket directory, and port).
    """

    def __init__(self, address: str, detail: str) -> None:
        self.address = address
        self.head = f"coordination engine (PostgreSQL) at {address} is unreachable: {detail}"
        super().__init__(f"{self.head}; this cycle wrote nothing (the next cycle tries again)")


class LeaseLost(CoordinationError):
    """This planner instance no longer holds its planner's lease: it expired (no cycle
    renewed it within ``coordination.lease_s``) or another instance took it over. Raised
    by the fence before a write (the first of a cycle, and each batch after it: both
    adapters check before every batch), which is then not made.

    Attributes:
        planner: the planner's domain name.
        instance: this instance.
        holder: who holds it now (``None``: nobody).
    """

    def __init__(self, planner: str, instance: str, holder: str | None, why: str) -> None:
        self.planner = planner
        self.instance = instance
        self.holder = holder
        self.head = f"planner {planner!r}: instance {instance!r} lost its lease ({why})"
        super().__init__(f"{self.head}; it stopped before writing")


class StoppedBetweenBatches(CoordinationError):
    """The fence failed before a batch after the first (:class:`EngineUnavailable` or
    :class:`LeaseLost` mid-apply, the ``cause``): the batches sent before it are complete
    and stay in the queue; nothing after it was written; the next cycle writes the rest."""

    def __init__(self, cause: EngineUnavailable | LeaseLost) -> None:
        self.cause = cause
        super().__init__(
            f"{cause.head}; it stopped between two batches of its writes: those "
            "sent are complete, nothing after them was written (the next cycle "
            "writes the rest)"
        )


class FactsError(CoshareError, ValueError):
    """A node's facts text (measured on the node, carried by the scheduler) is unusable; the
    message says which item and why. The cycle plans that node without its facts."""


class SchedulerError(CoshareError):
    """The scheduler could not be read or written."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler's daemon is down or unreachable."""


class CommandFailed(SchedulerError):
    """An external command exited with a failure status or timed out.

    Attributes:
        argv: the argument list that was run.
        returncode: its exit status (``None`` when it timed out).
        stdout: what it printed on standard output.
        stderr: what it printed on standard error.
    """

    def __init__(
        self, argv: Sequence[str], returncode: int | None, stdout: str = "", stderr: str = ""
    ) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        status = "timed out" if returncode is None else f"exited with status {returncode}"
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(f"{' '.join(self.argv)} {status}" + (f": {detail}" if detail else ""))


class ProgramNotFound(CommandFailed):
    """An external program could not be started: not on ``PATH`` (or where configured), or not
    executable. Never a time-out, and never retried: running it again finds the same nothing.

    Attributes:
        program: the program as it was named.
        reason: the operating system's reason (``No such file or directory``).
        hint: how to point coshare at it (empty when the caller knows no setting for it).
    """

    def __init__(self, argv: Sequence[str], reason: str, hint: str = "") -> None:
        self.argv = tuple(str(a) for a in argv)
        self.returncode = None
        self.stdout = ""
        self.stderr = f"cannot run {self.argv[0]}: {reason}"
        self.program = self.argv[0]
        self.reason = reason
        self.hint = hint
        # CommandFailed's message would say "exited" or "timed out": neither happened.
        SchedulerError.__init__(
            self,
            f"cannot run {self.program}: {reason[:1].lower()}{reason[1:]}"
            + (f"; {hint}" if hint else ""),
        )

    def with_hint(self, hint: str) -> ProgramNotFound:
        """The same error, saying how to point coshare at the program."""
        return ProgramNotFound(self.argv, self.reason, hint)


class NodeError(CoshareError):
    """A node helper (cgroups, offload gate, watchdog, job lifecycle) failed."""


class ReplyError(NodeError):
    """What a node socket answers with ``ERR <code> <text>``: a bad request or a refusal.

    Attributes:
        code: the protocol's error code.
        text: the reason, for a person.
    """

    def __init__(self, code: str, text: str) -> None:
        self.code = code
        self.text = text
        super().__init__(f"{code}: {text}")


class JobSpecError(NodeError, InputError):
    """The inputs of a job (id, cpu list, limits) are unusable; names the field."""

    exit_status = EXIT_INPUT


class CgroupUnavailable(NodeError):
    """The kernel does not offer what a requested limit needs.

    Attributes:
        feature: the feature asked for (``cpuset``, ``memory``, ``freeze``, ``cgroups``).
        problem: one sentence saying precisely what is missing and where it was looked for.
    """

    def __init__(self, feature: str, problem: str) -> None:
        self.feature = feature
        self.problem = problem
        super().__init__(problem)


class CgroupError(NodeError):
    """Reading or writing a cgroup file failed.

    Attributes:
        path: the file or directory.
        action: what was attempted (``write '1'``, ``rmdir``).
    """

    def __init__(self, path: str, action: str, detail: str) -> None:
        self.path = path
        self.action = action
        super().__init__(f"cannot {action} {path}: {detail}")


class JobStateError(NodeError):
    """The job is unknown, already started, or its group still holds processes."""


class GateError(NodeError):
    """The offload gate refused a request or could not be reached.

    Attributes:
        code: the protocol's error code (``over_declared``, ``not_a_job``, ...), or
            ``unreachable`` when no gate answered.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"offload gate: {code}: {message}")


class Unsupported(NodeError):
    """This node lacks what a control or measurement needs (resctrl, a hardware counter);
    never pretended: the message names the path or call that was looked at.

    Attributes:
        capability: what was asked for (``resctrl L3``, ``resctrl MB``, ``perf_event``).
        path: where it was looked for.
        detail: what is missing there.
    """

    def __init__(self, capability: str, path: str, detail: str) -> None:
        self.capability = capability
        self.path = path
        self.detail = detail
        super().__init__(f"unsupported: {capability}: {detail} ({path})")


class ProbeError(NodeError, InputError):
    """A measurement cannot be made as asked (cores outside the node's set, no baseline);
    the message says what to do. Exit status 2."""

    exit_status = EXIT_INPUT
