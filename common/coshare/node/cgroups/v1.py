"""cgroup v1: one hierarchy per controller, a job's group is one directory in each.

Kernel facts this relies on (Documentation/admin-guide/cgroup-v1/):

- cpuset: a new group starts with empty ``cpuset.cpus`` and ``cpuset.mems`` and refuses
  tasks until both are set (cpusets.rst 1.4), so every group coshare makes, its parent
  included, gets them written, copied from the group above when the job is not pinned.
- memory: ``memory.limit_in_bytes``; ``memory.memsw.limit_in_bytes`` (only with swap
  accounting) must be written after it and never below it. v1 has no ``memory.oom.group``:
  on overrun the OOM killer would take *one* process, and the rest of the job (a batch
  script waiting for it, say) would carry on, even end "successfully", before the watchdog
  kills it. So coshare turns the OOM killer off in a job's group (``memory.oom_control``
  = 1, memory.rst section 10): a task at the limit then sleeps in the group's OOM wait queue,
  ``under_oom`` says 1, and the watchdog kills the whole group at once. ``oom_kill`` (4.13+)
  still counts kills where the kernel's killer did run.
- cpuacct: ``cpuacct.usage`` is the group's CPU time in nanoseconds, its descendants and
  exited tasks included (cpuacct.rst); the node samples it for each job's load.
- freezer: ``freezer.state`` goes FREEZING then FROZEN (freezer-subsystem.rst). A frozen
  task cannot die, so a kill is freeze, SIGKILL each task, thaw (as BenchExec does). A task
  asleep in the OOM wait queue never reaches FROZEN (seen on Linux 6.18: the group stays
  FREEZING), so a group under OOM is killed by signalling until it is empty; SIGKILL wakes
  those tasks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from coshare.errors import CgroupError, CgroupUnavailable, JobSpecError, JobStateError
from coshare.node.cgroups.base import (
    FEATURES,
    Feature,
    check_parent,
    read_keyed,
    read_pids,
    read_text,
    remove_dirs,
    signal_all,
    subtree,
    wait_until,
    write_text,
)
from coshare.node.load import parse_cpuacct_usage
from coshare.node.spec import format_cpu_list, group_name, job_of_group, parse_cpu_list

MIB = 1024 * 1024

#: The hierarchies a job's group lives in, in the order a process joins them: the freezer
#: first, so that a kill racing with ``add`` finds the process. ``cpuacct`` (CPU time, for
#: the node's load facts; often co-mounted as ``cpu,cpuacct`` with a ``cpuacct`` link) is
#: used where it is mounted and asked for by no limit.
CONTROLLERS = ("freezer", "cpuset", "memory", "cpuacct")
_FEATURE_CONTROLLER: dict[Feature, str] = {
    "cpuset": "cpuset",
    "memory": "memory",
    "freeze": "freezer",
}


class V1Group:
    """One job's group: a directory in each available hierarchy (see :class:`~.base.JobGroup`)."""

    def __init__(self, job: str, dirs: dict[str, Path], timeout_s: float) -> None:
        self.job = job
        self.dirs = dirs
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"V1Group({self.job!r}, {sorted(self.dirs)})"

    def directories(self) -> tuple[Path, ...]:
        return tuple(self.dirs.values())

    def procs_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self.dirs.values())

    def exists(self) -> bool:
        return any(d.is_dir() for d in self.dirs.values())

    def add(self, pid: int) -> None:
        for procs in self.procs_files():
            write_text(procs, str(pid))

    def pids(self) -> tuple[int, ...]:
        found: set[int] = set()
        for directory in self.dirs.values():
            for group in subtree(directory):
                found.update(read_pids(group / "cgroup.procs"))
        return tuple(sorted(found))

    def task_ids(self) -> tuple[int, ...]:
        found: set[int] = set()
        for directory in self.dirs.values():
            for group in subtree(directory):
                found.update(read_pids(group / "tasks"))
        return tuple(sorted(found))

    def _freezer(self) -> Path:
        if "freezer" not in self.dirs:
            raise CgroupUnavailable(
                "freeze", "no v1 freezer hierarchy is mounted, so jobs cannot be frozen"
            )
        return self.dirs["freezer"] / "freezer.state"

    def freeze(self) -> None:
        state = self._freezer()
        write_text(state, "FROZEN")
        wait_until(lambda: read_text(state).strip() == "FROZEN", self.timeout_s, "freeze", state)

    def thaw(self) -> None:
        state = self._freezer()
        write_text(state, "THAWED")
        wait_until(lambda: read_text(state).strip() == "THAWED", self.timeout_s, "thaw", state)

    def is_frozen(self) -> bool:
        return read_text(self._freezer()).strip() in ("FROZEN", "FREEZING")

    def kill(self) -> None:
        if not self.exists():
            return
        if "freezer" in self.dirs and self.dirs["freezer"].is_dir() and not self.is_under_oom():
            # Frozen, nothing can fork between reading the pids and signalling them.
            self.freeze()
            signal_all(self.pids())
            self.thaw()
        # Without a freezer, or for what the freeze missed: signal until the group is empty.
        first = next(iter(self.dirs.values()))
        wait_until(self._signal_rest, self.timeout_s, "kill the processes of", first)

    def _signal_rest(self) -> bool:
        left = self.pids()
        signal_all(left)
        return not left

    def remove(self) -> None:
        if not self.exists():
            return
        self.kill()
        for directory in self.dirs.values():
            remove_dirs(directory, self.timeout_s)

    def oom_kills(self) -> int:
        if "memory" not in self.dirs:
            return 0
        return read_keyed(self.dirs["memory"] / "memory.oom_control").get("oom_kill", 0)

    def is_under_oom(self) -> bool:
        if "memory" not in self.dirs:
            return False
        return read_keyed(self.dirs["memory"] / "memory.oom_control").get("under_oom", 0) == 1

    def memory_usage_bytes(self) -> int | None:
        if "memory" not in self.dirs:
            return None
        return int(read_text(self.dirs["memory"] / "memory.usage_in_bytes"))

    def cpus_text(self) -> str:
        if "cpuset" not in self.dirs:
            return ""
        return read_text(self.dirs["cpuset"] / "cpuset.cpus").strip()

    def set_cpus(self, cpus: tuple[int, ...]) -> None:
        if not cpus:
            raise JobSpecError(f"job {self.job}: a cpuset holds at least one cpu")
        if "cpuset" not in self.dirs:
            raise CgroupUnavailable("cpuset", f"no cgroup v1 cpuset hierarchy for {self!r}")
        write_text(self.dirs["cpuset"] / "cpuset.cpus", format_cpu_list(cpus))

    def cpu_usage_s(self) -> float:
        if "cpuacct" not in self.dirs:
            raise CgroupUnavailable(
                "cpu_usage",
                "no cgroup v1 cpuacct hierarchy is mounted, so CPU time per job is not accounted",
            )
        path = self.dirs["cpuacct"] / "cpuacct.usage"
        try:
            return parse_cpuacct_usage(read_text(path))
        except ValueError as exc:
            raise CgroupError(str(path), "read", str(exc)) from exc


