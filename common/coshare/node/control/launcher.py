#!/usr/bin/env python3
"""coshare-launch: run a job inside its coshare group, for job wrappers that run as the user.

HTCondor runs its job wrapper as the job's user, so the wrapper cannot make the job's cgroup;
it ``exec``\\ s this launcher, which asks the root node daemon over the control socket
(:mod:`coshare.node.control.protocol`)::

    launcher (outside the group) --START--> daemon: group, own cores, memory limit, record
      `- child --JOIN--> daemon moves the child into the group, then the child execs CMD
    launcher waits for the child --END--> daemon kills what is left, removes the group,
                                          and says why coshare killed the job, if it did

The launcher stays outside the group, so it outlives a kill of the whole job and reports it:
on standard error, and, with ``--chirp``, as the job attribute ``CoshareKillReason``
(``condor_chirp set_job_attr``), which coshare's schedd transform turns into the job's hold
reason when it exits (``OnExitHold``). It exits 137 then; otherwise with the command's status
(a command killed by signal N kills the launcher with N too, as HTCondor expects).

``coshare-launch task-prolog`` is the other user-side step, for Slurm's TaskProlog (run as
the user before each task, whose parent is the task about to ``exec`` the user's program):
the Prolog (root) made the job's group already, so it JOINs that parent and prints the
``export`` lines of the job's cores, devices and gate socket; a job whose group could not be
made is refused with a ``print`` line saying why and exit status 1 (Slurm then fails that job,
not the node). A job coshare does not manage prints nothing.

**Standard library only**, one file: it runs where coshare's dependencies are not installed or
not readable by users (inside the execute node's HTCondor chroot, say), as
``python3 -I coshare-launch run ...``; ``coshare node launch`` is the same program.

It runs as the job's user, outside the job's group, and the job is its child: first thing, it
makes itself not dumpable (``prctl(PR_SET_DUMPABLE, 0)``, prctl(2)), so that no process of
that user, the job included, can ptrace it or read or write its memory through /proc,
whatever ``kernel.yama.ptrace_scope`` allows (ptrace(2), "Ptrace access mode checking"). The
flag is inherited across fork and reset by execve, so the child that joins the group is
protected too, and the job it becomes is an ordinary process of its user.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence

#: Exit status when coshare killed the job (as a shell reports SIGKILL).
KILLED_STATUS = 137
#: Exit status when the job could not be set up (it did not run).
SETUP_FAILED_STATUS = 1
#: How long one control request may take (making or killing a group).
TIMEOUT_S = 120.0
_UNIT_MIB = {
    "": 1,
    "m": 1,
    "mb": 1,
    "mib": 1,
    "g": 1024,
    "gb": 1024,
    "gib": 1024,
    "t": 1024**2,
    "tb": 1024**2,
    "tib": 1024**2,
}
_FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
#: Device selection variables of the common accelerator runtimes (NVIDIA, AMD, Intel offload).
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "OFFLOAD_DEVICES")
DEFAULT_CONTROL_SOCKET = "/run/coshare/control.sock"
DEFAULT_GATE_SOCKET = "/run/coshare/gate.sock"
DEFAULT_STATE_DIR = "/run/coshare"


class ControlError(Exception):
    """The daemon refused a request (``code``, ``text``) or could not be reached."""

    def __init__(self, code: str, text: str) -> None:
        self.code = code
        self.text = text
        super().__init__(f"{code}: {text}")


def connect(path: str, timeout_s: float) -> socket.socket:
    """A connection to the unix socket ``path``, waiting up to ``timeout_s`` while its listen
    backlog is full (a flood of other connections, which the daemon drains).

    The connect blocks, bounded by ``SO_SNDTIMEO`` (unix(7): a stream connect waits for
    room in the listener's backlog up to the send timeout), so the kernel wakes it as soon as
    there is room, rather than a timed socket's connect failing at once with EAGAIN.

    Raises:
        OSError: no daemon listens there, or no room came in time.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        seconds = int(timeout_s)
        sock.setsockopt(
            socket.SOL_SOCKET,
            socket.SO_SNDTIMEO,
            struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6)),
        )
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    sock.settimeout(timeout_s)
    return sock


