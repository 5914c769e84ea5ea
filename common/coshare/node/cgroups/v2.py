"""cgroup v2 (the unified hierarchy): one directory per job under ``root/parent``.

Kernel facts this relies on (Documentation/admin-guide/cgroup-v2.rst):

- A controller is usable in a group only when every ancestor lists it in
  ``cgroup.subtree_control`` ("Top-down Constraint"), and a non-root group that hands
  controllers to its children may hold no processes itself ("No Internal Process
  Constraint"); coshare's parent group therefore never holds processes.
- ``cgroup.freeze`` (5.2+) freezes a subtree; the state is reached when ``cgroup.events``
  says ``frozen 1``. ``cgroup.kill`` (5.14+) SIGKILLs a subtree atomically, new forks
  included; older kernels get freeze, signal each process, thaw.
- ``memory.oom.group = 1`` makes the OOM killer take the whole group, not one process, which
  is "killed as a whole" by the kernel itself; ``memory.events`` counts ``oom_kill``.
- ``memory.swap.max = 0`` keeps a job from escaping its limit into swap.
- ``cpu.stat`` (``usage_usec``) exists in every group whether or not the cpu controller is
  enabled; the node samples it for each job's load.
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
from coshare.node.load import parse_cpu_stat
from coshare.node.spec import format_cpu_list, group_name, job_of_group, parse_cpu_list

MIB = 1024 * 1024


class V2Group:
    """One job's group in the unified hierarchy (see :class:`~.base.JobGroup`)."""

    def __init__(self, job: str, directory: Path, timeout_s: float) -> None:
        self.job = job
        self.directory = directory
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"V2Group({self.job!r}, {str(self.directory)!r})"

    def directories(self) -> tuple[Path, ...]:
        return (self.directory,)

    def procs_files(self) -> tuple[Path, ...]:
        return (self.directory / "cgroup.procs",)

    def exists(self) -> bool:
        return self.directory.is_dir()

    def add(self, pid: int) -> None:
        write_text(self.directory / "cgroup.procs", str(pid))

    def pids(self) -> tuple[int, ...]:
        found: set[int] = set()
        for group in subtree(self.directory):
            found.update(read_pids(group / "cgroup.procs"))
        return tuple(sorted(found))

    def task_ids(self) -> tuple[int, ...]:
        found: set[int] = set()
        for group in subtree(self.directory):
            found.update(read_pids(group / "cgroup.threads"))
        return tuple(sorted(found))

    def _events(self) -> dict[str, int]:
        return read_keyed(self.directory / "cgroup.events")

    def _require_freeze(self) -> Path:
        path = self.directory / "cgroup.freeze"
        if not path.exists():
            raise CgroupUnavailable(
                "freeze", f"{path} is missing (freezing a v2 group needs Linux 5.2 or newer)"
            )
        return path

    def freeze(self) -> None:
        write_text(self._require_freeze(), "1")
        wait_until(
            lambda: self._events().get("frozen") == 1, self.timeout_s, "freeze", self.directory
        )

    def thaw(self) -> None:
        write_text(self._require_freeze(), "0")
        wait_until(
            lambda: self._events().get("frozen") != 1, self.timeout_s, "thaw", self.directory
        )

    def is_frozen(self) -> bool:
        return self._events().get("frozen") == 1

    def kill(self) -> None:
        if not self.exists():
            return
        kill_file = self.directory / "cgroup.kill"
        if kill_file.exists():
            write_text(kill_file, "1")
        elif (self.directory / "cgroup.freeze").exists():
            # Freeze first so that nothing forks between reading the pids and signalling them;
            # in v2 a fatal signal reaches frozen tasks, but thaw anyway for older kernels.
            self.freeze()
            signal_all(self.pids())
            self.thaw()
        wait_until(self._signal_rest, self.timeout_s, "kill the processes of", self.directory)

    def _signal_rest(self) -> bool:
        left = self.pids()
        signal_all(left)
        return not left

    def remove(self) -> None:
        if not self.exists():
            return
        self.kill()
        remove_dirs(self.directory, self.timeout_s)

    def oom_kills(self) -> int:
        return read_keyed(self.directory / "memory.events").get("oom_kill", 0)

    def is_under_oom(self) -> bool:
        # v2 has no OOM wait queue for coshare's groups: memory.oom.group kills the whole group.
        return False

    def memory_usage_bytes(self) -> int | None:
        path = self.directory / "memory.current"
        return int(read_text(path)) if path.exists() else None

    def cpus_text(self) -> str:
        path = self.directory / "cpuset.cpus.effective"
        return read_text(path).strip() if path.exists() else ""

    def set_cpus(self, cpus: tuple[int, ...]) -> None:
        if not cpus:
            raise JobSpecError(f"job {self.job}: a cpuset holds at least one cpu")
        path = self.directory / "cpuset.cpus"
        if not path.exists():
            raise CgroupUnavailable(
                "cpuset",
                f"{path} does not exist (the cpuset controller is not enabled for this group)",
            )
        write_text(path, format_cpu_list(cpus))

    def cpu_usage_s(self) -> float:
        path = self.directory / "cpu.stat"
        if not path.exists() and self.exists():
            raise CgroupUnavailable(
                "cpu_usage", f"{path} is missing (cgroup v2 has it in every group since Linux 4.15)"
            )
        try:
            return parse_cpu_stat(read_text(path))
        except ValueError as exc:
            raise CgroupError(str(path), "read", str(exc)) from exc


