"""The scheduler's names for a node's GPUs matched to NVML's devices, so the device a plan
names is the device the job gets.

Each scheduler names GPUs its own way:

- HTCondor's ``condor_gpu_discovery`` lists them in ``DetectedGPUs`` (and a slot's
  ``AssignedGPUs``) as a comma-and-space separated string: by default (``-short-uuid``) as
  ``GPU-`` and the first 8 hex digits of the UUID (``"GPU-c4a646d7, GPU-6a96bd13"``), with
  ``-uuid`` as the whole UUID, with ``-by-index`` as ``CUDA0, CUDA1``; a MIG instance as
  ``MIG-`` and its UUID (HTCondor manual, ``condor_gpu_discovery``).
- Slurm's ``slurmd -G`` prints one ``Gres`` line per device it found
  (``Gres Name=gpu Type=a100 Count=1 Index=0 ... File=/dev/nvidia0 ...``); with
  ``AutoDetect=nvml`` a MIG instance's line ends in ``UniqueId=MIG-<uuid>`` (gres.conf(5)).
  A job's ``gres_detail`` (``gpu:a100:1(IDX:0)``) names the device by its place in that list.

NVML names each device by UUID (``GPU-...``, ``MIG-...``) and by the id ``coshare node gpus``
gives it (its index, ``<parent>:<instance>`` for a MIG instance; :mod:`coshare.node.gpus`).
:func:`match_names` is the one rule for both schedulers: by UUID when the scheduler gives one
(a unique prefix, as HTCondor's short form is), by index otherwise (``CUDA1``, ``1``, ``0:3``),
and a note wherever they disagree (the scheduler's position of a device is not NVML's index),
where a name matches nothing, more than one device, or a GPU in MIG mode (its instances are
the devices), and where two names take one device.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coshare.node.gpus import GpuDevice

#: A UUID as NVML and the schedulers spell it, whole or cut short (HTCondor's ``GPU-c4a646d7``).
_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){0,3}(?:-[0-9A-Fa-f]{12})?")
#: An index as a scheduler gives it: ``3``, HTCondor's ``CUDA3``, a MIG instance's ``0:3``.
_INDEX = re.compile(r"(?:CUDA)?([0-9]{1,4}(?::[0-9]{1,4})?)")
#: One ``key=value`` item of a ``slurmd -G`` line.
_ITEM = re.compile(r"([A-Za-z]+)=(\S*)")
#: Longest name kept (the rest of a name from a scheduler is cut in notes).
_SHOWN = 80


@dataclass(frozen=True)
class Named:
    """A device as its scheduler names it.

    Attributes:
        name: the scheduler's name (``GPU-c4a646d7``, ``CUDA1``, ``1``, ``MIG-...``).
        position: its index in the scheduler's own list, where that is also known (the IDX a
            Slurm job names it by); compared with NVML's index when matched by UUID.
    """

    name: str
    position: str | None = None


@dataclass(frozen=True)
class Matched:
    """The scheduler's names matched to NVML's devices.

    Attributes:
        devices: each matched name and the NVML device it names.
        notes: one line per name that matched nothing or not as given, naming it.
    """

    devices: dict[str, GpuDevice]
    notes: tuple[str, ...]

    def plan_ids(self) -> dict[str, str]:
        """Each matched name and the device id a plan names it by."""
        return {name: device.id for name, device in self.devices.items()}


def match_names(named: Sequence[Named], gpus: Sequence[GpuDevice]) -> Matched:
    """Match the scheduler's names to NVML's devices (see the module docstring)."""
    devices: dict[str, GpuDevice] = {}
    notes: list[str] = []
    taken: dict[str, str] = {}  # NVML id -> the name that took it
    for entry in named:
        name = entry.name.strip()
        shown = name[:_SHOWN]
        found, how, problem = _one(name, gpus)
        if found is None:
            notes.append(f"GPU {shown!r}: {problem}")
            continue
        if found.kind == "mig-parent":
            notes.append(
                f"GPU {shown!r} is NVML's GPU {found.id}, in MIG mode: its instances are the "
                "devices, never the GPU whole"
            )
            continue
        if found.id in taken:
            notes.append(
                f"GPU {shown!r} names NVML's device {found.id}, which {taken[found.id]!r} "
                "names already: left out"
            )
            continue
        if how == "uuid" and entry.position is not None and entry.position != found.id:
            notes.append(
                f"GPU {shown!r} is the scheduler's device {entry.position} but NVML's "
                f"{found.id} ({found.uuid}): matched by UUID"
            )
        if found.status != "ok":
            notes.append(f"GPU {shown!r} is NVML's {found.id}, not planned: {found.reason}")
        taken[found.id] = shown
        devices[name] = found
    return Matched(devices, tuple(notes))


def _one(name: str, gpus: Sequence[GpuDevice]) -> tuple[GpuDevice | None, str, str]:
    """The NVML device ``name`` names, how (``uuid`` or ``index``), or why none."""
    if _UUID.fullmatch(name):
        want = name.lower()
        hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(want)]
        if len(hits) == 1:
            return hits[0], "uuid", ""
        if not hits:
            return None, "uuid", "no device NVML lists has this UUID"
        ids = ", ".join(g.id for g in hits)
        return None, "uuid", f"names more than one NVML device ({ids}): give the whole UUID"
    index = _INDEX.fullmatch(name)
    if index:
        hits = [g for g in gpus if g.id == index.group(1)]
        if hits:
            return hits[0], "index", ""
        return None, "index", f"NVML lists no device {index.group(1)}"
    return None, "", "is neither a UUID (GPU-..., MIG-...) nor an index (0, CUDA0, 0:1)"


def condor_gpu_names(value: str, *, positions: bool = True) -> list[Named]:
    """The names of ``condor_gpu_discovery``'s ``DetectedGPUs`` or a slot's ``AssignedGPUs``
    (a ClassAd string: ``"GPU-c4a646d7, GPU-6a96bd13"``; ``0``: none). With ``positions``
    (``DetectedGPUs``: the node's whole list) a GPU's place in the list is its position, which
    is CUDA's order and so NVML's index where both sort by PCI bus; a slot's ``AssignedGPUs``
    is part of the list: pass ``positions=False``."""
    text = value.strip().strip('"').strip()
    if text in ("", "0"):
        return []
    names = [part.strip() for part in text.split(",") if part.strip()]
    return [
        Named(n, str(i) if positions and not n.startswith("MIG-") else None)
        for i, n in enumerate(names)
    ]


def slurm_gres_names(text: str, gres_name: str = "gpu") -> list[Named]:
    """The names of the devices of one GRES (``gpu``) in ``slurmd -G``'s output: a MIG
    instance's ``UniqueId`` where the line has one, else its place in the list (the IDX a
    job's ``gres_detail`` names it by). Lines of other GRES, and other lines, are skipped."""
    out: list[Named] = []
    for line in text.splitlines():
        _, marker, rest = line.partition("Gres ")
        if not marker:
            continue
        items = dict(_ITEM.findall(rest))
        if items.get("Name") != gres_name:
            continue
        unique = items.get("UniqueId", "")
        if unique:
            out.append(Named(unique, None))
            continue
        count = items.get("Count", "1")
        for _ in range(int(count) if count.isdigit() and 0 < int(count) <= 64 else 1):
            position = str(len(out))
            out.append(Named(position, position))
    return out
