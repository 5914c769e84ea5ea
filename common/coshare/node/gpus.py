"""The node's GPUs as NVML sees them: each whole GPU, and each MIG instance of a GPU in MIG
mode, with what the planner needs to treat it as a device of its own.

A GPU in MIG mode is sliced into isolated instances (NVIDIA's MIG user guide): each instance
has its own memory and SMs, and is what a job gets (HTCondor's GPU discovery and Slurm's gres
``AutoDetect=nvml`` list the instances, not the parent). So an instance is listed as a device
of its own size, id ``<parent index>:<instance index>`` (the id coshare has always given
MIG devices), and the parent is listed as ``mig`` (never a device to share whole). Each entry
carries the UUID the scheduler's own discovery names it by (``GPU-...``, ``MIG-...``), so a
plan's device is matched to the device the job gets.

Nothing is pretended: an instance whose profile or SM count coshare does not know (a slice
count other than MIG's 1, 2, 3, 4 or 7; no SMs; no memory) is listed as ``unsupported``
with the reason, and left out of planning; the others are listed as usual.

The NVML calls are those of ``nvidia-ml-py`` (the ``nvml`` extra): ``nvmlDeviceGetCount``,
``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetName``,
``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetAttributes`` (``multiprocessorCount``,
``gpuInstanceSliceCount``, ``memorySizeMB``), ``nvmlDeviceGetMigMode``,
``nvmlDeviceGetMaxMigDeviceCount`` and ``nvmlDeviceGetMigDeviceHandleByIndex``.

Pure but for the ``nvml`` module it is handed (tests hand it a faithful fake).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

#: The GPU-instance slice counts of MIG profiles (``1g`` .. ``7g``; NVIDIA's MIG user guide).
MIG_SLICES = frozenset({1, 2, 3, 4, 7})
#: Bounds on what NVML reports, past which a device is not planned (``unsupported``).
MAX_SMS = 1024
MAX_GPU_MEMORY_MIB = 1 << 22  # 4 TiB

#: NVML's current MIG mode "enabled" (``NVML_DEVICE_MIG_ENABLE``).
MIG_ENABLED = 1

Kind = Literal["gpu", "mig", "mig-parent"]
Status = Literal["ok", "unsupported"]


@dataclass(frozen=True)
class GpuDevice:
    """One GPU or MIG instance of the node.

    Attributes:
        id: the device id a plan names: the GPU's index (``0``), or ``<parent>:<instance>``
            for a MIG instance (``0:1``).
        uuid: NVML's UUID (``GPU-...``, or ``MIG-...`` for an instance).
        kind: ``gpu`` (a whole GPU, planned as one device), ``mig`` (an instance, planned as
            one device of its own size) or ``mig-parent`` (a GPU in MIG mode: never planned
            as a device; its instances are).
        name: the product name NVML reports.
        memory_mib: the device's memory.
        sms: its streaming multiprocessors (``None`` when NVML does not say).
        parent: a MIG instance's GPU index; ``None`` otherwise.
        profile: a MIG instance's profile (``1g.10gb``); ``None`` otherwise.
        status: ``ok``, or ``unsupported`` (left out of planning: ``reason`` says why).
        reason: why a device is unsupported; empty otherwise.
    """

    id: str
    uuid: str
    kind: Kind
    name: str
    memory_mib: int
    sms: int | None
    parent: str | None = None
    profile: str | None = None
    status: Status = "ok"
    reason: str = ""

    @property
    def planned(self) -> bool:
        """Whether the planner may place jobs on it as a device."""
        return self.status == "ok" and self.kind != "mig-parent"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def discover(nvml: Any) -> list[GpuDevice]:
    """Every GPU and MIG instance NVML lists (``nvml``: the ``pynvml`` module, initialized).

    Raises:
        nvml.NVMLError: NVML failed on the device count or a GPU's handle (the caller says
            NVML cannot list the GPUs); a failure on one GPU's details marks that GPU
            ``unsupported`` instead.
    """
    out: list[GpuDevice] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        out += _gpu(nvml, str(index), handle)
    return out


def _gpu(nvml: Any, index: str, handle: Any) -> list[GpuDevice]:
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    try:
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20
        sms = _sms(nvml, handle)
        mig = _mig_enabled(nvml, handle)
    except nvml.NVMLError as exc:
        return [
            GpuDevice(
                index,
                uuid,
                "gpu",
                "",
                0,
                None,
                status="unsupported",
                reason=f"NVML cannot describe it: {exc}",
            )
        ]
    if not mig:
        return [_checked(GpuDevice(index, uuid, "gpu", name, memory_mib, sms))]
    out = [
        GpuDevice(
            index,
            uuid,
            "mig-parent",
            name,
            memory_mib,
            sms,
            reason="in MIG mode: its instances are the devices",
        )
    ]
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            instance = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_FOUND", None):
                continue  # an empty slot: no instance was created there
            out.append(
                GpuDevice(
                    f"{index}:{slot}",
                    "",
                    "mig",
                    name,
                    0,
                    None,
                    parent=index,
                    status="unsupported",
                    reason=f"NVML cannot open this MIG slot: {exc}",
                )
            )
            continue
        out.append(_instance(nvml, index, slot, instance, name))
    return out


def _instance(nvml: Any, parent: str, slot: int, handle: Any, name: str) -> GpuDevice:
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    device_id = f"{parent}:{slot}"
    try:
        attributes = nvml.nvmlDeviceGetAttributes(handle)
    except nvml.NVMLError as exc:
        return GpuDevice(
            device_id,
            uuid,
            "mig",
            name,
            0,
            None,
            parent=parent,
            status="unsupported",
            reason=f"NVML cannot describe it: {exc}",
        )
    slices = int(attributes.gpuInstanceSliceCount)
    memory_mib = int(attributes.memorySizeMB)
    sms = int(attributes.multiprocessorCount)
    profile = f"{slices}g.{math.ceil(memory_mib / 1024)}gb"
    device = GpuDevice(device_id, uuid, "mig", name, memory_mib, sms, parent, profile)
    if slices not in MIG_SLICES:
        return _unsupported(
            device,
            f"MIG profile {profile}: {slices} GPU-instance slices is no "
            f"MIG profile coshare knows (known: {sorted(MIG_SLICES)})",
        )
    return _checked(device)


def _checked(device: GpuDevice) -> GpuDevice:
    """``device``, or the same marked unsupported when NVML's numbers are out of bounds."""
    if device.sms is not None and not 1 <= device.sms <= MAX_SMS:
        return _unsupported(device, f"SM count {device.sms} (allowed: 1..{MAX_SMS})")
    if not 1 <= device.memory_mib <= MAX_GPU_MEMORY_MIB:
        return _unsupported(
            device, f"memory {device.memory_mib} MiB (allowed: 1..{MAX_GPU_MEMORY_MIB})"
        )
    return device