class V2Cgroups:
    """The unified hierarchy mounted at ``root`` (see :class:`~.base.Cgroups`)."""

    version: Literal["v1", "v2"] = "v2"

    def __init__(self, root: Path, parent: str = "coshare", timeout_s: float = 10.0) -> None:
        self.root = root
        self.parent = check_parent(parent)
        self.timeout_s = timeout_s

    @property
    def parent_dir(self) -> Path:
        return self.root / self.parent

    def controllers(self) -> set[str]:
        """Controllers the kernel offers at the root (``cgroup.controllers``)."""
        return set(read_text(self.root / "cgroup.controllers").split())

    def missing(self, features: Iterable[Feature]) -> list[str]:
        return [problem for _, problem in self._problems(features)]

    def _problems(self, features: Iterable[Feature]) -> list[tuple[Feature, str]]:
        out: list[tuple[Feature, str]] = []
        offered = self.controllers()
        listed = ", ".join(sorted(offered)) or "nothing"
        for feature in features:
            if feature in ("cpuset", "memory") and feature not in offered:
                out.append(
                    (
                        feature,
                        f"the {feature} controller is not available in cgroup v2 at {self.root} "
                        f"(its cgroup.controllers lists: {listed}); it is bound to a v1 hierarchy "
                        "or not built into the kernel",
                    )
                )
            if feature == "freeze" and not self._has_freeze():
                out.append(
                    (
                        feature,
                        f"cgroup.freeze is missing under {self.root} (freezing a v2 group needs "
                        "Linux 5.2 or newer)",
                    )
                )
        return out

    def _has_freeze(self) -> bool:
        # The root group has no cgroup.freeze: look at coshare's own group, made if need be.
        try:
            self.parent_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return (self.parent_dir / "cgroup.freeze").exists()

    def require(self, features: Iterable[Feature]) -> None:
        problems = self._problems(features)
        if problems:
            raise CgroupUnavailable(*problems[0])

    def _ensure_parent(self, controllers: list[str]) -> None:
        """Create the parent group and hand ``controllers`` down to it and its children."""
        try:
            self.parent_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CgroupError(str(self.parent_dir), "create", exc.strerror or str(exc)) from exc
        chain = [self.root]
        for part in self.parent.split("/"):
            chain.append(chain[-1] / part)
        for group in chain:
            control = group / "cgroup.subtree_control"
            enabled = set(read_text(control).split())
            for controller in controllers:
                if controller not in enabled:
                    # EBUSY here means the group holds processes itself (the "no internal
                    # process" rule); the error names the group.
                    write_text(control, f"+{controller}")

    def create(self, job: str, cpus: tuple[int, ...], memory_mib: int | None) -> V2Group:
        wanted: list[Feature] = []
        if cpus:
            wanted.append("cpuset")
        if memory_mib is not None:
            wanted.append("memory")
        self.require(wanted)
        self._ensure_parent(list(wanted))
        group = self.open(job)
        if group.exists() and group.pids():
            raise JobStateError(f"job {job} already has a group with processes: {group.directory}")
        try:
            group.directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(str(group.directory), "create", exc.strerror or str(exc)) from exc
        if cpus:
            write_text(group.directory / "cpuset.cpus", format_cpu_list(cpus))
        if memory_mib is not None:
            write_text(group.directory / "memory.max", str(memory_mib * MIB))
            # Without swap accounting the file is absent and there is no swap to escape into.
            if (group.directory / "memory.swap.max").exists():
                write_text(group.directory / "memory.swap.max", "0")
            if (group.directory / "memory.oom.group").exists():
                write_text(group.directory / "memory.oom.group", "1")
        return group

    def open(self, job: str) -> V2Group:
        return V2Group(job, self.parent_dir / group_name(job), self.timeout_s)

    def jobs(self) -> list[str]:
        if not self.parent_dir.is_dir():
            return []
        names = [job_of_group(p.name) for p in self.parent_dir.iterdir() if p.is_dir()]
        return sorted(n for n in names if n is not None)

    def parent_directories(self) -> tuple[Path, ...]:
        return (self.parent_dir,)

    def allowed_cpus(self) -> tuple[int, ...]:
        for group in (self.parent_dir, self.root):
            path = group / "cpuset.cpus.effective"
            if path.exists():
                return parse_cpu_list(read_text(path))
        return tuple(range(_online_cpus()))

    def job_of_proc(self, proc_cgroup: str) -> str | None:
        prefix = f"/{self.parent}/"
        for line in proc_cgroup.splitlines():
            if line.startswith("0::") and line[3:].startswith(prefix):
                return job_of_group(line[3 + len(prefix) :].split("/")[0])
        return None

    def procs_files_of(self, proc_cgroup: str) -> tuple[Path, ...]:
        for line in proc_cgroup.splitlines():
            if line.startswith("0::/"):
                return (self.root / line[4:] / "cgroup.procs",)
        return ()

    def describe(self) -> list[str]:
        lines = [f"cgroup v2 at {self.root}: controllers {', '.join(sorted(self.controllers()))}"]
        lines += [f"missing: {m}" for m in self.missing(FEATURES)]
        kill = (self.parent_dir / "cgroup.kill").exists()
        lines.append("kill: cgroup.kill" if kill else "kill: freeze and signal each process")
        return lines


def _online_cpus() -> int:
    return len(os.sched_getaffinity(0))
