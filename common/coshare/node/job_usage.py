"""What a node measures of a job at its end, for profiles learned from normal runs
(:mod:`coshare.profiles.job_end`, :mod:`coshare.profiles.learning`).

Called at the job's end on the node (Slurm's Epilog), *before* its group is removed:

- CPU time: the job's cgroup (v1 ``cpuacct.usage``, v2 ``cpu.stat`` ``usage_usec``;
  :meth:`coshare.node.cgroups.base.JobGroup.cpu_usage_s`);
- run time: from the start the node recorded (``state_dir/jobs/job-<id>.started``) to now;
- alone: whether another coshare job had a group on this node at any time of its run (the
  ``.shared`` mark each start leaves on every job present);
- memory bandwidth: the job's resctrl group's MBM bytes (``mbm_total_bytes`` of every
  ``mon_data/mon_L3_*``) over its run time, where it has a group and the kernel counts;
- IPC: not measured per job: the node helpers keep no hardware counters running for a job
  (``coshare profile ways`` counts them under ``perf stat`` for its own runs); said as such.

Every value not measured says why, naming the path looked at; nothing is pretended.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import CgroupError, CgroupUnavailable, JobSpecError, Unsupported
from coshare.node import lifecycle
from coshare.profiles.job_end import NodeEnd, end_to_json

#: Why IPC is not in a job-end record (the node helpers run no per-job counters).
NO_IPC = (
    "unsupported: per-job IPC: the node helpers keep no hardware counters for a job "
    "(perf stat -e instructions,cycles runs only under coshare profile ways)"
)


def measure_end(
    config: NodeConfig,
    job: str,
    node: str,
    program: str,
    scale: int,
    nodes: int,
    now_s: float | None = None,
) -> NodeEnd | None:
    """The job-end record of ``job`` on this node (``None``: coshare started no group for
    it here, or did not record its start)."""
    store = lifecycle.node_store(config)
    try:
        record = store.read(job)
    except JobSpecError:
        return None
    started = store.started_at(job)
    if record is None or started is None:
        return None
    ended = time.time() if now_s is None else now_s
    unsupported: dict[str, str] = {"ipc": NO_IPC}
    cpu: float | None = None
    try:
        cpu = record.group(config.kill_timeout_s).cpu_usage_s()
    except (CgroupUnavailable, CgroupError) as exc:
        unsupported["cpu_s"] = f"unsupported: job CPU time: {exc} ({record.cgroup_root})"
    membw: float | None = None
    resctrl = lifecycle.node_resctrl(config)
    if lifecycle.has_resctrl_group(record):
        try:
            seconds = max(ended - started, 1e-3)
            membw = resctrl.mbm_total_bytes(job) / seconds / 1e9
        except (Unsupported, CgroupError, OSError) as exc:
            unsupported["membw_gbps"] = str(exc)
    else:
        unsupported["membw_gbps"] = str(
            Unsupported(
                "resctrl MBM (memory bandwidth monitoring)",
                str(resctrl.path(job) / "mon_data"),
                "the job has no resctrl group here (no LLC ways allocated)",
            )
        )
    alone = not store.was_shared(job) and store.jobs() == [job]
    return NodeEnd(
        job,
        node,
        program,
        scale,
        nodes,
        started,
        max(ended, started),
        alone,
        cpu,
        None,
        membw,
        unsupported,
    )


def write_end(directory: Path, end: NodeEnd) -> Path:
    """Write the record into the spool (atomically; readable by the planner's account)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / end.file_name
    temporary = directory / f".{end.file_name}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(end_to_json(end), sort_keys=True) + "\n")
    temporary.chmod(0o644)
    os.replace(temporary, target)
    return target