def request(path: str, line: str, timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    """Send one control request on a new connection; the fields of its ``OK`` reply.

    Raises:
        ControlError: the daemon's ``ERR`` (code and text), or ``unreachable``.
    """
    try:
        sock = connect(path, timeout_s)
    except OSError as exc:
        raise ControlError("unreachable", f"no coshare node daemon at {path}: {exc}") from exc
    try:
        sock.sendall(line.encode("ascii") + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ControlError("unreachable", f"the node daemon at {path} hung up")
            data += chunk
            if len(data) > 65536:
                raise ControlError("bad_reply", "reply too long")
    except OSError as exc:
        raise ControlError("unreachable", f"no coshare node daemon at {path}: {exc}") from exc
    finally:
        sock.close()
    reply = data.decode("ascii", errors="replace").rstrip("\r\n")
    if reply.startswith("ERR "):
        code, _, text = reply[4:].partition(" ")
        raise ControlError(code, text)
    if reply != "OK" and not reply.startswith("OK "):
        raise ControlError("bad_reply", f"not a reply: {reply[:80]!r}")
    body, _, reason = reply[3:].partition("reason=")
    fields = dict(w.partition("=")[::2] for w in body.split())
    if reason:
        fields["reason"] = reason
    return fields


def memory_mib(text: str) -> int:
    """MiB of a size as users write it: ``2048``, ``2G``, ``512M``, ``1.5GiB`` (rounded up).

    Raises:
        ValueError: for anything else.
    """
    match = re.fullmatch(r"\s*\"?\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*\"?\s*", text)
    if not match or match.group(2).lower() not in _UNIT_MIB:
        raise ValueError(f"{text!r} is not a size (e.g. 2048, 2G, 512M)")
    value = math.ceil(float(match.group(1)) * _UNIT_MIB[match.group(2).lower()])
    if value < 1:
        raise ValueError(f"{text!r} is below 1 MiB")
    return value


def start_line(args: argparse.Namespace) -> str:
    """The START request for the command line's job (fields in the protocol's spelling).

    Raises:
        ValueError: naming the field that is unusable.
    """
    words = ["START", f"job={args.job}"]
    if args.cores:
        words.append(f"cores={args.cores}")
    if args.memory_mib:
        words.append(f"memory_mib={args.memory_mib}")
    if args.devices:
        words.append(f"devices={args.devices}")
    if args.device_memory:
        try:
            words.append(f"device_memory_mib={memory_mib(args.device_memory)}")
        except ValueError as exc:
            raise ValueError(f"device memory: {exc}") from None
    if args.device_threads:
        words.append(f"device_threads={args.device_threads.strip().strip(chr(34))}")
    if getattr(args, "lends", False):
        words.append("lends=1")
    if getattr(args, "borrow", None):
        words.append(f"borrow={args.borrow}")
    for word in words[1:]:
        if not word.isascii() or not word.isprintable() or " " in word:
            raise ValueError(f"{word.partition('=')[0]} {word.partition('=')[2]!r} is unusable")
    return " ".join(words)


def say(message: str) -> None:
    """One line on standard error (the job's error file)."""
    with contextlib.suppress(OSError):
        sys.stderr.write(f"coshare: {message}\n")
        sys.stderr.flush()


def classad_string(text: str) -> str:
    """``text`` as a ClassAd string literal (for ``condor_chirp set_job_attr``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def tell_scheduler(chirp: str | None, reason: str) -> None:
    """Put the reason where the user sees it: standard error and, through chirp, the job's
    ``CoshareKillReason`` (the schedd makes it the hold reason when the job exits)."""
    say(reason)
    if not chirp:
        return
    argv = [chirp, "set_job_attr", "CoshareKillReason", classad_string(reason)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"cannot report it to HTCondor with {chirp}: {exc}")
        return
    if done.returncode != 0:
        say(
            f"cannot report it to HTCondor: {chirp} exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[:200]}"
        )


def spawn_joined(socket_path: str, job: str, argv: Sequence[str], env: dict[str, str]) -> int:
    """Fork a child that JOINs the job's group and then ``exec``\\ s ``argv``; its pid.

    The child reports a failure (JOIN refused, exec failed) through a close-on-exec pipe, so
    the parent knows whether ``argv`` runs, and runs inside the group, before it waits.

    Raises:
        ControlError: the JOIN was refused (``code``) or ``argv`` cannot run (``exec``).
    """
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: join, then become the job
        os.close(read_end)
        try:
            try:
                request(socket_path, f"JOIN job={job}")
            except ControlError as exc:
                os.write(write_end, f"{exc.code} {exc.text}".encode(errors="replace"))
                os._exit(SETUP_FAILED_STATUS)
            # Python ignores SIGPIPE and SIGXFSZ; the job gets the defaults (as subprocess's
            # restore_signals does).
            for name in (*_FORWARDED, "SIGPIPE", "SIGXFSZ"):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            try:
                os.execvpe(argv[0], list(argv), env)  # noqa: S606 (the job's own argv)
            except OSError as exc:
                os.write(write_end, f"exec cannot run {argv[0]!r}: {exc.strerror}".encode())
                os._exit(127)
        finally:
            os._exit(SETUP_FAILED_STATUS)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode(errors="replace")
    if failure:
        os.waitpid(pid, 0)
        code, _, text = failure.partition(" ")
        raise ControlError(code, text)
    return pid


def wait_for(pid: int) -> int:
    """Wait for the child (signals to the launcher are forwarded to it); its wait status."""
    for name in _FORWARDED:
        signal.signal(getattr(signal, name), lambda signum, _f: _forward(pid, signum))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return status
        except ChildProcessError:
            return 0
        except InterruptedError:  # pragma: no cover (PEP 475 retries)
            continue


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def exit_like(status: int) -> None:
    """Exit as the child did: its code, or by its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        sys.stdout.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        sys.exit(128 + signum)  # a signal that does not end a process by default
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def mps_environment(reply: dict[str, str], devices: str) -> dict[str, str]:
    """NVIDIA MPS's limits for the job's CUDA clients, from the daemon's START or JOIN reply
    (``mps_memory_mib``, ``mps_percent``: :mod:`coshare.node.mps`): its declared memory
    pinned on each device it sees (ordinals 0.. in its ``CUDA_VISIBLE_DEVICES``) and its share
    of their SMs; nothing when the daemon said nothing (no MPS on the node)."""
    env: dict[str, str] = {}
    count = len([d for d in devices.split(",") if d and d != "-"])
    memory = reply.get("mps_memory_mib", "")
    if count and memory.isdigit():
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{i}={memory}M" for i in range(count))
    percent = reply.get("mps_percent", "")
    if count and percent.isdigit():
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = percent
    return env


def run(args: argparse.Namespace) -> None:
    """``coshare-launch run``: START, run the command joined, wait, END, report."""
    label = args.label or args.job
    try:
        line = start_line(args)
    except ValueError as exc:
        tell_scheduler(args.chirp, f"coshare cannot run job {label}: {exc}")
        sys.exit(SETUP_FAILED_STATUS)
    try:
        started = request(args.socket, line)
    except ControlError as exc:
        tell_scheduler(
            args.chirp,
            f"coshare could not set up job {label} on this node ({exc.code}): {exc.text}",
        )
        sys.exit(SETUP_FAILED_STATUS)
    env = dict(os.environ)
    env["COSHARE_JOB_ID"] = args.job
    if started.get("cpus", "-") != "-":
        env["COSHARE_CPUS"] = started["cpus"]
    env.update(mps_environment(started, started.get("devices", args.devices or "")))
    if args.gate_socket:
        env["COSHARE_GATE_SOCKET"] = args.gate_socket
    try:
        pid = spawn_joined(args.socket, args.job, args.command, env)
    except ControlError as exc:
        _end(args, label)
        tell_scheduler(
            args.chirp, f"coshare could not run job {label} in its group ({exc.code}): {exc.text}"
        )
        sys.exit(SETUP_FAILED_STATUS if exc.code != "exec" else 127)
    status = wait_for(pid)
    reason = _end(args, label)
    if reason:
        tell_scheduler(args.chirp, reason)
        sys.exit(KILLED_STATUS)
    exit_like(status)


def _end(args: argparse.Namespace, label: str) -> str | None:
    try:
        ended = request(args.socket, f"END job={args.job}")
    except ControlError as exc:
        say(f"cannot end job {label} on this node ({exc.code}): {exc.text}")
        return None
    reason = ended.get("reason")
    if reason and label != args.job:
        reason = reason.replace(f"job {args.job}", f"job {label}")
    return reason


def task_prolog(
    socket_path: str, gate_socket: str, state_dir: str, environ: dict[str, str]
) -> tuple[list[str], int] | None:
    """What Slurm's TaskProlog prints, and its exit status; ``None`` for a job coshare does
    not manage on this node (no record, no set-up error).

    The job's record and set-up error are files the Prolog (root) wrote in ``state_dir``;
    the task process (this program's parent) is moved into the group by the daemon.
    """
    job = environ.get("SLURM_JOB_ID", "")
    node = environ.get("SLURMD_NODENAME", "")
    if not job.isdigit():
        return None
    base = os.path.join(state_dir, "jobs", f"job-{job}")
    with contextlib.suppress(OSError), open(base + ".error") as error_file:
        error = " ".join(error_file.read().split())
        if error:
            return [f"print coshare: job {job} cannot run on {node or 'this node'}: {error}"], 1
    if not os.path.exists(base + ".json"):
        return None
    try:
        joined = request(socket_path, f"JOIN job={job} target=parent")
    except ControlError as exc:
        return [
            f"print coshare: job {job} cannot run inside its limits on {node or 'this node'} "
            f"({exc.code}): {' '.join(exc.text.split())}"
        ], 1

    def field(name: str) -> str:
        value = joined.get(name, "-")
        return "" if value == "-" else value

    devices = field("devices")
    lines = [f"export COSHARE_JOB_ID={job}", f"export COSHARE_GATE_SOCKET={gate_socket}"]
    lines += [f"export {name}={devices}" for name in (*DEVICE_VARIABLES, "COSHARE_DEVICES")]
    if node:
        lines.append(f"export COSHARE_NODE={node}")
    for name, variable in (
        ("cpus", "COSHARE_CPUS"),
        ("device_memory_mib", "COSHARE_DEVICE_MEMORY_MIB"),
        ("device_threads", "COSHARE_DEVICE_THREADS"),
    ):
        if field(name):
            lines.append(f"export {variable}={field(name)}")
    lines += [f"export {k}={v}" for k, v in mps_environment(joined, devices).items()]
    with contextlib.suppress(OSError), open(base + ".taskenv") as told:
        # What the Prolog (root) recorded for the tasks beside the group (a Spread-n-Share
        # job's spread and LLC ways, :func:`slurm_addon.node_hooks.sns_task_env`); only
        # COSHARE_* exports and ``print coshare:`` lines pass.
        lines += [line for line in told.read().splitlines() if _TOLD.fullmatch(line)]
    return lines, 0


_TOLD = re.compile(
    r"export COSHARE_[A-Z_]{1,40}=[A-Za-z0-9:,._/-]{0,200}"
    r"|print coshare: [ -~]{1,600}"
)


#: The statuses of each action, for the ``Exit status:`` sections of ``--help``
#: (every command lists its statuses; standard library only, so the rows are here, and a
#: test holds them to :data:`coshare.cli.exit_codes.PASS_THROUGH`).
_KILLED = "coshare killed the job (the reason on standard error, and with --chirp in the job's ad)"
_REFUSED = "the node daemon refused to start it, or it could not be set up (the job did not run)"
EXIT_STATUSES = {
    "run": (
        ("N", "the job's own status (128+N: the job was killed by signal N)"),
        (str(KILLED_STATUS), _KILLED),
        (str(SETUP_FAILED_STATUS), _REFUSED),
        ("127", "the command could not be executed"),
        ("2", "bad arguments"),
    ),
    "task-prolog": (
        ("0", "the job's group was joined (or coshare does not manage the job)"),
        (str(SETUP_FAILED_STATUS), "coshare could not set up the job's group; Slurm fails the job"),
        ("2", "bad arguments"),
    ),
}


def exit_help(action: str, heading: str = "Exit status:") -> str:
    """The ``Exit status:`` section of ``action``'s ``--help``."""
    return "\n".join(
        [heading, *(f"  {code:<5}{meaning}" for code, meaning in EXIT_STATUSES[action])]
    )


def parser() -> argparse.ArgumentParser:
    """The command line."""
    raw = argparse.RawDescriptionHelpFormatter
    both = "\n\n".join(exit_help(a, f"Exit status of {a}:") for a in EXIT_STATUSES)
    top = argparse.ArgumentParser(
        prog="coshare-launch", description=__doc__.split("\n")[0], formatter_class=raw, epilog=both
    )
    sub = top.add_subparsers(dest="action", required=True)
    cmd = sub.add_parser(
        "run",
        help="run CMD as the whole job, inside its coshare group",
        formatter_class=raw,
        epilog=exit_help("run"),
    )
    cmd.add_argument("--socket", required=True, help="the node daemon's control socket")
    cmd.add_argument("--gate-socket", help="the offload gate's socket, for the job's processes")
    cmd.add_argument("--job", required=True, help="the job's id on this node")
    cmd.add_argument("--label", help="the job as the user knows it (for messages)")
    cmd.add_argument("--cores", help="cores the job was given")
    cmd.add_argument("--memory-mib", help="host memory the job declared (MiB)")
    cmd.add_argument("--devices", help="device ids, comma-separated")
    cmd.add_argument("--device-memory", help="declared device memory (2048, 2G)")
    cmd.add_argument("--device-threads", help="declared device threads")
    cmd.add_argument("--chirp", help="condor_chirp, to put the kill reason into the job's ad")
    cmd.add_argument(
        "--lends",
        action="store_true",
        help="coshare placed the job as one whose idle cores may be lent",
    )
    cmd.add_argument(
        "--borrow",
        help="the job (its id on this node) whose idle cores this "
        "CPU-only job was placed on: --cores of them are taken out of its cpuset",
    )
    cmd.add_argument("command", nargs="+", help="the job's command (after --)")
    task = sub.add_parser(
        "task-prolog",
        help="Slurm's TaskProlog: join the job's group",
        formatter_class=raw,
        epilog=exit_help("task-prolog"),
    )
    task.add_argument("--socket", default=DEFAULT_CONTROL_SOCKET, help="control socket")
    task.add_argument("--gate-socket", default=DEFAULT_GATE_SOCKET, help="offload gate socket")
    task.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="the daemon's state dir")
    return top


#: prctl(2) option: whether the process may be ptraced and dumped (<linux/prctl.h>).
PR_SET_DUMPABLE = 4


def protect() -> str | None:
    """Make this process not dumpable (see the module's docstring); why not, if it failed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:  # no prctl: not Linux, or no libc to call it
        return str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``coshare-launch`` and ``coshare node launch``."""
    problem = protect()
    if problem is not None:
        say(f"warning: cannot keep the job from tracing coshare-launch: {problem}")
    args = parser().parse_args(argv)
    if args.action == "run":
        run(args)
    elif args.action == "task-prolog":
        result = task_prolog(args.socket, args.gate_socket, args.state_dir, dict(os.environ))
        if result is not None:
            print("\n".join(result[0]))
            sys.exit(result[1])


if __name__ == "__main__":
    main()
