"""cgroups for coshare's jobs: one group per job, its CPUs, memory limit, freeze, kill.

:func:`open_cgroups` detects what the kernel offers under ``root`` and returns the driver of
that version (:mod:`.v2` for the unified hierarchy, :mod:`.v1` for per-controller
hierarchies). Both satisfy :class:`~.base.Cgroups` and :class:`~.base.JobGroup`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from coshare.errors import CgroupUnavailable
from coshare.node.cgroups.base import FEATURES, Cgroups, Feature, JobGroup
from coshare.node.cgroups.v1 import CONTROLLERS, V1Cgroups, V1Group
from coshare.node.cgroups.v2 import V2Cgroups, V2Group

__all__ = [
    "FEATURES",
    "Cgroups",
    "Feature",
    "JobGroup",
    "V1Cgroups",
    "V1Group",
    "V2Cgroups",
    "V2Group",
    "detect_version",
    "open_cgroups",
]


def detect_version(root: Path) -> Literal["v1", "v2"]:
    """``v2`` when ``root`` is a cgroup2 mount, ``v1`` when it holds v1 hierarchies.

    Raises:
        CgroupUnavailable: when it is neither, saying what was looked for.
    """
    if (root / "cgroup.controllers").exists():
        return "v2"
    if any((root / c / "cgroup.procs").exists() for c in CONTROLLERS):
        return "v1"
    raise CgroupUnavailable(
        "cgroups",
        f"no cgroups at {root}: neither a cgroup2 mount ({root}/cgroup.controllers) nor v1 "
        f"hierarchies ({', '.join(f'{root}/{c}' for c in CONTROLLERS)})",
    )


def open_cgroups(
    root: Path,
    version: Literal["auto", "v1", "v2"] = "auto",
    parent: str = "coshare",
    timeout_s: float = 10.0,
) -> Cgroups:
    """The cgroup driver for ``root``.

    Args:
        root: the cgroup2 mount, or the directory holding the v1 mounts.
        version: ``auto`` detects (v2 when ``root`` is a cgroup2 mount).
        parent: coshare's group under which each job gets its own.
        timeout_s: how long freezing, killing and removing may take.

    Raises:
        CgroupUnavailable: no cgroups of the requested version at ``root``.
    """
    chosen = detect_version(root) if version == "auto" else version
    if chosen == "v2":
        if not (root / "cgroup.controllers").exists():
            raise CgroupUnavailable(
                "cgroups", f"{root} is not a cgroup v2 mount (no cgroup.controllers)"
            )
        return V2Cgroups(root, parent, timeout_s)
    return V1Cgroups(root, parent, timeout_s)
