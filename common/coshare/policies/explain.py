"""Why one job waits, and what would make it fit: the explainer behind ``coshare plan
SNAPSHOT --explain JOB``, ``coshare condor explain JOB`` and ``coshare slurm explain JOB``
(HTCondor's ``condor_q -better-analyze`` is the model).

One pure function, :func:`explain`, fed by a snapshot and a policy (the adapters only read
the snapshot). It plans the snapshot, then looks at every node and device the way the plan
left them (what runs, what is placed and not started, and what this cycle placed before the
job), and names, for each, the *first* limit that keeps the job out, in this order::

    device memory, device threads    the device's size, then what is free on it
    cores, host memory               free on the device's node (all the job's processes)
    reservation                      the device is held back for an aged job
    policy                           the exclusive policy takes only idle devices and nodes
    device count (gang width)        fewer devices fit on the node than the job needs

Then what would make it fit: the job's own values to lower when nothing in the cluster can
hold it ("no device has 20000 MiB: lower CoshareDeviceMemory"), else the fewest jobs whose end
frees enough on a device ("fits phi03/1 once job 102.0 ends"). Node facts are not limits of
the policies yet, so they are not checked here; a policy that uses them adds its check to
:data:`DEVICE_LIMITS`' order.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from coshare.errors import InputError
from coshare.model import Job, Plan, Snapshot, Unplaced, milli_to_cores
from coshare.policies.base import Policy
from coshare.ports import Rejected, Waiting
from coshare.schema import job_to_dict

State = Literal["placed", "waiting", "refused", "held_back", "planned", "running"]
"""Where the job stands: placed by this plan; waiting (not placed, with a reason); refused
(its annotations are unusable); held back by the scheduler (begin time, dependency);
planned (placed by an earlier cycle, not started); running."""

#: The limits in the order they are checked (the first one that excludes a device is named).
DEVICE_LIMITS = (
    "device memory",
    "device threads",
    "cores",
    "host memory",
    "reservation",
    "policy",
    "device count",
)

#: How a user sets each value of a snapshot's job, by field; an adapter passes its own
#: (HTCondor: ``CoshareDeviceMemory``, ``request_cpus``; Slurm: ``device-memory``, ``--mem``).
SNAPSHOT_NAMES: Mapping[str, str] = {
    "device_memory_mib": "device_memory_mib",
    "device_threads": "device_threads",
    "device_count": "device_count",
    "cores": "cores",
    "memory_mib": "memory_mib",
    "processes": "processes",
}

#: Remedies listed at most (the best first).
MAX_REMEDIES = 3

#: The reason of a ``reserved`` job names the device held back for it, before these words.
_RESERVED_TAIL = " takes no new jobs until this one fits there"


@dataclass(frozen=True)
class Check:
    """One node or device considered for the job.

    Attributes:
        node: the node's name.
        device: the device id; ``None`` for a verdict on the whole node.
        limit: the first limit that keeps the job out (one of :data:`DEVICE_LIMITS`), or
            ``None`` when the job fits there now.
        detail: the numbers, for a person.
    """

    node: str
    device: str | None
    limit: str | None
    detail: str


@dataclass(frozen=True)
class Explanation:
    """Why one job is where it is.

    Attributes:
        job: the job id.
        state: see :data:`State`.
        reason: one line: where it goes, or why it waits (the plan's reason), for the job's
            own record and ``show``.
        code: the plan's code for a job it did not place (``no_room``, ...), else ``None``.
        policy: the policy that planned.
        job_fields: the job's values as parsed (snapshot fields); empty when refused.
        checks: every node and device considered, with its first excluding limit.
        remedies: what would make it fit, best first.
        ahead: the jobs submitted after this one that this cycle placed where it could have
            gone, each with why the policy let it go first.
    """

    job: str
    state: State
    reason: str
    code: str | None = None
    policy: str = ""
    job_fields: Mapping[str, object] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    remedies: tuple[str, ...] = ()
    ahead: tuple[str, ...] = ()


#: Why a policy may place a later job where an earlier one waits: its order, by policy name.
ORDER_RULES: Mapping[str, str] = {
    "exclusive": "exclusive takes jobs in scheduler order (priority, then age) and gives each "
    "the first idle device it fits, passing over a job that fits nowhere now",
    "random": "random takes jobs in a seeded random order, not in submit order",
    "knapsack": "knapsack fills each device with the set of jobs that uses it best (device "
    "memory and threads), not in submit order",
    "sharepack": "sharepack fills each device with the set of jobs that uses it best and keeps "
    "room for the shapes to come, not in submit order",
    "bestfit": "bestfit takes jobs in scheduler order and passes over a job that fits nowhere now",
    "fgd": "fgd places each job where it fragments the cluster least, passing over a job that "
    "fits nowhere now",
}
#: Later jobs named at most in :attr:`Explanation.ahead`.
MAX_AHEAD = 3


@dataclass
class _Holder:
    """What one job holds on one node (and devices there)."""

    job: str
    what: str  # "running", "placed, not started", "placed this cycle"
    devices: tuple[str, ...]
    device_memory_mib: int
    device_threads: int
    cpu_milli: int
    memory_mib: int


@dataclass
class _Free:
    """Free resources of the cluster as the plan leaves them, and who holds what."""

    cpu: dict[str, int]
    mem: dict[str, int]
    dev_mem: dict[tuple[str, str], int]
    dev_thr: dict[tuple[str, str], int]
    on_node: dict[str, list[_Holder]]


def find_job(job_id: str, ids: Sequence[str]) -> str | None:
    """The id as the snapshot spells it: ``12`` finds HTCondor's ``12.0``."""
    if job_id in ids:
        return job_id
    whole = f"{job_id}.0"
    return whole if whole in ids else None


def explain(
    snapshot: Snapshot,
    policy: Policy,
    job_id: str,
    *,
    strict_threads: bool = True,
    plan: Plan | None = None,
    rejected: Sequence[Rejected] = (),
    waiting: Sequence[Waiting] = (),
    names: Mapping[str, str] = SNAPSHOT_NAMES,
) -> Explanation:
    """Explain where job ``job_id`` stands and why.

    Args:
        snapshot: what the scheduler holds (the Source's snapshot, or a file's).
        policy: the policy the cycle uses.
        job_id: the job (``12`` finds ``12.0``).
        strict_threads: whether free device threads are a limit (``policy.threads``).
        plan: the policy's plan of ``snapshot``, when the caller has made it already.
        rejected: the read's refused jobs (their reason is all there is to say).
        waiting: the read's jobs the scheduler itself holds back.
        names: how users set each job value, for the remedies.

    Raises:
        InputError: no such job in the snapshot, refused or waiting.
    """
    for r in rejected:
        if find_job(job_id, [r.job]) is not None:
            return Explanation(r.job, "refused", r.reason, "invalid", policy.name)
    for w in waiting:
        if find_job(job_id, [w.job]) is not None:
            return Explanation(w.job, "held_back", w.reason, None, policy.name)
    pending = {j.id: j for j in snapshot.pending}
    found = find_job(job_id, list(pending))
    if found is None:
        return _not_pending(snapshot, job_id, policy.name)
    job = pending[found]
    plan = plan if plan is not None else policy.plan(snapshot)
    fields = job_to_dict(job)
    for a in plan.assignments:
        if a.job == job.id:
            where = f"{a.node}/{','.join(a.devices)}" if a.devices else a.node
            return Explanation(
                job.id, "placed", f"placed on {where} by this cycle", None, plan.policy, fields
            )
    unplaced = next(u for u in plan.unplaced if u.job == job.id)
    free = _free_after(snapshot, plan, pending)
    reserved = _reserved(plan.unplaced, job.id)
    exclusive = plan.policy == "exclusive"
    if job.needs_device:
        checks = _device_checks(snapshot, job, free, reserved, strict_threads, exclusive)
    else:
        checks = _node_checks(snapshot, job, free, exclusive)
    remedies = _remedies(snapshot, job, free, checks, strict_threads, names, unplaced)
    ahead = _went_ahead(job, checks, free, pending, plan.policy)
    return Explanation(
        job.id,
        "waiting",
        unplaced.reason,
        unplaced.code,
        plan.policy,
        fields,
        tuple(checks),
        tuple(remedies[:MAX_REMEDIES]),
        ahead,
    )


def _went_ahead(
    job: Job, checks: Sequence[Check], free: _Free, pending: Mapping[str, Job], policy: str
) -> tuple[str, ...]:
    """The later jobs this cycle placed on a node or device the job was kept out of, and why
    the policy let them go first (the question a user asks when a newer job starts ahead)."""
    out: list[str] = []
    for c in checks:
        for h in free.on_node.get(c.node, []):
            later = pending.get(h.job)
            if (
                h.what != "placed this cycle"
                or later is None
                or later.submit_time_s <= job.submit_time_s
                or (c.device is not None and c.device not in h.devices)
            ):
                continue
            where = f"{c.node}/{c.device}" if c.device else c.node
            line = (
                f"{h.job} (submitted {later.submit_time_s - job.submit_time_s:g} s later) "
                f"was placed on {where} this cycle"
            )
            if line not in out:
                out.append(line)
    if not out:
        return ()
    rule = ORDER_RULES.get(policy, f"{policy} does not place jobs in submit order")
    shown = out[:MAX_AHEAD] + ([f"and {len(out) - MAX_AHEAD} more"] if len(out) > MAX_AHEAD else [])
    return (*shown, f"why: {rule}; a job that waited policy.age_limit_s is placed first")


def _not_pending(snapshot: Snapshot, job_id: str, policy: str) -> Explanation:
    holds = [r for r in snapshot.running if find_job(job_id, [r.id]) is not None]
    if not holds:
        raise InputError(
            f"job {job_id} is not an annotated job waiting, placed or running here "
            "(unknown, not annotated, or ended)"
        )
    where = ", ".join(f"{r.node}/{','.join(r.devices)}" if r.devices else r.node for r in holds)
    if holds[0].state == "planned":
        return Explanation(
            holds[0].id,
            "planned",
            f"placed on {where}, not started yet (it holds its place until cycle.replan_after_s)",
            None,
            policy,
        )
    return Explanation(holds[0].id, "running", f"running on {where}", None, policy)


def _free_after(snapshot: Snapshot, plan: Plan, pending: Mapping[str, Job]) -> _Free:
    free = _Free(
        cpu={n.name: n.cpu_milli for n in snapshot.nodes},
        mem={n.name: n.memory_mib for n in snapshot.nodes},
        dev_mem={(n.name, d.id): d.memory_mib for n in snapshot.nodes for d in n.devices},
        dev_thr={(n.name, d.id): d.threads for n in snapshot.nodes for d in n.devices},
        on_node=defaultdict(list),
    )
    holders = [
        (
            r.node,
            _Holder(
                r.id,
                "running" if r.state == "running" else "placed, not started",
                r.devices,
                r.device_memory_mib,
                r.device_threads,
                r.cpu_milli,
                r.memory_mib,
            ),
        )
        for r in snapshot.running
    ]
    for a in plan.assignments:
        j = pending.get(a.job)
        if j is not None:
            processes = a.processes or j.processes
            holders.append(
                (
                    a.node,
                    _Holder(
                        a.job,
                        "placed this cycle",
                        a.devices,
                        j.device_memory_mib,
                        j.device_threads,
                        j.cpu_milli * processes,
                        j.memory_mib * processes,
                    ),
                )
            )
    for node, h in holders:
        if node not in free.cpu:
            continue
        free.on_node[node].append(h)
        free.cpu[node] -= h.cpu_milli
        free.mem[node] -= h.memory_mib
        for d in h.devices:
            if (node, d) in free.dev_mem:
                free.dev_mem[(node, d)] -= h.device_memory_mib
                free.dev_thr[(node, d)] -= h.device_threads
    return free


def _reserved(unplaced: Sequence[Unplaced], job_id: str) -> dict[str, str]:
    """Devices (``node/device``) held back for aged jobs other than ``job_id``, by job."""
    out: dict[str, str] = {}
    for u in unplaced:
        if u.code == "reserved" and u.job != job_id and u.reason.endswith(_RESERVED_TAIL):
            label = u.reason[: -len(_RESERVED_TAIL)].split()[-1]
            out[label] = u.job
    return out


def _holders_text(holders: Sequence[_Holder], device: str | None) -> str:
    mine = [h for h in holders if device is None or device in h.devices]
    if not mine:
        return ""
    shown = ", ".join(f"{h.job} {h.what}" for h in mine[:5])
    more = f" and {len(mine) - 5} more" if len(mine) > 5 else ""
    return f" (held by {shown}{more})"


def _cores(milli: int) -> str:
    return str(milli_to_cores(max(milli, 0)))


def _host_check(job: Job, node: str, free: _Free) -> tuple[str, str] | None:
    per = f" ({job.processes} processes)" if job.processes > 1 else ""
    if free.cpu[node] < job.total_cpu_milli:
        return (
            "cores",
            f"needs {_cores(job.total_cpu_milli)} cores{per}, "
            f"{_cores(free.cpu[node])} free{_holders_text(free.on_node[node], None)}",
        )
    if free.mem[node] < job.total_memory_mib:
        return (
            "host memory",
            f"needs {job.total_memory_mib} MiB{per}, "
            f"{max(free.mem[node], 0)} MiB free"
            f"{_holders_text(free.on_node[node], None)}",
        )
    return None


def _device_checks(
    snapshot: Snapshot,
    job: Job,
    free: _Free,
    reserved: Mapping[str, str],
    strict: bool,
    exclusive: bool,
) -> list[Check]:
    checks: list[Check] = []
    m, t = job.device_memory_mib, job.device_threads
    for node in snapshot.nodes:
        host = _host_check(job, node.name, free)
        fitting = 0
        for d in node.devices:
            key = (node.name, d.id)
            held = _holders_text(free.on_node[node.name], d.id)
            label = f"{node.name}/{d.id}"
            verdict: tuple[str, str] | None
            if m > d.memory_mib:
                verdict = ("device memory", f"needs {m} MiB, the device has {d.memory_mib}")
            elif t > d.threads:
                verdict = ("device threads", f"needs {t} threads, the device has {d.threads}")
            elif free.dev_mem[key] < m:
                verdict = (
                    "device memory",
                    f"needs {m} MiB, {max(free.dev_mem[key], 0)} free{held}",
                )
            elif strict and free.dev_thr[key] < t:
                verdict = (
                    "device threads",
                    f"needs {t} threads, {max(free.dev_thr[key], 0)} "
                    f"free{held} (strict thread limit)",
                )
            elif host is not None:
                verdict = host
            elif label in reserved:
                verdict = (
                    "reservation",
                    f"held back for job {reserved[label]}, which has "
                    "waited past policy.age_limit_s",
                )
            elif exclusive and (held or any(not h.devices for h in free.on_node[node.name])):
                verdict = ("policy", f"the exclusive policy takes only idle devices{held}")
            else:
                verdict = None
                fitting += 1
            limit, detail = verdict if verdict is not None else (None, "fits now")
            checks.append(Check(node.name, d.id, limit, detail))
        if not node.devices:
            checks.append(Check(node.name, None, "device count", "the node has no devices"))
        elif job.device_count > 1 and fitting < job.device_count:
            checks.append(
                Check(
                    node.name,
                    None,
                    "device count",
                    f"needs {job.device_count} devices on one node, {fitting} fit here",
                )
            )
    return checks


def _node_checks(snapshot: Snapshot, job: Job, free: _Free, exclusive: bool) -> list[Check]:
    checks = []
    for node in snapshot.nodes:
        verdict = _host_check(job, node.name, free)
        if verdict is None and exclusive and free.on_node[node.name]:
            verdict = (
                "policy",
                "the exclusive policy gives a CPU job a node to itself"
                f"{_holders_text(free.on_node[node.name], None)}",
            )
        limit, detail = verdict if verdict is not None else (None, "fits now")
        checks.append(Check(node.name, None, limit, detail))
    return checks


def _remedies(
    snapshot: Snapshot,
    job: Job,
    free: _Free,
    checks: Sequence[Check],
    strict: bool,
    names: Mapping[str, str],
    unplaced: Unplaced,
) -> list[str]:
    if unplaced.code == "policy_failed":  # the planner's bug: no device or end of job helps
        return [
            "an admin: the cycle's log names the snapshot file that reproduces the "
            "policy's failure (coshare plan FILE shows it); until the policy is fixed, "
            "another policy may place this job"
        ]
    short = {c.node for c in checks if c.device is None and c.limit is not None}
    fits = [c for c in checks if c.limit is None and c.node not in short]
    if fits:
        where = f"{fits[0].node}/{fits[0].device}" if fits[0].device else fits[0].node
        return [
            f"fits {where} now; the policy chose other jobs this cycle and reconsiders it "
            "next cycle"
        ]
    never = _never(snapshot, job, names)
    if never:
        return never
    out: list[tuple[int, int, str]] = []
    for order, node in enumerate(snapshot.nodes):
        targets: list[tuple[str, ...]] = (
            [(d.id,) for d in node.devices] if job.needs_device else [()]
        )
        if job.needs_device and job.device_count > 1:
            targets = [tuple(d.id for d in node.devices)]
        for devices in targets:
            ending = _to_end(job, node.name, devices, free, strict)
            if ending is None:
                continue
            label = f"{node.name}/{','.join(devices)}" if devices else node.name
            jobs = ", ".join(ending)
            verb = "ends" if len(ending) == 1 else "end"
            noun = "job" if len(ending) == 1 else "jobs"
            out.append((len(ending), order, f"fits {label} once {noun} {jobs} {verb}"))
    if unplaced.code == "reserved":
        return [unplaced.reason] + [text for _, _, text in sorted(out)]
    return [text for _, _, text in sorted(out)]


def _never(snapshot: Snapshot, job: Job, names: Mapping[str, str]) -> list[str]:
    """What to lower when no node of the cluster, empty, could hold the job."""
    devices = [d for n in snapshot.nodes for d in n.devices]
    most_mem = max((d.memory_mib for d in devices), default=0)
    most_thr = max((d.threads for d in devices), default=0)
    most_devs = max((len(n.devices) for n in snapshot.nodes), default=0)
    most_cpu = max((n.cpu_milli for n in snapshot.nodes), default=0)
    most_host = max((n.memory_mib for n in snapshot.nodes), default=0)
    gang = f" or {names['processes']}" if job.processes > 1 else ""
    # (what it asks, the most there is, what no device/node has, the key, the most, in words)
    limits = (
        [
            (
                job.device_memory_mib,
                most_mem,
                f"no device has {job.device_memory_mib} MiB",
                names["device_memory_mib"],
                f"largest device: {most_mem} MiB",
            ),
            (
                job.device_threads,
                most_thr,
                f"no device has {job.device_threads} threads",
                names["device_threads"],
                f"most: {most_thr}",
            ),
            (
                job.device_count,
                most_devs,
                f"no node has {job.device_count} devices",
                names["device_count"],
                f"most on one node: {most_devs}",
            ),
        ]
        if job.needs_device
        else []
    )
    limits += [
        (
            job.total_cpu_milli,
            most_cpu,
            f"no node has {_cores(job.total_cpu_milli)} cores",
            names["cores"] + gang,
            f"largest node: {_cores(most_cpu)}",
        ),
        (
            job.total_memory_mib,
            most_host,
            f"no node has {job.total_memory_mib} MiB of host memory",
            names["memory_mib"] + gang,
            f"largest node: {most_host} MiB",
        ),
    ]
    return [
        f"{what}: lower {key} ({most})" for asked, limit, what, key, most in limits if asked > limit
    ]


def _to_end(
    job: Job, node: str, devices: Sequence[str], free: _Free, strict: bool
) -> list[str] | None:
    """The fewest jobs (greedy, largest help first) whose end lets ``job`` onto ``devices``
    of ``node``; ``None`` when ending them all would not do (the device is too small)."""
    deficits = _deficits(job, node, devices, free, strict, [])
    if deficits is None:
        return None
    if not any(deficits):
        return None  # it fits: not a remedy
    holders = list(free.on_node[node])
    chosen: list[_Holder] = []
    while any(d > 0 for d in _deficits(job, node, devices, free, strict, chosen) or (1,)):
        left = [h for h in holders if h not in chosen]
        if not left:
            return None
        scores = [_help(h, job, node, devices, free, strict, chosen) for h in left]
        best = max(range(len(left)), key=lambda i: scores[i])
        if scores[best] <= 0:
            return None
        chosen.append(left[best])
    return [h.job for h in chosen]


def _deficits(
    job: Job, node: str, devices: Sequence[str], free: _Free, strict: bool, ended: Sequence[_Holder]
) -> tuple[int, ...] | None:
    """What is missing (per device memory and threads, then cores and host memory) once
    ``ended`` jobs end; ``None`` when the devices themselves are too small."""
    gained_cpu = sum(h.cpu_milli for h in ended)
    gained_mem = sum(h.memory_mib for h in ended)
    out = [
        max(job.total_cpu_milli - free.cpu[node] - gained_cpu, 0),
        max(job.total_memory_mib - free.mem[node] - gained_mem, 0),
    ]
    for d in devices:
        mem = free.dev_mem[(node, d)] + sum(h.device_memory_mib for h in ended if d in h.devices)
        thr = free.dev_thr[(node, d)] + sum(h.device_threads for h in ended if d in h.devices)
        if (
            mem
            + sum(
                h.device_memory_mib for h in free.on_node[node] if d in h.devices and h not in ended
            )
            < job.device_memory_mib
        ):
            return None
        out.append(max(job.device_memory_mib - mem, 0))
        out.append(max(job.device_threads - thr, 0) if strict else 0)
    return tuple(out)


def _help(
    h: _Holder,
    job: Job,
    node: str,
    devices: Sequence[str],
    free: _Free,
    strict: bool,
    chosen: Sequence[_Holder],
) -> float:
    before = _deficits(job, node, devices, free, strict, chosen) or ()
    after = _deficits(job, node, devices, free, strict, [*chosen, h]) or ()
    scale = [max(job.total_cpu_milli, 1), max(job.total_memory_mib, 1)] + [
        max(job.device_memory_mib, 1),
        max(job.device_threads, 1),
    ] * len(devices)
    return sum((b - a) / s for b, a, s in zip(before, after, scale, strict=False))


def explanation_to_dict(e: Explanation) -> dict[str, object]:
    """An explanation as JSON (``explain --output json``)."""
    return {
        "job": e.job,
        "state": e.state,
        "reason": e.reason,
        "code": e.code,
        "policy": e.policy,
        "job_fields": dict(e.job_fields),
        "checks": [
            {"node": c.node, "device": c.device, "limit": c.limit, "detail": c.detail}
            for c in e.checks
        ],
        "remedies": list(e.remedies),
        "ahead": list(e.ahead),
    }


# -- the short reason written into each waiting job -----------------------------------------

#: A wait reason written into a job is cut to this many characters (one line).
MAX_WAIT_REASON_CHARS = 300


def wait_reason(unplaced: Unplaced) -> str:
    """The short reason written into a waiting job's own record (HTCondor's
    ``CoshareWaitReason``, Slurm's AdminComment), so its owner sees it with the scheduler's
    tools: the plan's code and reason, on one line, bounded."""
    text = f"{unplaced.code}: " + " ".join(unplaced.reason.split())
    text = "".join(c if c.isprintable() else " " for c in text)
    if len(text) > MAX_WAIT_REASON_CHARS:
        text = text[: MAX_WAIT_REASON_CHARS - 3] + "..."
    return text


def wait_reason_writes(plan: Plan, recorded: Mapping[str, str | None]) -> dict[str, str | None]:
    """The wait reasons one cycle writes: a job's only when it changed (no edit storm).

    Args:
        plan: the cycle's plan.
        recorded: the reason each job carries now (``None``: none), for the jobs whose
            reason the adapter may write; a job missing here is left alone.

    Returns:
        Per job, the reason to write, or ``None`` to clear it (a job this plan places).
    """
    out: dict[str, str | None] = {}
    for u in plan.unplaced:
        if u.job in recorded:
            text = wait_reason(u)
            if recorded[u.job] != text:
                out[u.job] = text
    for job in sorted(plan.placed_jobs):
        if recorded.get(job) is not None:
            out[job] = None
    return out
