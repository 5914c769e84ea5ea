"""The memory-bandwidth probe (``coshare node probe membw``), in the spirit of libDistGen.

poncos section 6: "processing an array with CPU cores ... larger than the L3 cache", "hardly
any computation and only accessing one byte per cache-line", under a second. Here one thread
per core, pinned to it (``sched_setaffinity`` on the thread), streams over its own share of
an array four times the last-level cache (``node.probe_array_mib``), reading one 8-byte word
per 64-byte line, for :data:`PROBE_SECONDS`; the GB/s reported count whole lines, which is
what the memory system moves.

**The kernel is numpy**: a strided sum (``uint64[::8]``) is numpy's compiled inner loop, it
releases the GIL, and it needs nothing beyond coshare's own dependencies, so it runs on
nodes without a compiler. ``bench/node_probe.py`` compares it with a small C loop doing the
same reads (built there with the C compiler where one exists): see docs/benchmarks.md. A
thread allocates its share itself, after pinning, so its pages sit on that core's memory node
(first touch), and streams it once before the measured passes so page faults stay out.

I/O: the measurement and the probe's files in ``node.state_dir``::

    membw-baseline.json   what --init measured on the idle node (coshare.node.bandwidth)
    membw-last.json       the last probe: what the node's facts publish
    probe.lock            flock(2): one probe at a time on a node (two would disturb each other)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from coshare.cli.extras import MissingExtra
from coshare.errors import ProbeError
from coshare.node.bandwidth import (
    INIT_HINT,
    Baseline,
    Measurement,
    ProbeResult,
    baseline_for,
    check_cpus,
    init_sets,
)
from coshare.node.spec import format_cpu_list

#: Seconds of measured streaming per probe (plus the allocation and one warm pass).
PROBE_SECONDS = 0.25
#: Bytes of a cache line: the unit the memory system moves and the probe touches once.
LINE_BYTES = 64
METHOD = "numpy"
SYS_CPU = Path("/sys/devices/system/cpu")


def llc_bytes(sys_cpu: Path = SYS_CPU) -> int | None:
    """Size of cpu0's last-level (L3) cache from sysfs, ``None`` when not reported."""
    best: int | None = None
    for index in sorted((sys_cpu / "cpu0" / "cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if level != "3":
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        factor = units.get(size[-1:].upper(), 1)
        digits = size[:-1] if size[-1:].upper() in units else size
        if digits.isdigit():
            best = int(digits) * factor
    return best


def array_mib(configured_mib: int, llc: int | None) -> int:
    """The probe's array: as configured, else four times the LLC within 64..1024 MiB."""
    if configured_mib > 0:
        return configured_mib
    if llc is None:
        return 256
    return min(max(-(-4 * llc // (1 << 20)), 64), 1024)


def measure(
    cpus: Sequence[int],
    size_mib: int,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.time,
) -> Measurement:
    """Stream on ``cpus`` at once and say what they reached together.

    Raises:
        ProbeError: a core this process may not run on, or an array that cannot be had.
    """
    try:
        import numpy as np  # only the probe needs it: a node installs it with the planner extra
    except ImportError as exc:  # a CoshareError: the sampler logs it and goes on
        raise MissingExtra("the membw probe", "planner", "numpy") from exc

    cpus = tuple(cpus)
    share = max((size_mib << 20) // len(cpus) // LINE_BYTES, 1) * LINE_BYTES
    barrier = threading.Barrier(len(cpus) + 1)
    bytes_read = [0] * len(cpus)
    began = [0.0] * len(cpus)
    ended = [0.0] * len(cpus)
    errors: list[str] = []

    def stream(i: int) -> None:
        try:
            os.sched_setaffinity(0, {cpus[i]})  # 0: this thread (Linux)
            words = np.ones(share, dtype=np.uint8).view(np.uint64)[:: LINE_BYTES // 8]
            words.sum()  # warm: page faults and TLB out of the measured passes
        except (OSError, MemoryError) as exc:
            errors.append(f"core {cpus[i]}: {exc}")
            words = None
        barrier.wait()
        if words is None:
            return
        began[i] = time.perf_counter()
        deadline = began[i] + seconds
        passes = 0
        while True:
            words.sum()
            passes += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        bytes_read[i] = passes * share
        ended[i] = now

    threads = [
        threading.Thread(target=stream, args=(i,), name=f"coshare-probe-{c}", daemon=True)
        for i, c in enumerate(cpus)
    ]
    for thread in threads:
        thread.start()
    at_s = clock()
    barrier.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise ProbeError(
            f"the probe cannot stream on cores {format_cpu_list(cpus)}: " + "; ".join(errors)
        )
    elapsed = max(ended) - min(began)
    return Measurement(cpus, sum(bytes_read) / elapsed / 1e9, elapsed, at_s, size_mib, METHOD)


class ProbeFiles:
    """The probe's files in a node's state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.baseline_path = state_dir / "membw-baseline.json"
        self.last_path = state_dir / "membw-last.json"
        self.lock_path = state_dir / "probe.lock"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the node's probe lock (waits for a probe already running)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def baseline(self) -> Baseline | None:
        """The recorded baseline, ``None`` when ``--init`` never ran.

        Raises:
            ProbeError: an unreadable file.
        """
        try:
            text = self.baseline_path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ProbeError(f"cannot read {self.baseline_path}: {exc.strerror}") from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ProbeError(
                f"the membw baseline {self.baseline_path} is not JSON; {INIT_HINT}"
            ) from exc
        return Baseline.from_dict(data, str(self.baseline_path))

    def write(self, path: Path, data: object) -> None:
        """Write a JSON file atomically, readable by all (the publishers read the facts)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
        tmp.chmod(0o644)
        os.replace(tmp, path)

    def last(self) -> ProbeResult | None:
        """The last recorded probe, ``None`` when there is none or it cannot be read."""
        try:
            return ProbeResult.from_dict(json.loads(self.last_path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def probe(
    files: ProbeFiles,
    allowed: Sequence[int],
    cpus: Sequence[int] | None,
    *,
    init: bool = False,
    size_mib: int = 0,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.time,
) -> tuple[ProbeResult, Baseline | None]:
    """Probe ``cpus`` (default: every allowed core) and record the result; with ``init``,
    first record the idle baseline (:func:`coshare.node.bandwidth.init_sets`).

    Returns:
        the probe compared with the baseline, and the baseline ``init`` recorded (else None).

    Raises:
        ProbeError: cores outside ``allowed``; no baseline (and not ``init``); a core the
            probe cannot run on.
    """
    chosen = check_cpus(cpus if cpus is not None else allowed, allowed)
    size = array_mib(size_mib, llc_bytes())
    with files.lock():
        made = None
        if init:
            measured = {s: measure(s, size, seconds, clock) for s in init_sets(allowed, chosen)}
            made = Baseline({s: m.gbps for s, m in measured.items()}, clock(), METHOD, size)
            files.write(files.baseline_path, made.to_dict())
            baseline: Baseline | None = made
            reached = measured[chosen]
        else:
            baseline = files.baseline()
            if baseline is None:
                raise ProbeError(
                    f"no membw baseline for this node ({files.baseline_path}); {INIT_HINT}"
                )
            reached = measure(chosen, size, seconds, clock)
        assert baseline is not None
        reference = baseline_for(baseline, chosen)
        result = ProbeResult(reached, reference.gbps, reference.source)
        try:
            files.write(files.last_path, result.to_dict())
        except OSError as exc:
            raise ProbeError(
                f"the probe ran ({reached.gbps:.2f} GB/s on cores "
                f"{format_cpu_list(chosen)}) but cannot be recorded in "
                f"{files.last_path}: {exc.strerror}"
            ) from exc
    return result, made


def trial_probe(
    files: ProbeFiles,
    allowed: Sequence[int],
    cpus: Sequence[int],
    *,
    size_mib: int = 0,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.time,
) -> ProbeResult:
    """Probe ``cpus`` for a trial co-run (poncos section 7, step 7: the cores of the frozen
    old job), compared with the baseline; not recorded as the node's last probe (what it
    measures holds only while the old job is frozen).

    Raises:
        ProbeError: cores outside ``allowed``, or no baseline.
    """
    chosen = check_cpus(cpus, allowed)
    size = array_mib(size_mib, llc_bytes())
    with files.lock():
        baseline = files.baseline()
        if baseline is None:
            raise ProbeError(
                f"no membw baseline for this node ({files.baseline_path}); {INIT_HINT}"
            )
        reached = measure(chosen, size, seconds, clock)
        reference = baseline_for(baseline, chosen)
    return ProbeResult(reached, reference.gbps, reference.source)
