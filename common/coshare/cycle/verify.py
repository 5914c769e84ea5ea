"""Independent check of a plan against its snapshot.

The cycle runs this before it writes anything to a scheduler: a plan that loses a job or
oversubscribes a device or node is a bug and is never applied. The tests use it as the
oracle for every policy. It re-does the accounting with plain loops, sharing no code with the
policies, so a bug in their bookkeeping cannot hide itself. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from coshare.ledger.mig import mig_parents
from coshare.model import Device, Job, Plan, RunningJob, Snapshot

#: A lender whose demand fills this share of the cores its cpuset holds lends no more: the
#: value of ``coshare.policies.collocate.SATURATED_SHARE``, kept here apart (a test checks).
SATURATED_SHARE = 0.9


def check_plan(snapshot: Snapshot, plan: Plan, strict_threads: bool = True) -> list[str]:
    """Every way ``plan`` breaks the planning contract for ``snapshot``.

    Checks that each pending job appears exactly once (assigned or unplaced), that each
    assignment names a real node and the right number of its devices, and that running plus
    planned jobs exceed no device memory, host cores or host memory, nor device threads when
    ``strict_threads``; no single job may declare more threads than its device has. A
    resource that was already over its limit before the plan is only reported if the plan
    adds to it. A CPU job placed on a GPU job's idle cores (``harvest_from``, the
    ``collocate`` policy) counts against that job's cores, not the node's: it must be a CPU
    job on the node of a running GPU job with a measured load, and what all CPU jobs borrow
    from it must stay within the whole cores its demand (load plus run-queue wait, the higher
    over history or last interval) leaves idle; a GPU job whose demand fills
    :data:`SATURATED_SHARE` of the cores its cpuset holds lends no more. Requeued jobs must
    be running.

    Returns:
        One line per violation; empty when the plan is sound.
    """
    problems: list[str] = []
    pending = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}

    seen = Counter(u.job for u in plan.unplaced)
    assigned_nodes: dict[str, list[str]] = defaultdict(list)
    for a in plan.assignments:
        assigned_nodes[a.job].append(a.node)
    for job_id, count in seen.items():
        if count > 1:
            problems.append(f"job {job_id} is unplaced {count} times")
        if job_id in assigned_nodes:
            problems.append(f"job {job_id} is both assigned and unplaced")
    for job_id, on in assigned_nodes.items():
        if len(on) != len(set(on)):
            problems.append(f"job {job_id} is assigned twice to the same node")
    for job_id in list(seen) + list(assigned_nodes):
        if job_id not in pending:
            problems.append(f"job {job_id} is in the plan but not pending")
    for job_id in pending:
        if job_id not in seen and job_id not in assigned_nodes:
            problems.append(f"pending job {job_id} is missing from the plan")
    problems += _gang_problems(plan, pending)

    dev_mem: dict[tuple[str, str], int] = defaultdict(int)
    dev_thr: dict[tuple[str, str], int] = defaultdict(int)
    node_cpu: dict[str, int] = defaultdict(int)
    node_mem: dict[str, int] = defaultdict(int)
    # A GPU job running on several nodes has one entry per node (the snapshot contract): it
    # lends each node's cores apart, so lenders are known by job and node.
    donors = {(r.id, r.node): r for r in snapshot.running if r.devices and r.state == "running"}
    lent: dict[tuple[str, str], int] = defaultdict(int)
    for r in snapshot.running:
        donor = donors.get((r.harvest_from or "", r.node))
        if donor is not None:
            lent[(donor.id, donor.node)] += r.cpu_milli
        else:
            node_cpu[r.node] += r.cpu_milli
        node_mem[r.node] += r.memory_mib
        for d in r.devices:
            dev_mem[(r.node, d)] += r.device_memory_mib
            dev_thr[(r.node, d)] += r.device_threads
    before_mem, before_thr = dict(dev_mem), dict(dev_thr)
    before_cpu, before_node_mem = dict(node_cpu), dict(node_mem)
    before_lent = dict(lent)
    running_ids = {r.id for r in snapshot.running}
    for u in plan.requeue:
        if u.job not in running_ids:
            problems.append(f"job {u.job} is requeued but not running")

    touched_devices: set[tuple[str, str]] = set()
    touched_nodes: set[str] = set()
    devices_of: dict[str, tuple[dict[str, Device], frozenset[str]]] = {}
    for a in plan.assignments:
        job = pending.get(a.job)
        node = nodes.get(a.node)
        if job is None:
            continue
        if node is None:
            problems.append(f"job {a.job} is assigned to unknown node {a.node}")
            continue
        spread = len(assigned_nodes[a.job]) > 1
        processes = a.processes if a.processes is not None else job.processes
        if spread and a.processes is None:
            problems.append(f"job {a.job} spans nodes but {a.node} has no process count")
        wanted = job.device_count if job.needs_device else 0
        if len(a.devices) != wanted:
            problems.append(f"job {a.job} needs {wanted} devices, got {len(a.devices)} on {a.node}")
        if len(set(a.devices)) != len(a.devices):
            problems.append(f"job {a.job} is given the same device twice on {a.node}")
        if node.name not in devices_of:  # once per node, not per assignment
            devices_of[node.name] = ({d.id: d for d in node.devices}, mig_parents(node))
        ids, parents = devices_of[node.name]
        for dev in a.devices:
            if dev in parents:
                problems.append(
                    f"job {a.job} is placed on {a.node}/{dev}, a GPU in MIG mode "
                    "(its instances are the devices)"
                )
                continue
            device = ids.get(dev)
            if device is None:
                problems.append(f"job {a.job} is assigned to unknown device {a.node}/{dev}")
                continue
            if job.device_threads > device.threads:
                problems.append(
                    f"job {a.job} declares {job.device_threads} threads, "
                    f"more than {a.node}/{dev} has ({device.threads})"
                )
            dev_mem[(a.node, dev)] += job.device_memory_mib
            dev_thr[(a.node, dev)] += job.device_threads
            touched_devices.add((a.node, dev))
        node_mem[a.node] += job.memory_mib * processes
        touched_nodes.add(a.node)
        if a.harvest_from is None:
            node_cpu[a.node] += job.cpu_milli * processes
            continue
        donor = donors.get((a.harvest_from, a.node))
        if job.needs_device:
            problems.append(f"job {a.job} needs a device but is placed on harvested cores")
        if donor is None:
            problems.append(
                f"job {a.job} harvests from {a.harvest_from}, which is no running "
                f"GPU job on {a.node}"
            )
        else:
            lent[(donor.id, donor.node)] += job.cpu_milli * processes

    for key in sorted(touched_devices):
        device = next(d for d in nodes[key[0]].devices if d.id == key[1])
        label = f"{key[0]}/{key[1]}"
        if dev_mem[key] > device.memory_mib and dev_mem[key] > before_mem.get(key, 0):
            problems.append(f"device {label} memory {dev_mem[key]} > {device.memory_mib} MiB")
        if (
            strict_threads
            and dev_thr[key] > device.threads
            and dev_thr[key] > before_thr.get(key, 0)
        ):
            problems.append(f"device {label} threads {dev_thr[key]} > {device.threads}")
    for name in sorted(touched_nodes):
        node = nodes[name]
        if node_cpu[name] > node.cpu_milli and node_cpu[name] > before_cpu.get(name, 0):
            problems.append(f"node {name} cores {node_cpu[name] / 1000:g} > {node.cores}")
        if node_mem[name] > node.memory_mib and node_mem[name] > before_node_mem.get(name, 0):
            problems.append(f"node {name} memory {node_mem[name]} > {node.memory_mib} MiB")
    parts = Counter(job_id for job_id, _ in donors)
    for key in sorted(lent):
        donor = donors[key]
        donor_id = donor.id if parts[donor.id] == 1 else f"{donor.id} on {donor.node}"
        if lent[key] <= before_lent.get(key, 0):
            continue
        demand = _demand(donor)
        if demand is None:
            problems.append(f"GPU job {donor_id} lends cores but has no measured load")
            continue
        what = (
            "load"
            if donor.cpu_wait_cores is None and donor.cpu_wait_last_cores is None
            else "load and run-queue wait"
        )
        idle = max(0, (donor.cpu_milli - int(demand * 1000 + 0.999999)) // 1000 * 1000)
        held = donor.cpu_cores_held
        if lent[key] > idle:
            problems.append(
                f"GPU job {donor_id} lends {lent[key] / 1000:g} cores, more "
                f"than its {what} {demand:g} leaves idle ({idle // 1000})"
            )
        elif held is not None and demand >= SATURATED_SHARE * held:
            problems.append(
                f"GPU job {donor_id} lends more cores while its {what} {demand:g} "
                f"fills {SATURATED_SHARE:g} x the {held} cores it holds"
            )
        elif lent[key] >= donor.cpu_milli:
            problems.append(
                f"GPU job {donor_id} lends all its {donor.cpu_milli / 1000:g} "
                "cores and keeps none for itself"
            )
    return problems


def _demand(job: RunningJob) -> float | None:
    """Load plus run-queue wait, over the history or the last interval, whichever is higher."""
    sums = []
    if job.cpu_load_cores is not None:
        sums.append(job.cpu_load_cores + (job.cpu_wait_cores or 0.0))
    if job.cpu_load_last_cores is not None:
        sums.append(job.cpu_load_last_cores + (job.cpu_wait_last_cores or 0.0))
    return max(sums) if sums else None


def _gang_problems(plan: Plan, pending: dict[str, Job]) -> list[str]:
    """All or nothing: a gang is on a node count it allows, with every process
    placed once and at most ``processes_per_node`` on a node; a single-node job on one node."""
    problems: list[str] = []
    parts: dict[str, list[int | None]] = defaultdict(list)
    for a in plan.assignments:
        if a.job in pending:
            parts[a.job].append(a.processes)
    for job_id, counts in parts.items():
        job = pending[job_id]
        low = job.nodes
        high = job.nodes_max if job.nodes_max is not None else job.nodes
        if not (job.nodes > 1 or high > 1):
            if len(counts) > 1:
                problems.append(f"job {job_id} is a single-node job but spans {len(counts)} nodes")
            continue
        if not low <= len(counts) <= high:
            problems.append(f"gang {job_id} is on {len(counts)} nodes (allowed: {low}..{high})")
        if any(c is None for c in counts):
            problems.append(f"gang {job_id} has a node without a process count")
            continue
        total = sum(c for c in counts if c is not None)
        if total != job.processes:
            problems.append(f"gang {job_id} places {total} processes of {job.processes}")
        most = job.processes_per_node
        if most is not None and any(c is not None and c > most for c in counts):
            problems.append(f"gang {job_id} puts more than {most} processes on one node")
    return problems
