"""``coshare node check``: every capability the node helpers use, found or missing, and where
each was looked for.

=====================  ======================================================================
capability             looked at
=====================  ======================================================================
cgroups                ``node.cgroup_root``: a cgroup2 mount, or v1 hierarchies
own cores, memory      v1 ``cpuset``/``memory`` hierarchies; v2 ``cgroup.controllers``
freezer                v1 ``freezer`` hierarchy; v2 ``cgroup.freeze`` of coshare's group
cpu accounting         v1 ``cpuacct`` hierarchy; v2 ``cpu.stat`` (each job's load)
run-queue delay        ``/proc/<this pid>/schedstat`` (each job's wait for a CPU, any cgroup)
group kill             v2 ``cgroup.kill`` (else freeze and signal)
L3 cache ways (CAT)    ``node.resctrl_root/info/L3/cbm_mask`` (or ``L3CODE``, with CDP)
memory bw alloc (MBA)  ``node.resctrl_root/info/MB/min_bandwidth``
hardware counters      ``perf_event_open(2)``: a user-space instruction counter of this process
NVML memory, PCIe      ``libnvidia-ml.so.1`` through pynvml: device memory per process, PCIe
                       throughput (the collocation paper's copy bandwidth, section III-B3)
GPU memory limits      ``node.gpu_limits`` (MPS's control pipe) and ``node.device_memory``
membw baseline         ``state_dir/membw-baseline.json`` (``probe membw --init``)
node facts             ``state_dir/facts``, written by the node daemon
=====================  ======================================================================

Nothing is pretended: a capability is ``found`` only when the file is there or the call
worked, and ``missing`` says what failed. The command exits 1 while a capability that
enforcement needs (:data:`ENFORCEMENT`) is missing: a node that cannot hold a job to its
limits is not ready for coshare's jobs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from coshare.config import NodeConfig
from coshare.errors import CoshareError, Unsupported
from coshare.node.cgroups import Cgroups, V1Cgroups, V2Cgroups
from coshare.node.load import parse_schedstat
from coshare.node.membw import ProbeFiles
from coshare.node.mps import mps_running, pipe_dir_of
from coshare.node.procfs import PROC
from coshare.node.resctrl import Resctrl
from coshare.node.ways import format_runs

Status = Literal["found", "missing"]


@dataclass(frozen=True)
class Capability:
    """One capability of the node.

    Attributes:
        name: what it is.
        status: ``found`` or ``missing``.
        where: the file, mount or call that was looked at.
        detail: what was found, or why it is missing.
    """

    name: str
    status: Status
    where: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _cap(name: str, found: bool, where: object, detail: str) -> Capability:
    return Capability(name, "found" if found else "missing", str(where), detail)


def cgroup_capabilities(open_cgroups: Callable[[], Cgroups]) -> list[Capability]:
    """The cgroup features: own cores, memory limit, freezer, CPU accounting, group kill."""
    try:
        cgroups = open_cgroups()
    except CoshareError as exc:
        return [_cap("cgroups", False, "node.cgroup_root", str(exc))]
    out = [
        _cap(
            "cgroups",
            True,
            cgroups.root,
            f"cgroup {cgroups.version}, coshare's parent group {cgroups.parent}",
        )
    ]
    names = {"cpuset": "own cores (cpuset)", "memory": "memory limit", "freeze": "freezer"}
    for feature, name in names.items():
        missing = cgroups.missing([feature])  # type: ignore[list-item]
        out.append(
            _cap(
                name,
                not missing,
                _feature_path(cgroups, feature),
                missing[0] if missing else "available",
            )
        )
    if isinstance(cgroups, V1Cgroups):
        have = "cpuacct" in cgroups.hierarchies()
        out.append(
            _cap(
                "cpu accounting",
                have,
                cgroups.root / "cpuacct",
                "cpuacct.usage per job"
                if have
                else "no cgroup v1 cpuacct hierarchy mounted: no CPU load facts",
            )
        )
    elif isinstance(cgroups, V2Cgroups):
        path = cgroups.root / "cpu.stat"
        out.append(
            _cap(
                "cpu accounting",
                path.exists(),
                path,
                "cpu.stat usage_usec per job" if path.exists() else "missing",
            )
        )
        kill = cgroups.parent_dir / "cgroup.kill"
        out.append(
            _cap(
                "group kill",
                kill.exists(),
                kill,
                "cgroup.kill (Linux 5.14+)"
                if kill.exists()
                else "older kernel: freeze and signal each process",
            )
        )
    return out


def wait_capability(proc: Path = PROC, pid: int | None = None) -> Capability:
    """Whether the kernel counts each task's run-queue delay (``schedstat``): this process
    has run, so a kernel that counts shows time on a CPU; all zeros mean it counts nothing
    (older kernels print ``0 0 0`` with the accounting off)."""
    name = "run-queue delay"
    path = proc / str(os.getpid() if pid is None else pid) / "schedstat"
    try:
        text = path.read_text()
    except OSError as exc:
        return _cap(
            name,
            False,
            path,
            f"unsupported: {exc.strerror or exc} (a kernel without "
            "CONFIG_SCHED_INFO): the node publishes no wait facts, and collocate "
            "judges a lender by its load alone",
        )
    try:
        delay = parse_schedstat(text)
    except ValueError as exc:
        return _cap(name, False, path, f"unsupported: {exc}")
    if text.split()[0] == "0":
        return _cap(
            name,
            False,
            path,
            "unsupported: the kernel shows no CPU time for this "
            "process (scheduler statistics off): the node would publish zeros",
        )
    return _cap(
        name,
        True,
        path,
        f"per task (this process waited {delay / 1e6:.1f} ms): the "
        "node publishes each job's wait facts",
    )


def _feature_path(cgroups: Cgroups, feature: str) -> Path:
    if isinstance(cgroups, V1Cgroups):
        return cgroups.root / {"freeze": "freezer"}.get(feature, feature)
    if feature == "freeze" and isinstance(cgroups, V2Cgroups):
        return cgroups.parent_dir / "cgroup.freeze"
    return cgroups.root / "cgroup.controllers"


def resctrl_capabilities(resctrl: Resctrl) -> list[Capability]:
    """L3 cache allocation (ways) and memory bandwidth allocation."""
    out = []
    try:
        cache = resctrl.cache()
        free = resctrl.ways_free()
        out.append(
            _cap(
                "L3 cache ways (CAT)",
                True,
                resctrl.root / "info",
                f"{cache.ways} ways ({format_runs(cache.full_mask)}), {free} free, at "
                f"least {cache.min_bits} per group, {cache.closids} CLOSIDs, domains "
                f"{','.join(cache.domains) or '-'}",
            )
        )
    except Unsupported as exc:
        out.append(_cap("L3 cache ways (CAT)", False, exc.path, f"unsupported: {exc.detail}"))
    except CoshareError as exc:
        out.append(_cap("L3 cache ways (CAT)", False, resctrl.root, str(exc)))
    try:
        band = resctrl.bandwidth()
        out.append(
            _cap(
                "memory bandwidth allocation (MBA)",
                True,
                resctrl.root / "info" / "MB",
                f"at least {band.min_bandwidth}% in steps of {band.granularity}%",
            )
        )
    except Unsupported as exc:
        out.append(
            _cap("memory bandwidth allocation (MBA)", False, exc.path, f"unsupported: {exc.detail}")
        )
    except CoshareError as exc:
        out.append(_cap("memory bandwidth allocation (MBA)", False, resctrl.root, str(exc)))
    return out


#: perf_event_open(2)'s system call number by machine (asm/unistd.h).
_PERF_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}
_PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def counter_capability(machine: str | None = None) -> Capability:
    """Whether this process can open a hardware instruction counter of its own (user
    space only, so ``perf_event_paranoid`` up to 2 allows it): what profiling IPC and
    bandwidth per program (Spread-n-Share section 5.1) needs."""
    name = "hardware counters"
    arch = machine or platform.machine()
    paranoid = "unknown"
    with contextlib.suppress(OSError):
        paranoid = _PARANOID.read_text().strip()
    where = f"perf_event_open(2) (PERF_TYPE_HARDWARE instructions); {_PARANOID} = {paranoid}"
    number = _PERF_SYSCALL.get(arch)
    if number is None:
        return _cap(name, False, where, f"no perf_event_open system call number for {arch}")
    # struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type, size, config, sample
    # period, sample type, read format, flags (disabled | exclude_kernel | exclude_hv), ...
    attr = struct.pack("=IIQQQQQIIQ", 0, 64, 1, 0, 0, 0, 1 | 1 << 5 | 1 << 6, 0, 0, 0)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(
        ctypes.c_long(number),
        buffer,
        ctypes.c_int(0),
        ctypes.c_int(-1),
        ctypes.c_int(-1),
        ctypes.c_ulong(0),
    )
    if fd < 0:
        err = ctypes.get_errno()
        hint = {
            2: " (no hardware counters on this CPU or virtual machine)",
            13: " (perf_event_paranoid forbids it)",
            1: " (not permitted)",
        }
        return _cap(name, False, where, f"failed: {os.strerror(err)}{hint.get(err, '')}")
    os.close(fd)
    return _cap(name, True, where, "an instruction counter of this process opened")


def nvml_capabilities() -> list[Capability]:
    """NVML: device memory per process (the watchdog) and PCIe throughput (copy bandwidth)."""
    where = "libnvidia-ml.so.1 (pynvml)"
    try:
        import pynvml
    except ImportError:
        why = "pynvml is not installed (pip install 'coshare[nvml]')"
        return [_cap("NVML", False, where, why), _no_pcie(where, why)]
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and OSError: no driver, no library
        why = f"nvmlInit failed: {exc}"
        return [_cap("NVML", False, where, why), _no_pcie(where, why)]
    try:
        count = pynvml.nvmlDeviceGetCount()
        out = [_cap("NVML", True, where, f"{count} GPUs")]
        if count == 0:
            return [*out, _no_pcie(where, "NVML sees no GPU")]
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out.append(
            _probe_nvml(
                "NVML device memory",
                where,
                lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                lambda v: f"GPU 0: {int(str(v)) >> 20} MiB",
            )
        )
        out.append(
            _probe_nvml(
                "NVML PCIe throughput",
                where,
                lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
                lambda v: (
                    f"GPU 0: {v} KB/s sent now (GPU jobs' copy "
                    "bandwidth: copy_mbps in the node facts)"
                ),
            )
        )
        return out
    finally:
        with contextlib.suppress(Exception):  # what failed to start is not a finding
            pynvml.nvmlShutdown()


def _no_pcie(where: str, why: str) -> Capability:
    """The copy-bandwidth row where NVML cannot say: no fact, and the planner's fallback."""
    return _cap(
        "NVML PCIe throughput",
        False,
        where,
        f"unsupported: {why}; the node publishes "
        "no copy_mbps facts, the planner uses jobs' CoshareCopyBandwidth",
    )


