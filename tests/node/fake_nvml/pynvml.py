"""A stand-in for NVML's Python bindings (nvidia-ml-py's ``pynvml``) with one GPU that fails
the way a lost GPU does, for the error paths no GPU on this machine can produce.

The names, signatures and the error class follow nvidia-ml-py: ``NVMLError`` carries the NVML
return code in ``value`` and ``NVMLError(NVML_ERROR_GPU_IS_LOST)`` is an instance of the
``NVMLError_GpuIsLost`` subclass. ``$FAKE_NVML`` picks the failure of
``nvmlDeviceGetComputeRunningProcesses``: ``lost`` (raises, the default) or ``hang`` (never
returns, as a GPU that stopped answering can).

``nvmlDeviceGetPcieThroughput`` (the copy bandwidth of Wu & Hong, section III-B3) answers
``$FAKE_NVML_PCIE_KBPS`` (``<tx>,<rx>`` in KB/s, as NVML reports them) and raises
``NVML_ERROR_NOT_SUPPORTED`` when it is not set (a GPU without the counter).
"""

from __future__ import annotations

import os
import threading
from typing import ClassVar

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
_STRINGS = {NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_GPU_IS_LOST: "GPU is lost"}


class NVMLError(Exception):
    """An NVML call failed; ``value`` is its return code."""

    _classes: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int) -> NVMLError:
        chosen = NVMLError._classes.get(value, cls) if cls is NVMLError else cls
        err = Exception.__new__(chosen)
        err.value = value
        return err

    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(value)

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"Unknown Error {self.value}")


class NVMLError_GpuIsLost(NVMLError):
    pass


NVMLError._classes[NVML_ERROR_GPU_IS_LOST] = NVMLError_GpuIsLost


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> object:
    return ("handle", index)


def nvmlDeviceGetUUID(handle: object) -> str:
    return "GPU-00000000-fake-0000-0000-000000000000"


def nvmlDeviceGetComputeRunningProcesses(handle: object) -> list[object]:
    if os.environ.get("FAKE_NVML") == "hang":
        threading.Event().wait()
    raise NVMLError(NVML_ERROR_GPU_IS_LOST)


def nvmlDeviceGetGraphicsRunningProcesses(handle: object) -> list[object]:
    return []


def nvmlDeviceGetPcieThroughput(handle: object, counter: int) -> int:
    given = os.environ.get("FAKE_NVML_PCIE_KBPS")
    if given is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    tx, rx = (int(v) for v in given.split(","))
    return {NVML_PCIE_UTIL_TX_BYTES: tx, NVML_PCIE_UTIL_RX_BYTES: rx}[counter]