class V1Cgroups:
    """The v1 hierarchies mounted as ``root/<controller>`` (see :class:`~.base.Cgroups`)."""

    version: Literal["v1", "v2"] = "v1"

    def __init__(self, root: Path, parent: str = "coshare", timeout_s: float = 10.0) -> None:
        self.root = root
        self.parent = check_parent(parent)
        self.timeout_s = timeout_s

    def hierarchies(self) -> list[str]:
        """The controllers of :data:`CONTROLLERS` that have a v1 hierarchy under ``root``."""
        return [c for c in CONTROLLERS if (self.root / c / "cgroup.procs").exists()]

    def missing(self, features: Iterable[Feature]) -> list[str]:
        return [problem for _, problem in self._problems(features)]

    def _problems(self, features: Iterable[Feature]) -> list[tuple[Feature, str]]:
        have = self.hierarchies()
        out: list[tuple[Feature, str]] = []
        for feature in features:
            controller = _FEATURE_CONTROLLER[feature]
            if controller not in have:
                mounted = ", ".join(have) or "none of " + ", ".join(CONTROLLERS)
                out.append(
                    (
                        feature,
                        f"no cgroup v1 {controller} hierarchy at {self.root / controller} "
                        f"(mounted there: {mounted}); mount one with "
                        f"'mount -t cgroup -o {controller} cgroup {self.root / controller}'",
                    )
                )
        return out

    def require(self, features: Iterable[Feature]) -> None:
        problems = self._problems(features)
        if problems:
            raise CgroupUnavailable(*problems[0])

    def _ensure_dir(self, controller: str, directory: Path) -> None:
        """Create ``directory`` (and missing parents) in a hierarchy, ready to take tasks."""
        base = self.root / controller
        missing: list[Path] = []
        probe = directory
        while probe != base and not probe.is_dir():
            missing.append(probe)
            probe = probe.parent
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:
                pass
            except OSError as exc:
                raise CgroupError(str(path), "create", exc.strerror or str(exc)) from exc
            if controller == "cpuset":
                # An empty cpuset takes no tasks (and has no children with CPUs): inherit.
                for name in ("cpuset.mems", "cpuset.cpus"):
                    if not read_text(path / name).strip():
                        write_text(path / name, read_text(path.parent / name).strip())

    def create(self, job: str, cpus: tuple[int, ...], memory_mib: int | None) -> V1Group:
        wanted: list[Feature] = []
        if cpus:
            wanted.append("cpuset")
        if memory_mib is not None:
            wanted.append("memory")
        self.require(wanted)
        group = self.open(job)
        if not group.dirs:
            raise CgroupUnavailable(
                "cgroups", f"no cgroup v1 hierarchy of {', '.join(CONTROLLERS)} under {self.root}"
            )
        if group.exists() and group.pids():
            raise JobStateError(f"job {job} already has a group with processes: {group}")
        for controller, directory in group.dirs.items():
            self._ensure_dir(controller, directory)
        if cpus:
            write_text(group.dirs["cpuset"] / "cpuset.cpus", format_cpu_list(cpus))
        if memory_mib is not None:
            memory = group.dirs["memory"]
            write_text(memory / "memory.limit_in_bytes", str(memory_mib * MIB))
            if (memory / "memory.memsw.limit_in_bytes").exists():
                write_text(memory / "memory.memsw.limit_in_bytes", str(memory_mib * MIB))
            if (memory / "memory.oom_control").exists():
                # The whole job stops at its limit; the watchdog kills it as a whole.
                write_text(memory / "memory.oom_control", "1")
        return group

    def open(self, job: str) -> V1Group:
        name = group_name(job)
        dirs = {c: self.root / c / self.parent / name for c in self.hierarchies()}
        return V1Group(job, dirs, self.timeout_s)

    def jobs(self) -> list[str]:
        found: set[str] = set()
        for controller in self.hierarchies():
            parent = self.root / controller / self.parent
            if parent.is_dir():
                found.update(
                    j for p in parent.iterdir() if p.is_dir() and (j := job_of_group(p.name))
                )
        return sorted(found)

    def parent_directories(self) -> tuple[Path, ...]:
        return tuple(self.root / c / self.parent for c in self.hierarchies())

    def allowed_cpus(self) -> tuple[int, ...]:
        if "cpuset" not in self.hierarchies():
            return tuple(sorted(os.sched_getaffinity(0)))
        group = self.root / "cpuset" / self.parent
        while not (group / "cpuset.effective_cpus").exists() and group != self.root / "cpuset":
            group = group.parent
        name = (
            "cpuset.effective_cpus" if (group / "cpuset.effective_cpus").exists() else "cpuset.cpus"
        )
        return parse_cpu_list(read_text(group / name))

    def job_of_proc(self, proc_cgroup: str) -> str | None:
        have = self.hierarchies()
        if not have:
            return None
        key = have[0]
        prefix = f"/{self.parent}/"
        for line in proc_cgroup.splitlines():
            _, controllers, path = ([*line.split(":", 2), "", ""])[:3]
            if key in controllers.split(",") and path.startswith(prefix):
                return job_of_group(path[len(prefix) :].split("/")[0])
        return None

    def procs_files_of(self, proc_cgroup: str) -> tuple[Path, ...]:
        out = []
        for controller in self.hierarchies():
            for line in proc_cgroup.splitlines():
                _, controllers, path = ([*line.split(":", 2), "", ""])[:3]
                if controller in controllers.split(",") and path.startswith("/"):
                    out.append(self.root / controller / path.lstrip("/") / "cgroup.procs")
                    break
        return tuple(out)

    def describe(self) -> list[str]:
        lines = [f"cgroup v1 at {self.root}: hierarchies {', '.join(self.hierarchies()) or 'none'}"]
        lines += [f"missing: {m}" for m in self.missing(FEATURES)]
        unified = self.root / "unified" / "cgroup.controllers"
        if unified.exists():
            ctrls = read_text(unified).split()
            lines.append(
                f"also a cgroup v2 mount at {unified.parent} (controllers: "
                f"{', '.join(ctrls) or 'none'}); coshare uses v1 here"
            )
        return lines