def _probe_nvml(
    name: str, where: str, call: Callable[[], object], show: Callable[[object], str]
) -> Capability:
    try:
        return _cap(name, True, where, show(call()))
    except Exception as exc:  # NVMLError_NotSupported on GPUs without the counter
        return _cap(name, False, where, f"failed: {exc}")


def gpu_limit_capability(config: NodeConfig) -> Capability:
    """Which limit holds a GPU job to its declared device memory here: MPS (an allocation past
    it fails; ``node.gpu_limits: mps`` with a control daemon running), the NVML watchdog (it
    kills a job after it went past; ``node.device_memory: nvml``), or none."""
    name = "GPU memory limits"
    watchdog = config.device_memory == "nvml"
    backstop = (
        "the NVML watchdog kills a job past its declared device memory"
        if watchdog
        else "none: nothing holds a GPU job to its declared device memory"
    )
    if config.gpu_limits == "mps":
        running, seen = mps_running(config.mps_pipe_dir)
        where = str(pipe_dir_of(config.mps_pipe_dir))
        if running:
            return _cap(
                name,
                True,
                where,
                f"mps: each job's pinned memory and thread share "
                f"({seen}); backstop: {backstop if watchdog else 'none'}",
            )
        return _cap(name, watchdog, where, f"node.gpu_limits is mps, but {seen}; {backstop}")
    return _cap(name, watchdog, "node.gpu_limits, node.device_memory", backstop)


