"""Job control in the root node daemon: START, JOIN and END for wrappers that run as the user.

HTCondor's job wrapper and Slurm's TaskProlog run as the job's user, yet a job's group, its
cpuset and memory limit can only be made by root. The daemon does it for them, after the
checks of :mod:`.trust` on what the kernel says about the caller; the protocol is in
:mod:`.protocol`, the socket server in :mod:`.server`.

Requests are handled one at a time (a lock), in a worker thread of the daemon, since making
or killing a group may take a while; job records are written under the store's ``flock``,
which Slurm's Prolog (calling :func:`~coshare.node.lifecycle.job_start` as root) takes too.

:meth:`JobControl.reap` removes the group and record of a job whose launcher is gone and whose
processes are all gone too (a SIGKILLed launcher leaks nothing); :meth:`JobControl.adopt`
moves into a root-started job's group what the scheduler started for that job but did not
join (a TaskProlog that was skipped or subverted): the daemon calls both with every watchdog
round.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import (
    CgroupError,
    CgroupUnavailable,
    CoshareError,
    JobSpecError,
    JobStateError,
    NodeError,
    ProbeError,
    Unsupported,
)
from coshare.node import harvest, lifecycle
from coshare.node.bandwidth import ProbeResult
from coshare.node.cgroups import Cgroups, JobGroup
from coshare.node.cgroups.base import write_text
from coshare.node.control.protocol import (
    ControlProtocolError,
    ControlRequest,
    format_control_error,
    parse_control,
)
from coshare.node.control.trust import (
    Refused,
    TrustPolicy,
    check_end,
    check_join,
    check_start,
    job_of_launcher,
)
from coshare.node.gpus import GpuDevice, discover, visible_devices
from coshare.node.jobs import JobRecord, JobStore, Launcher, job_of_pid, read_proc_cgroup
from coshare.node.membw import ProbeFiles, trial_probe
from coshare.node.mps import mps_fields, mps_running
from coshare.node.nvml import start_nvml
from coshare.node.process import ProcessInfo
from coshare.node.procfs import (
    PROC,
    has_exited,
    is_alive,
    list_pids,
    pinned,
    read_cmdline,
    read_process,
)
from coshare.node.spec import format_cpu_list

log = logging.getLogger("coshare.node.control")


TrialMeasure = Callable[[tuple[int, ...]], ProbeResult]
"""Probes the given cores for a TRIAL (tests pass a fake; the daemon the real probe)."""


class JobControl:
    """Answers control requests for one node.

    Args:
        config: the node section of the configuration.
        proc: where /proc is (tests keep the real one).
    """

    def __init__(
        self,
        config: NodeConfig,
        proc: Path = PROC,
        clock: Callable[[], float] = time.time,
        probe: TrialMeasure | None = None,
        gpus: Callable[[], Sequence[GpuDevice]] | None = None,
    ) -> None:
        self.config = config
        self._probe = probe if probe is not None else self._membw_probe
        self._gpus = gpus if gpus is not None else nvml_gpus()
        self.clock = clock
        self.policy = TrustPolicy(config.trusted_launchers, config.trusted_launcher_uids)
        self.store = lifecycle.node_store(config)
        self.cgroups = lifecycle.node_cgroups(config)
        self.proc = proc
        self._lock = threading.Lock()

    def handle(self, line: bytes, peer_pid: int, peer_uid: int, peer_start: int | None) -> str:
        """Answer one request line of the peer the kernel named.

        Args:
            line: the request.
            peer_pid: ``SO_PEERCRED`` pid of the connection.
            peer_uid: its uid.
            peer_start: the peer's start time when it connected (``None``: unknown), so that
                a reused pid is not taken for it.

        Returns:
            the reply line, without its newline. Never raises.
        """
        try:
            request = parse_control(line)
        except ControlProtocolError as exc:
            return format_control_error(exc.code, exc.text)

        def dispatch() -> str:
            caller = read_process(peer_pid, self.proc)
            if caller is not None and peer_start is not None and caller.start_ticks != peer_start:
                caller = None
            with self._lock:
                if request.verb == "START":
                    return self._start(request, caller, peer_uid)
                if request.verb == "JOIN":
                    return self._join(request, caller, peer_uid)
                if request.verb in ("FREEZE", "THAW"):
                    return self._freeze(request, peer_uid, frozen=request.verb == "FREEZE")
                if request.verb in ("LEND", "RECLAIM"):
                    return self._loan(request, peer_uid)
                if request.verb == "TRIAL":
                    return self._trial(request, peer_uid)
                return self._end(request, caller, peer_uid)

        return self._answer(request, dispatch, f"pid {peer_pid} (uid {peer_uid})")

    def trial(self, job: str, partners: Sequence[str]) -> str:
        """TRIAL for the daemon itself: a request it read from the scheduler's queue
        (``node.trial_requests``, :mod:`coshare.node.trial_requests`), measured as one over
        the socket is (freeze the partners, probe, thaw whatever happens); the reply line.
        Never raises."""
        try:
            request = parse_control(f"TRIAL job={job} partners={','.join(partners)}\n".encode())
        except ControlProtocolError as exc:
            return format_control_error(exc.code, exc.text)

        def measure() -> str:
            with self._lock:
                return self._measure_trial(request)

        return self._answer(request, measure, "the daemon's trial requests")

    def _answer(self, request: ControlRequest, call: Callable[[], str], who: str) -> str:
        """``call()``'s reply, or the error reply of what it raised."""
        try:
            return call()
        except Refused as exc:
            log.warning("refused %s from %s: %s", request.verb, who, exc.text)
            return format_control_error(exc.code, exc.text)
        except JobSpecError as exc:
            return format_control_error("bad_spec", f"job {request.job}: {exc}")
        except Unsupported as exc:
            log.warning("job %s: %s", request.job, exc)
            return format_control_error("unsupported", f"job {request.job}: {exc}")
        except (CgroupUnavailable, CgroupError) as exc:
            log.error("job %s: %s", request.job, exc)
            return format_control_error("cgroup", f"job {request.job}: {exc}")
        except JobStateError as exc:
            return format_control_error("running", str(exc))
        except CoshareError as exc:
            log.error("job %s: %s", request.job, exc)
            return format_control_error("internal", f"job {request.job}: {exc}")
        except Exception as exc:  # one bad request must not take the daemon down
            log.exception("job %s: %s failed", request.job, request.verb)
            return format_control_error("internal", f"job {request.job}: {exc}")

    # -- requests ---------------------------------------------------------------------------

    def _job_of(self, pid: int) -> str | None:
        return job_of_pid(pid, self.cgroups, self.proc)

    def _start(self, request: ControlRequest, caller: ProcessInfo | None, uid: int) -> str:
        parent = read_process(caller.ppid, self.proc) if caller is not None else None
        check_start(
            self.policy,
            request.job,
            caller,
            uid,
            parent,
            self._job_of(caller.pid) if caller is not None else None,
            self._title_job(parent),
        )
        assert caller is not None
        if request.uid is not None and uid != 0:
            raise Refused("not_allowed", f"job {request.job}: only root may give uid=")
        launcher = Launcher(caller.pid, caller.start_ticks)
        if uid != 0:
            # One launcher, one job: what a launcher can make the daemon hold (groups,
            # records, cores) is one job's, however often it asks.
            for other in self.store.records():
                if other.launcher == launcher and other.job != request.job:
                    raise Refused(
                        "not_allowed",
                        f"job {request.job}: process {caller.pid} already started job "
                        f"{other.job}; a launcher starts one job",
                    )
        if request.borrow is not None:
            loaned = self._start_on_loan(
                request, launcher, request.uid if request.uid is not None else uid
            )
            return start_reply(loaned, self._gpu_limits(loaned))
        try:  # before anything is made: a device this node does not have starts nothing
            visible = self._visible(request.devices)
        except ValueError as exc:
            raise Refused("bad_device", f"job {request.job}: {exc}") from None
        record = lifecycle.job_start(
            self.config,
            request.job,
            lends=request.lends,
            cores=request.cores,
            memory_mib=request.memory_mib,
            devices=request.devices,
            device_memory_mib=request.device_memory_mib,
            device_threads=request.device_threads,
            uid=request.uid if request.uid is not None else uid,
            launcher=launcher,
            llc_ways=request.llc_ways,
            membw_percent=request.membw_percent,
        )
        log.info(
            "job %s started by process %d (uid %s): cpus %s, memory %s MiB",
            record.job,
            caller.pid,
            record.uid,
            format_cpu_list(record.spec.cpus) or "-",
            record.spec.memory_mib,
        )
        return start_reply(record, visible + self._gpu_limits(record))

    def _start_on_loan(self, request: ControlRequest, launcher: Launcher, uid: int) -> JobRecord:
        """START ``borrow=``: a CPU-only job placed on the idle cores of a running job here
        (``collocate``, HTCondor): ``cores`` cores leave the lender's cpuset, then its group is
        made with exactly them (:func:`coshare.node.lifecycle.job_start_on_loan`; the lender
        must have started with ``lends=1`` and keeps a core); when that cannot be done no group
        is left and the START is refused with why, so the job never runs on cores it shares.

        Raises:
            Refused: ``not_allowed``: the lender does not run here or may not lend.
            JobSpecError: it cannot lend that many cores (the numbers).
        """
        lender = request.borrow
        assert lender is not None and request.cores is not None
        count = math.ceil(request.cores)
        found = self.store.read(lender)
        if found is None or not found.group(self.config.kill_timeout_s).exists():
            raise Refused(
                "not_allowed",
                f"job {request.job} was placed on cores of job "
                f"{lender}, which does not run on this node",
            )
        if not found.lends:
            raise Refused(
                "not_allowed",
                f"job {request.job} was placed on cores of job "
                f"{lender}, which was not placed as a job whose cores may be lent "
                "(it did not start with lends=1)",
            )
        try:
            record = lifecycle.job_start_on_loan(
                self.config,
                request.job,
                lender,
                count,
                memory_mib=request.memory_mib,
                uid=uid,
                launcher=launcher,
                lender_must_lend=True,
            )
        except JobSpecError as exc:
            raise JobSpecError(
                f"{count} idle cores of job {lender} cannot be lent to it here: {exc}"
            ) from exc
        log.info(
            "job %s started by process %d on %d cores of job %s: cpus %s",
            record.job,
            launcher.pid,
            count,
            lender,
            format_cpu_list(record.spec.cpus),
        )
        return record

    def _join(self, request: ControlRequest, caller: ProcessInfo | None, uid: int) -> str:
        if caller is None:
            raise Refused("gone", f"job {request.job}: the requesting process is gone")
        record = self.store.read(request.job)
        if record is None:
            error = self.store.error(request.job)
            raise Refused(
                "unknown_job",
                f"job {request.job} was not started on this node" + (f": {error}" if error else ""),
            )
        target = caller if request.target == "self" else read_process(caller.ppid, self.proc)
        with pinned(target.pid if target is not None else 0) as pidfd:
            # Read after the pidfd was opened: while that process lives these facts are its.
            target = self._still(target)
            parent = read_process(target.ppid, self.proc) if target is not None else None
            move = check_join(
                self.policy,
                request.job,
                record.uid,
                record.launcher,
                uid,
                target,
                parent,
                self._job_of(target.pid) if target is not None else None,
                self._title_job(parent),
            )
            assert target is not None
            if move:
                self._move(record, target, pidfd)
                log.info("job %s: process %d joined", request.job, target.pid)
        try:
            visible = self._visible(record.spec.devices)
        except ValueError as exc:  # the node's GPUs changed since START: CUDA is told the ids
            log.warning("job %s: %s", record.job, exc)
            visible = ""
        return join_reply(record, target.pid, visible + self._gpu_limits(record))

    def _still(self, process: ProcessInfo | None) -> ProcessInfo | None:
        """``process`` read again, ``None`` when its pid names another process now."""
        if process is None:
            return None
        now = read_process(process.pid, self.proc)
        return now if now is not None and now.start_ticks == process.start_ticks else None

    def _title_job(self, process: ProcessInfo | None) -> str | None:
        """The job a trusted launcher's title names (``slurmstepd: [1234.batch]``)."""
        if process is None or not self.policy.is_launcher(process):
            return None
        return job_of_launcher(" ".join(read_cmdline(process.pid, self.proc)))

    def _move(self, record: JobRecord, process: ProcessInfo, pidfd: int | None) -> None:
        """Move ``process`` into the job's group, and never another process that took its pid
        between the checks and the write to ``cgroup.procs``.

        The pidfd (opened before the checks read anything) says whether the process exited
        meanwhile: if it did not, its pid was never free, and the write moved it. If it did,
        whatever took its pid and landed in the group is put back where its parent is.

        Raises:
            Refused: ``gone``, the process ended before it was moved.
            CgroupError: the group cannot take it.
        """
        job = record.job
        try:
            self._add(record, process.pid)
        except CgroupError:
            if self._still(process) is None:
                raise Refused(
                    "gone", f"job {job}: process {process.pid} ended before it joined"
                ) from None
            raise
        exited = pidfd is not None and has_exited(pidfd)
        if not exited and self._still(process) is not None:
            return
        self._undo(record, process, exited)
        raise Refused("gone", f"job {job}: process {process.pid} ended while it joined")

    def _add(self, record: JobRecord, pid: int) -> None:
        lifecycle.add_process(self.config, record, pid)

    def _undo(self, record: JobRecord, gone: ProcessInfo, exited: bool) -> None:
        """``gone`` exited while it was moved: put back whatever took its pid, if that landed
        in the job's group without belonging there (its parent is not in the group).

        ``exited``: its pidfd said so, and then whatever has its pid now is another process,
        even one that started in the same clock tick (``/proc``'s start time counts ticks of
        10 ms, and a pid can be freed and taken again within one). Without a pidfd, only a
        different start time tells another process."""
        other = read_process(gone.pid, self.proc)
        if other is None or (not exited and other.start_ticks == gone.start_ticks):
            return
        if self._job_of(other.pid) != record.job or self._job_of(other.ppid) == record.job:
            return
        text = read_proc_cgroup(other.ppid, self.proc)
        files = self.cgroups.procs_files_of(text) if text is not None else ()
        for procs in files:
            try:
                write_text(procs, str(other.pid))
            except CgroupError as exc:
                log.error("job %s: cannot put process %d back: %s", record.job, other.pid, exc)
        log.warning(
            "job %s: process %d took the pid of process %d while it joined; put "
            "back where its parent %d is",
            record.job,
            other.pid,
            gone.pid,
            other.ppid,
        )

    def _end(self, request: ControlRequest, caller: ProcessInfo | None, uid: int) -> str:
        record = self.store.read(request.job)
        if record is None and uid != 0:
            raise Refused("unknown_job", f"job {request.job} was not started on this node")
        check_end(request.job, record.launcher if record else None, caller, uid)
        result = lifecycle.job_end(self.config, request.job)
        if result.reason is not None:
            log.info("job %s ended: %s", request.job, result.reason)
        reply = f"OK job={result.job} started={int(result.started)} leftover={result.leftover}"
        if result.reason is not None:
            reply += f" reason={' '.join(result.reason.split())}"
        return reply

    def _freeze(self, request: ControlRequest, uid: int, *, frozen: bool) -> str:
        """FREEZE or THAW the job's group; idempotent (``changed=0``: it already was)."""
        verb = "FREEZE" if frozen else "THAW"
        if uid not in self.config.operator_uids:
            raise Refused(
                "not_allowed",
                f"job {request.job}: {verb} is for operators (node.operator_uids), not uid {uid}",
            )
        record = self.store.read(request.job)
        group = record.group(self.config.kill_timeout_s) if record is not None else None
        if record is None or group is None or not group.exists():
            raise Refused("unknown_job", f"job {request.job} has no group on this node")
        changed = set_frozen(self.store, self.cgroups, group, frozen, self.clock())
        log.info(
            "job %s %s%s",
            request.job,
            "frozen" if frozen else "thawed",
            "" if changed else " already; nothing done",
        )
        return f"OK job={request.job} frozen={int(frozen)} changed={int(changed)}"

    def _trial(self, request: ControlRequest, uid: int) -> str:
        """TRIAL: freeze the partners, probe their cores, thaw them (whatever happened)."""
        if uid not in self.config.operator_uids:
            raise Refused(
                "not_allowed",
                f"job {request.job}: TRIAL is for operators (node.operator_uids), not uid {uid}",
            )
        return self._measure_trial(request)

    def _measure_trial(self, request: ControlRequest) -> str:
        """TRIAL's measurement (the caller holds the lock and may ask)."""
        self._live_record(request.job)
        partners = [self._live_record(p) for p in request.partners]
        groups = [r.group(self.config.kill_timeout_s) for r in partners]
        cpus = tuple(sorted({c for r in partners for c in r.spec.cpus}))
        if not cpus:
            raise Refused("bad_spec", f"job {request.job}: its partners hold no cores to probe")
        frozen: list[JobGroup] = []
        try:
            for group in groups:
                # set_frozen records the freeze before making it: a daemon killed during
                # the probe thaws the group when it starts again (thaw_overdue).
                if set_frozen(self.store, self.cgroups, group, True, self.clock()):
                    frozen.append(group)
            result = self._probe(cpus)
        finally:
            for group in frozen:  # only what this request froze (an operator's stays)
                try:
                    set_frozen(self.store, self.cgroups, group, False, self.clock())
                except CoshareError as exc:
                    log.error(
                        "job %s: not thawed after its trial probe: %s (the daemon "
                        "retries after node.max_freeze_s)",
                        request.job,
                        exc,
                    )
        available = min(max(result.fraction, 0.0), 1.0)
        log.info(
            "job %s: trial beside %s: %.0f%% of the bandwidth available on cores %s",
            request.job,
            ",".join(request.partners),
            100 * available,
            format_cpu_list(cpus),
        )
        return (
            f"OK job={request.job} share={1.0 - available:.4f} available={available:.4f} "
            f"gbps={result.measurement.gbps:.3f} cpus={format_cpu_list(cpus)}"
        )

    def _membw_probe(self, cpus: tuple[int, ...]) -> ProbeResult:
        """The real probe of a TRIAL (:func:`coshare.node.membw.trial_probe`)."""
        try:
            return trial_probe(
                ProbeFiles(Path(self.config.state_dir)),
                self.cgroups.allowed_cpus(),
                cpus,
                size_mib=self.config.probe_array_mib,
                clock=self.clock,
            )
        except ProbeError as exc:
            raise Unsupported("membw probe", self.config.state_dir, str(exc)) from exc

    def thaw_all(self) -> list[str]:
        """Thaw every job with a freeze mark (the daemon's start: no probe outlives the
        daemon that ran it, so a mark left is from one that was killed); the jobs thawed."""
        return self._thaw(
            lambda since, now: True,
            "at start",
            lambda job, since, now: f"job {job} was left frozen by an earlier daemon; thawed",
        )

    def _loan(self, request: ControlRequest, uid: int) -> str:
        """LEND or RECLAIM harvested cores (:mod:`coshare.node.harvest`); idempotent."""
        verb = request.verb
        if uid not in self.config.operator_uids:
            raise Refused(
                "not_allowed",
                f"job {request.job}: {verb} is for operators (node.operator_uids), not uid {uid}",
            )
        assert request.other is not None
        with self.store.lock():
            lender = self._live_record(request.job)
            borrower = self._live_record(request.other)
            missing = self.cgroups.missing(["cpuset"])
            if missing:
                raise Unsupported("cpuset", str(self.cgroups.root), missing[0])
            if verb == "LEND":
                assert request.cpus is not None
                others = [
                    r.holding()
                    for r in self.store.records()
                    if r.job not in (lender.job, borrower.job)
                ]
                change = harvest.lend(lender.holding(), borrower.holding(), request.cpus, others)
            else:
                change = harvest.give_back(lender.holding(), borrower.holding(), request.cpus)
            if change.changed:
                lifecycle.apply_holdings(
                    self.config,
                    self.store,
                    {lender.job: lender, borrower.job: borrower},
                    [change.lender, change.borrower],
                )
        after_l, after_b = change.lender, change.borrower
        lent = format_cpu_list(after_l.lent_to.get(after_b.job, ())) or "-"
        if verb == "LEND":
            log.info(
                "job %s lent cpus %s to job %s%s",
                after_l.job,
                lent,
                after_b.job,
                "" if change.changed else " already; nothing done",
            )
            return (
                f"OK job={after_l.job} to={after_b.job} cpus={format_cpu_list(after_l.cpus)} "
                f"to_cpus={format_cpu_list(after_b.cpus)} lent={lent} "
                f"changed={int(change.changed)}"
            )
        if change.requeue:
            log.warning(
                "job %s: giving back its cpus would leave job %s no core; nothing "
                "done, the planner must requeue job %s",
                after_l.job,
                after_b.job,
                after_b.job,
            )
        else:
            log.info(
                "job %s got cpus back from job %s%s; still lent: %s",
                after_l.job,
                after_b.job,
                "" if change.changed else " already",
                lent,
            )
        return (
            f"OK job={after_l.job} from={after_b.job} cpus={format_cpu_list(after_l.cpus)} "
            f"from_cpus={format_cpu_list(after_b.cpus) or '-'} lent={lent} "
            f"changed={int(change.changed)} requeue={int(change.requeue)}"
        )

    def _visible(self, devices: Sequence[str]) -> str:
        """The reply field that tells the job's CUDA clients their devices by NVML UUID
        (`` visible=GPU-...,MIG-...``; :func:`coshare.node.gpus.visible_devices`); empty
        where NVML lists no GPU (no driver, a Xeon Phi node): the ids are the devices then.

        Raises:
            ValueError: NVML lists GPUs and a device is not one of them.
        """
        found = self._gpus() if devices else ()
        return f" visible={visible_devices(devices, found)}" if found else ""

    def _gpu_limits(self, record: JobRecord) -> str:
        """The MPS limits a job's processes start with (reply fields; :mod:`coshare.node.mps`),
        or none: ``node.gpu_limits`` is not ``mps``, or no MPS control daemon runs (said)."""
        if self.config.gpu_limits != "mps" or not record.spec.devices:
            return ""
        running, seen = mps_running(self.config.mps_pipe_dir)
        if not running:
            log.warning(
                "job %s: node.gpu_limits is mps, but %s: its device memory is held "
                "by the watchdog alone",
                record.job,
                seen,
            )
            return ""
        return mps_fields(
            record.spec.devices,
            record.spec.device_memory_mib,
            record.spec.device_threads,
            dict(self.config.devices),
        )

    def _live_record(self, job: str) -> JobRecord:
        """The record of a job whose group exists on this node.

        Raises:
            Refused: ``unknown_job`` otherwise.
        """
        record = self.store.read(job)
        group = record.group(self.config.kill_timeout_s) if record is not None else None
        if record is None or group is None or not group.exists():
            raise Refused("unknown_job", f"job {job} has no group on this node")
        return record

    def thaw_overdue(self) -> list[str]:
        """Thaw every job frozen longer than ``node.max_freeze_s`` (a freeze is for a probe,
        never for good); the jobs thawed."""
        limit = self.config.max_freeze_s
        return self._thaw(
            lambda since, now: now - since >= limit,
            "after node.max_freeze_s",
            lambda job, since, now: (
                f"job {job} was frozen for {now - since:.0f} s, longer "
                "than node.max_freeze_s; thawed"
            ),
        )

    def _thaw(
        self,
        due: Callable[[float, float], bool],
        when: str,
        said: Callable[[str, float, float], str],
    ) -> list[str]:
        """Thaw every job with a freeze mark for which ``due(since, now)``, clearing its mark;
        a job that cannot be thawed is logged (``when``) and keeps its mark; the jobs thawed."""
        thawed = []
        now = self.clock()
        with self._lock:
            for record in self.store.records():
                since = self.store.frozen_since(record.job)
                if since is None or not due(since, now):
                    continue
                group = record.group(self.config.kill_timeout_s)
                try:
                    if group.exists():
                        set_frozen(self.store, self.cgroups, group, False, now)
                    self.store.clear_frozen(record.job)
                except CoshareError as exc:
                    log.error("job %s: cannot thaw %s: %s", record.job, when, exc)
                    continue
                log.warning("%s", said(record.job, since, now))
                thawed.append(record.job)
        return thawed

    # -- housekeeping -----------------------------------------------------------------------

    def reap(self) -> list[str]:
        """Remove jobs whose launcher and processes are all gone; the jobs removed."""
        reaped = []
        with self._lock:
            for record in self.store.records():
                if not self._abandoned(record):
                    continue
                try:
                    lifecycle.job_end(self.config, record.job)
                except CoshareError as exc:
                    log.error("cannot reap job %s: %s", record.job, exc)
                    continue
                log.warning(
                    "job %s: its launcher (process %d) died; group removed",
                    record.job,
                    record.launcher.pid if record.launcher else -1,
                )
                reaped.append(record.job)
        return reaped

    def adopt(self) -> list[tuple[str, int]]:
        """Move into its group every process of a root-started job (Slurm's Prolog) that is
        not in one yet: processes of the job's account below a trusted launcher that names
        the job in its title (``slurmstepd: [1234.batch]``). The TaskProlog's JOIN does this
        before the user's program runs; this catches a task whose TaskProlog did not.

        Returns:
            the (job, pid) moved.
        """
        with self._lock:
            records = {
                r.job: r for r in self.store.records() if r.launcher is None and r.uid is not None
            }
        if not records:
            return []
        infos = {}
        for pid in list_pids(self.proc):
            info = read_process(pid, self.proc)
            if info is not None:
                infos[pid] = info
        children: dict[int, list[int]] = defaultdict(list)
        for info in infos.values():
            children[info.ppid].append(info.pid)
        moved = []
        for info in infos.values():
            if not self.policy.is_launcher(info):
                continue
            job = job_of_launcher(" ".join(read_cmdline(info.pid, self.proc)))
            record = records.get(job) if job is not None else None
            if record is None:
                continue
            stack = list(children[info.pid])
            while stack:
                pid = stack.pop()
                stack.extend(children[pid])
                process = infos[pid]
                if process.uid != record.uid or self._job_of(pid) is not None:
                    continue
                try:
                    with self._lock, pinned(pid) as pidfd:
                        still = self._still(process)
                        if still is None or still.uid != record.uid or self._job_of(pid):
                            continue
                        self._move(record, still, pidfd)
                except (CoshareError, Refused) as exc:  # gone, or the group was removed
                    log.debug("job %s: cannot adopt process %d: %s", record.job, pid, exc)
                    continue
                log.warning(
                    "job %s: process %d had not joined its group; moved in", record.job, pid
                )
                moved.append((record.job, pid))
        return moved

    def _abandoned(self, record: JobRecord) -> bool:
        if record.launcher is None or is_alive(*record.launcher, proc=self.proc):
            return False
        group = record.group(self.config.kill_timeout_s)
        return not group.exists() or not group.pids()


