"""Device memory per process, and PCIe throughput per GPU, from NVML (``nvidia-ml-py``, the
``nvml`` extra).

Imported by the watchdog only when ``node.device_memory: nvml`` is configured; the sampler
tries it on every node for the GPU jobs' copy bandwidth (Wu & Hong section III-B3) and, where
NVML cannot start, publishes none. Device ids are matched by
index (``0``) and by UUID (``GPU-...``), as the scheduler may name either. NVML reports pids
in the host's pid namespace, which is where the watchdog runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from coshare.errors import NodeError


def start_nvml() -> Any:
    """The ``pynvml`` module, initialized.

    Raises:
        NodeError: ``nvidia-ml-py`` is not installed, or NVML cannot start (no driver, no
            GPU), naming the library it looked for.
    """
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError as exc:
        raise NodeError(
            "NVML needs its bindings: pip install 'coshare[nvml]' (nvidia-ml-py)"
        ) from exc
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NodeError(
            f"unsupported: NVML cannot start (libnvidia-ml.so.1; is the NVIDIA "
            f"driver loaded?): {exc}"
        ) from exc
    return nvml


class NvmlMemory:
    """Per-process device memory of every NVIDIA GPU of the node.

    Raises:
        NodeError: when ``nvidia-ml-py`` is not installed or NVML cannot start (no driver).
    """

    def __init__(self) -> None:
        try:
            self._nvml: Any = importlib.import_module("pynvml")
        except ImportError as exc:
            raise NodeError(
                "device memory watching needs NVML bindings: pip install 'coshare[nvml]' "
                "(nvidia-ml-py)"
            ) from exc
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise NodeError(f"NVML cannot start (is the NVIDIA driver loaded?): {exc}") from exc
        self._handles: list[tuple[tuple[str, ...], Any]] = []
        for index in range(self._nvml.nvmlDeviceGetCount()):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = self._nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            self._handles.append(((str(index), uuid), handle))

    def devices(self) -> list[tuple[str, ...]]:
        """The ids of each GPU: (index, UUID)."""
        return [ids for ids, _ in self._handles]

    def canonical(self, device: str) -> str:
        """The index of a GPU named by index or UUID (unknown ids are returned as they are)."""
        for ids, _ in self._handles:
            if device in ids:
                return ids[0]
        return device

    def usage(self) -> Mapping[tuple[str, int], int]:
        """Bytes used per (GPU index, pid).

        Raises:
            NodeError: NVML failed for a GPU (lost, reset, driver gone), naming the GPU.
        """
        out: dict[tuple[str, int], int] = {}
        for ids, handle in self._handles:
            try:
                procs = list(self._nvml.nvmlDeviceGetComputeRunningProcesses(handle))
                procs += list(self._nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
            except self._nvml.NVMLError as exc:
                raise NodeError(
                    f"NVML cannot list the processes of GPU {ids[0]} ({ids[1]}): {exc}"
                ) from exc
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                if used is None:  # not readable (e.g. MIG without privileges): cannot judge
                    continue
                key = (ids[0], int(proc.pid))
                out[key] = out.get(key, 0) + int(used)
        return out

    def pcie_mbps(self) -> Mapping[str, float]:
        """PCIe throughput of each GPU now, TX + RX, in MB/s (NVML reports KB/s over a 20 ms
        sample: ``nvmlDeviceGetPcieThroughput``), by GPU index.

        Raises:
            NodeError: NVML failed for a GPU or lacks the counter, naming the GPU.
        """
        out: dict[str, float] = {}
        for ids, handle in self._handles:
            try:
                tx = self._nvml.nvmlDeviceGetPcieThroughput(
                    handle, self._nvml.NVML_PCIE_UTIL_TX_BYTES
                )
                rx = self._nvml.nvmlDeviceGetPcieThroughput(
                    handle, self._nvml.NVML_PCIE_UTIL_RX_BYTES
                )
            except (self._nvml.NVMLError, AttributeError) as exc:
                raise NodeError(
                    f"NVML cannot read the PCIe throughput of GPU {ids[0]} ({ids[1]}): {exc}"
                ) from exc
            out[ids[0]] = (int(tx) + int(rx)) / 1000.0
        return out

    def close(self) -> None:
        """Shut NVML down."""
        self._nvml.nvmlShutdown()