def state_capabilities(config: NodeConfig, now_s: float) -> list[Capability]:
    """The probe's baseline and the daemon's facts file."""
    files = ProbeFiles(Path(config.state_dir))
    out = []
    try:
        baseline = files.baseline()
    except CoshareError as exc:
        baseline = None
        out.append(_cap("membw baseline", False, files.baseline_path, str(exc)))
    else:
        out.append(
            _cap(
                "membw baseline",
                baseline is not None,
                files.baseline_path,
                f"{len(baseline.by_cpus)} core sets, {baseline.method}, "
                f"{now_s - baseline.at_s:.0f} s old"
                if baseline
                else "none: run `coshare node probe membw --init` on an idle node",
            )
        )
    facts = Path(config.state_dir) / "facts"
    try:
        age = now_s - facts.stat().st_mtime
        out.append(
            _cap(
                "node facts",
                True,
                facts,
                f"written {age:.0f} s ago (the node daemon "
                f"samples every {config.sample_interval_s:g} s)",
            )
        )
    except OSError:
        out.append(
            _cap(
                "node facts",
                False,
                facts,
                "not written: is the node daemon (coshare node gate) running?",
            )
        )
    return out


#: The capabilities without which a job placed here would run without its limits (its own
#: cores, its memory limit): ``coshare node check`` exits 1 while one of them is missing.
#: The others (the freezer that trials and suspension use, the measurements) narrow what the
#: node does, never what holds a job to its limits.
ENFORCEMENT = ("cgroups", "own cores (cpuset)", "memory limit")


def missing_enforcement(caps: list[Capability]) -> list[Capability]:
    """The capabilities of :data:`ENFORCEMENT` that ``caps`` lists as missing (when cgroups
    cannot be opened at all, that one entry stands for the rest)."""
    return [c for c in caps if c.name in ENFORCEMENT and c.status == "missing"]


def node_capabilities(
    config: NodeConfig, open_cgroups: Callable[[], Cgroups], resctrl: Resctrl, *, nvml: bool = True
) -> list[Capability]:
    """Every capability, in the order of the module's table."""
    out = cgroup_capabilities(open_cgroups)
    out.append(wait_capability())
    out += resctrl_capabilities(resctrl)
    out.append(counter_capability())
    if nvml:
        out += nvml_capabilities()
    out.append(gpu_limit_capability(config))
    out += state_capabilities(config, time.time())
    return out