def set_frozen(
    store: JobStore, cgroups: Cgroups, group: JobGroup, frozen: bool, now_s: float
) -> bool:
    """Freeze (thaw) a job's group and mark (unmark) it; whether anything changed.

    Raises:
        Unsupported: the node has no freezer (names where it looked).
        CgroupError: the kernel refused, or the freeze did not complete.
    """
    missing = cgroups.missing(["freeze"])
    if missing:
        raise Unsupported("freeze", str(cgroups.root), missing[0])
    if group.is_frozen() == frozen:
        if frozen and store.frozen_since(group.job) is None:
            store.mark_frozen(group.job, now_s)  # frozen by someone else: thawed in time too
        if not frozen:
            store.clear_frozen(group.job)
        return False
    if frozen:
        store.mark_frozen(group.job, now_s)  # first: a daemon killed meanwhile still thaws it
        group.freeze()
    else:
        group.thaw()
        store.clear_frozen(group.job)
    return True


def start_reply(record: JobRecord, limits: str = "") -> str:
    """The START reply for a started job (``limits``: its devices by UUID and its MPS fields,
    :mod:`coshare.node.mps`)."""
    spec = record.spec
    return (
        f"OK job={spec.job} cpus={format_cpu_list(spec.cpus) or '-'} "
        f"memory_mib={spec.memory_mib if spec.memory_mib is not None else '-'} "
        f"devices={','.join(spec.devices) or '-'}{limits}"
    )


