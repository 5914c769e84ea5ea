"""A faithful fake of the NVML calls coshare.node.gpus makes (nvidia-ml-py's names and
signatures), for nodes whose GPUs are whole or sliced by MIG, with the answers NVML's
documentation gives:

- ``nvmlDeviceGetMigMode`` returns ``[current, pending]`` (1 = enabled), and raises
  ``NVML_ERROR_NOT_SUPPORTED`` on a GPU without MIG (before Ampere);
- ``nvmlDeviceGetMaxMigDeviceCount`` is the number of instance slots (7 on A100/H100);
- ``nvmlDeviceGetMigDeviceHandleByIndex`` raises ``NVML_ERROR_NOT_FOUND`` for a slot with no
  instance;
- ``nvmlDeviceGetAttributes`` gives ``multiprocessorCount``, ``gpuInstanceSliceCount`` and
  ``memorySizeMB`` of an instance (an A100-80GB 1g.10gb: 14 SMs, 1 slice, 9856 MB);
- UUIDs are ``GPU-...`` for a GPU and ``MIG-...`` for an instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__({3: "Not Supported", 6: "Not Found"}.get(value, f"Error {value}"))


@dataclass
class Instance:
    slices: int
    memory_mib: int
    sms: int


@dataclass
class Gpu:
    name: str
    memory_mib: int
    sms: int
    mig: list[Instance | None] | None = None  # None: MIG off; else one entry per slot
    mig_capable: bool = True
    uuid: str = ""
    fail_name: bool = False


@dataclass
class FakeNvml:
    """A module-like object: ``discover(FakeNvml([...]))``."""

    gpus: list[Gpu]
    NVMLError: type[NVMLError] = NVMLError
    NVML_ERROR_NOT_SUPPORTED: int = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND: int = NVML_ERROR_NOT_FOUND
    calls: list[str] = field(default_factory=list)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return ("gpu", index)

    def _gpu(self, handle: Any) -> Gpu:
        return self.gpus[handle[1]]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if handle[0] == "mig":
            return f"MIG-{handle[1]:04d}{handle[2]:04d}-0000-0000-0000-000000000000"
        return self._gpu(handle).uuid or f"GPU-{handle[1]:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu = self._gpu(handle)
        if gpu.fail_name:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.memory_mib << 20, used=0, free=gpu.memory_mib << 20)

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        if handle[0] == "mig":
            inst = gpu.mig[handle[2]]  # type: ignore[index]
            assert inst is not None
            return SimpleNamespace(
                multiprocessorCount=inst.sms,
                gpuInstanceSliceCount=inst.slices,
                memorySizeMB=inst.memory_mib,
            )
        return SimpleNamespace(
            multiprocessorCount=gpu.sms, gpuInstanceSliceCount=0, memorySizeMB=gpu.memory_mib
        )

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        on = int(gpu.mig is not None)
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        return len(gpu.mig) if gpu.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        gpu = self._gpu(handle)
        if gpu.mig is None or index >= len(gpu.mig) or gpu.mig[index] is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], index)


def a100_80gb(mig: list[Instance | None] | None = None) -> Gpu:
    """An A100-SXM4-80GB: 108 SMs, 80 GB (81920 MiB as NVML reports it)."""
    return Gpu("NVIDIA A100-SXM4-80GB", 81920, 108, mig)


def h100_80gb(mig: list[Instance | None] | None = None) -> Gpu:
    """An H100-SXM5-80GB: 132 SMs."""
    return Gpu("NVIDIA H100 80GB HBM3", 81559, 132, mig)