def _unsupported(device: GpuDevice, reason: str) -> GpuDevice:
    return GpuDevice(
        device.id,
        device.uuid,
        device.kind,
        device.name,
        device.memory_mib,
        device.sms,
        device.parent,
        device.profile,
        "unsupported",
        reason,
    )


def _sms(nvml: Any, handle: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except nvml.NVMLError:
        return None  # a GPU whose driver does not report it: its size is still its memory


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", None):
            return False  # a GPU without MIG
        raise
    return int(current) == MIG_ENABLED


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: What a UUID NVML gives may hold, to travel in a reply and an environment variable.
_UUID = re.compile(r"(GPU|MIG)-[A-Za-z0-9/-]{1,100}")


def visible_devices(devices: Sequence[str], found: Sequence[GpuDevice]) -> str:
    """The job's devices as CUDA must be told them: each planned id as its NVML UUID
    (``CUDA_VISIBLE_DEVICES`` takes a MIG instance only by its ``MIG-`` UUID, and a UUID
    names the same GPU whatever the enumeration order), joined by commas.

    Raises:
        ValueError: an id names no device NVML lists here, a GPU in MIG mode (planned by its
            instances only), a device NVML lists as unsupported, or one whose UUID is not
            plain text; the message says which and what NVML lists.
    """
    by_id = {d.id: d for d in found}
    out: list[str] = []
    for device in devices:
        gpu = by_id.get(device)
        if gpu is None:
            listed = ", ".join(d.id for d in found if d.planned) or "none"
            raise ValueError(f"device {device} is not on this node (NVML lists {listed})")
        if gpu.kind == "mig-parent":
            raise ValueError(f"device {device} is a GPU in MIG mode: its instances are planned")
        if gpu.status != "ok":
            raise ValueError(f"device {device} is unsupported here: {gpu.reason}")
        if not _UUID.fullmatch(gpu.uuid):
            raise ValueError(f"device {device}: NVML's UUID {gpu.uuid!r} is not plain text")
        out.append(gpu.uuid)
    return ",".join(out)