def join_reply(record: JobRecord, pid: int, limits: str = "") -> str:
    """The JOIN reply: the moved process, and what the job's processes need to know (its
    cpus, devices and declared device memory and threads; ``-`` for none; its devices by
    UUID and its MPS limits)."""
    spec = record.spec

    def text(value: int | None) -> str:
        return str(value) if value is not None else "-"

    return (
        f"OK job={spec.job} pid={pid} cpus={format_cpu_list(spec.cpus) or '-'} "
        f"devices={','.join(spec.devices) or '-'} "
        f"device_memory_mib={text(spec.device_memory_mib)} "
        f"device_threads={text(spec.device_threads)}{limits}"
    )


def nvml_gpus() -> Callable[[], Sequence[GpuDevice]]:
    """The node's GPUs and MIG instances from NVML, listed once, at the first START that
    names a device (a GPU resliced into other MIG instances needs the daemon restarted);
    nothing where NVML cannot start or list them (said once)."""
    state: dict[str, list[GpuDevice]] = {}

    def listed() -> Sequence[GpuDevice]:
        if "gpus" not in state:
            state["gpus"] = []
            try:
                nvml = start_nvml()
            except NodeError as exc:
                log.info("jobs' devices go to CUDA by id: %s", exc)
                return state["gpus"]
            try:
                state["gpus"] = discover(nvml)
            except nvml.NVMLError as exc:
                log.warning("jobs' devices go to CUDA by id: NVML cannot list the GPUs: %s", exc)
        return state["gpus"]

    return listed
