"""Hard GPU limits through NVIDIA MPS: each job's pinned device memory and its share of the
SMs, from its placement.

Where the node runs an MPS control daemon (``node.gpu_limits: mps``), every CUDA client of a
job is started with NVIDIA's two MPS limits (CUDA MPS documentation, "environment
variables")::

    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=4096M,1=4096M"   per device the client sees
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25                 its share of each device's SMs

so a job that allocates past its declared device memory gets an allocation error instead
of hurting its neighbours. The ordinals are the client's own (``0`` is the first device of
its ``CUDA_VISIBLE_DEVICES``); the percentage is the job's declared device threads over the
device's (a site that declares SMs as device threads gives the SM share). The node daemon
says in its START and JOIN replies what to set (:func:`mps_fields`), and ``coshare-launch``
sets it (standard library only: it builds the two values from the reply's numbers).

Without a running control daemon (no ``control`` pipe in ``node.mps_pipe_dir``) nothing is set
and the NVML watchdog (``node.device_memory: nvml``) stays the backstop; ``coshare node
check`` says which is in force. Pure but for the one ``stat`` of the pipe.
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
from pathlib import Path

#: The file the MPS control daemon creates in its pipe directory.
CONTROL_PIPE = "control"


def pipe_dir_of(configured: str | None) -> Path:
    """The MPS pipe directory: ``node.mps_pipe_dir``, else ``CUDA_MPS_PIPE_DIRECTORY``, else
    NVIDIA's default (``nvidia-mps`` in the temporary directory)."""
    if configured:
        return Path(configured)
    given = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    return Path(given) if given else Path(tempfile.gettempdir()) / "nvidia-mps"


def mps_running(pipe_dir: str | None) -> tuple[bool, str]:
    """Whether an MPS control daemon listens in the pipe directory (:func:`pipe_dir_of`), and
    what was seen there."""
    path = pipe_dir_of(pipe_dir) / CONTROL_PIPE
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return False, f"no MPS control pipe at {path} ({exc.strerror or exc})"
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False, f"{path} is no MPS control pipe"
    return True, f"MPS control pipe at {path}"


def gpu_limit_in_force(gpu_limits: str, pipe_dir: str | None) -> tuple[str | None, str]:
    """Which GPU limit is in force on a node configured with ``node.gpu_limits`` and
    ``node.mps_pipe_dir``, and what was seen: ``None`` where MPS is not configured (nothing to
    say), ``mps`` where its control daemon runs, ``watchdog`` where it is down (the node falls
    back to the NVML watchdog)."""
    if gpu_limits != "mps":
        return None, "node.gpu_limits is not mps"
    running, seen = mps_running(pipe_dir)
    return ("mps" if running else "watchdog"), seen


def thread_percent(device_threads: int | None, device_size: int | None) -> int | None:
    """A job's share of a device's SMs, in whole percent (1..100), from its declared threads
    over the device's; ``None`` when either is unknown."""
    if not device_threads or not device_size or device_size <= 0:
        return None
    return max(1, min(100, math.ceil(100 * device_threads / device_size)))


def mps_fields(
    devices: tuple[str, ...],
    device_memory_mib: int | None,
    device_threads: int | None,
    sizes: dict[str, int],
) -> str:
    """The reply fields that tell ``coshare-launch`` the MPS limits of a job on ``devices``
    (`` mps_memory_mib=N mps_percent=P``; a field is left out when its value is unknown, and
    both when the job has no device)."""
    if not devices:
        return ""
    fields = ""
    if device_memory_mib:
        fields += f" mps_memory_mib={device_memory_mib}"
    known = [sizes[d] for d in devices if d in sizes]
    percent = thread_percent(device_threads, min(known) if known else None)
    if percent is not None:
        fields += f" mps_percent={percent}"
    return fields
