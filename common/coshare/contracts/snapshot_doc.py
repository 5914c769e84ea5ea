"""The snapshot JSON contract (docs/snapshot.md), one struct per object, in the JSON's field
names: what ``coshare plan`` reads and ``coshare condor|slurm show --output json`` writes.

Optional fields are ``None`` when absent or ``null`` (the model's defaults apply then, see
:mod:`coshare.contracts.typed`). Unknown fields are refused. Adding a field: here (the schema
and the decoder follow), in :mod:`coshare.model`, in the conversion of
:mod:`coshare.contracts.typed`, in :func:`coshare.schema.snapshot_to_dict` and in the messages'
checker (:mod:`coshare.schema`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from coshare.contracts.fields import WHOLE, Devices, Id, Name, Text
from coshare.ledger.bounds import (
    MAX_COPY_BW_MBPS,
    MAX_CORES,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_JOB_NODES,
    MAX_LLC_WAYS,
    MAX_MEMBW_GBPS,
    MAX_MEMORY_MIB,
    MAX_PRIORITY,
    MAX_PROCESSES,
    MAX_TIME_S,
    MAX_WALLTIME_S,
)
from coshare.ledger.limits import MAX_LIMIT_AMOUNT

#: Nodes of one snapshot.
MAX_SNAPSHOT_NODES = 1_000_000
#: Limits of one snapshot, and the limits one pending job is charged to.
MAX_LIMITS = 100_000
MAX_CHARGES = 64
#: The largest value of a limit or a charge (the limits' own rule reads the same bound).
MAX_LIMIT_VALUE = MAX_LIMIT_AMOUNT
#: The longest name or holder of a limit.
MAX_LIMIT_TEXT = 200

LimitText = Annotated[str, Meta(min_length=1, max_length=MAX_LIMIT_TEXT, extra={"check": "text"})]
"""A limit's name or holder."""


class Doc(Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """An object of a contract: unknown fields are refused; encoding omits what is absent."""


class DeviceDoc(Doc):
    id: Id
    memory_mib: Annotated[
        int, Meta(ge=1, le=MAX_DEVICE_MEMORY_MIB, description="device memory, MiB")
    ]
    threads: Annotated[
        int,
        Meta(ge=1, le=MAX_DEVICE_THREADS, description="hardware threads (a Xeon Phi 5110P: 240)"),
    ]
    model: Annotated[Text, Meta(description="device model or kind name")] | None = None


class NodeDoc(Doc):
    name: Name
    cores: Annotated[
        float,
        Meta(
            gt=0,
            le=MAX_CORES,
            description="host cores (fractions allowed; rounded down to thousandths)",
        ),
    ]
    memory_mib: Annotated[int, Meta(ge=1, le=MAX_MEMORY_MIB, description="host memory, MiB")]
    membw_gbps: (
        Annotated[float, Meta(gt=0, le=MAX_MEMBW_GBPS, description="peak memory bandwidth, GB/s")]
        | None
    ) = None
    llc_ways: (
        Annotated[
            int,
            Meta(ge=1, le=MAX_LLC_WAYS, description="last-level cache ways that can be allocated"),
        ]
        | None
    ) = None
    domain: Annotated[Text, Meta(description="scheduling domain")] | None = None
    devices: Annotated[list[DeviceDoc], Meta(max_length=MAX_DEVICES)] | None = None
    membw_avail_gbps: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_MEMBW_GBPS,
                description=(
                    "node facts: memory bandwidth the last probe measured on the free cores, GB/s"
                ),
            ),
        ]
        | None
    ) = None
    membw_baseline_gbps: (
        Annotated[
            float,
            Meta(
                gt=0,
                le=MAX_MEMBW_GBPS,
                description="node facts: the same probe on the idle node, GB/s",
            ),
        ]
        | None
    ) = None
    llc_ways_free: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_LLC_WAYS,
                description="node facts: LLC ways no coshare job's resctrl group holds",
            ),
        ]
        | None
    ) = None
    facts_at_s: (
        Annotated[
            float,
            Meta(
                ge=-MAX_TIME_S,
                le=MAX_TIME_S,
                description="node facts: when the node measured them (epoch s)",
            ),
        ]
        | None
    ) = None
    membw_at_s: (
        Annotated[
            float,
            Meta(
                ge=-MAX_TIME_S,
                le=MAX_TIME_S,
                description=(
                    "node facts: when the membw probe behind membw_avail_gbps ran (seconds "
                    "since the epoch)"
                ),
            ),
        ]
        | None
    ) = None


class RunningDoc(Doc):
    """A running job, or one placed by coshare and not started (state planned), on one
    node."""

    id: Id
    node: Name
    device: (
        Annotated[Devices, Meta(description='device ids on the node joined by commas ("0,1")')]
        | None
    ) = None
    device_memory_mib: (
        Annotated[
            int,
            Meta(
                ge=0, le=MAX_DEVICE_MEMORY_MIB, description="declared device memory per device, MiB"
            ),
        ]
        | None
    ) = None
    device_threads: (
        Annotated[
            int, Meta(ge=0, le=MAX_DEVICE_THREADS, description="declared device threads per device")
        ]
        | None
    ) = None
    cores: (
        Annotated[
            float, Meta(ge=0, le=MAX_CORES, description="host cores held on the node (default 1)")
        ]
        | None
    ) = None
    memory_mib: (
        Annotated[
            int, Meta(ge=0, le=MAX_MEMORY_MIB, description="host memory held on the node, MiB")
        ]
        | None
    ) = None
    state: Literal["running", "planned"] | None = None
    membw_gbps: (
        Annotated[float, Meta(ge=0, le=MAX_MEMBW_GBPS, description="memory bandwidth used, GB/s")]
        | None
    ) = None
    llc_ways: (
        Annotated[int, Meta(ge=0, le=MAX_LLC_WAYS, description="cache ways allocated")] | None
    ) = None
    start_time: (
        Annotated[
            float,
            Meta(ge=-MAX_TIME_S, le=MAX_TIME_S, description="when it started or was placed (s)"),
        ]
        | None
    ) = None
    program: Annotated[Text, Meta(description="profile key")] | None = None
    walltime_s: (
        Annotated[
            float,
            Meta(
                gt=0,
                le=MAX_WALLTIME_S,
                description=(
                    "requested run time, s (start_time + walltime_s: expected end, for gang "
                    "reservations; collocate: P_M of it is the monitoring period)"
                ),
            ),
        ]
        | None
    ) = None
    copy_bw_mbps: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_COPY_BW_MBPS,
                description="host-device copy bandwidth, MB/s per process (collocate's threshold)",
            ),
        ]
        | None
    ) = None
    harvest_from: (
        Annotated[
            Id,
            Meta(
                description="collocate: the running GPU job whose idle cores this CPU job borrows"
            ),
        ]
        | None
    ) = None
    cpu_load_cores: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description="node facts: mean CPU load over its sampled history, cores busy",
            ),
        ]
        | None
    ) = None
    cpu_load_last_cores: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description="node facts: CPU load over the last sampling interval, cores",
            ),
        ]
        | None
    ) = None
    cpu_load_max_cores: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description="node facts: highest interval load of its history, cores",
            ),
        ]
        | None
    ) = None
    cpu_load_window_s: (
        Annotated[
            float,
            Meta(ge=0, le=MAX_TIME_S, description="node facts: seconds the load history covers"),
        ]
        | None
    ) = None
    cpu_cores_held: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description="node facts: cores its cpuset holds now (fewer while it lends some)",
                extra=WHOLE,
            ),
        ]
        | None
    ) = None
    cpu_wait_cores: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description=(
                    "node facts: run-queue delay over the load's history, cores (its tasks' "
                    "time runnable but waiting for a CPU, per second)"
                ),
            ),
        ]
        | None
    ) = None
    cpu_wait_last_cores: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_CORES,
                description="node facts: run-queue delay over the last sampling interval, cores",
            ),
        ]
        | None
    ) = None


class PendingDoc(Doc):
    id: Id
    device_memory_mib: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_DEVICE_MEMORY_MIB,
                description="most device memory per device, MiB (the paper's m)",
            ),
        ]
        | None
    ) = None
    device_threads: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_DEVICE_THREADS,
                description="most device threads of one offload (the paper's t)",
            ),
        ]
        | None
    ) = None
    device_count: (
        Annotated[
            int,
            Meta(
                ge=0, le=MAX_DEVICES, description="devices on one node (default 1; 0 for kind cpu)"
            ),
        ]
        | None
    ) = None
    cores: (
        Annotated[float, Meta(ge=0, le=MAX_CORES, description="host cores per process (default 1)")]
        | None
    ) = None
    memory_mib: (
        Annotated[int, Meta(ge=0, le=MAX_MEMORY_MIB, description="host memory per process, MiB")]
        | None
    ) = None
    priority: (
        Annotated[
            int,
            Meta(
                ge=-MAX_PRIORITY, le=MAX_PRIORITY, description="larger runs first among equal jobs"
            ),
        ]
        | None
    ) = None
    submit_time: (
        Annotated[
            float,
            Meta(
                ge=-MAX_TIME_S, le=MAX_TIME_S, description="submission time (s), the clock of now"
            ),
        ]
        | None
    ) = None
    kind: Literal["device", "cpu"] | None = None
    processes: (
        Annotated[
            int,
            Meta(ge=1, le=MAX_PROCESSES, description="gang size: processes that start together"),
        ]
        | None
    ) = None
    program: Annotated[Text, Meta(description="profile key (Spread-n-Share)")] | None = None
    alpha: (
        Annotated[float, Meta(gt=0, le=1, description="tolerated slowdown (Spread-n-Share)")] | None
    ) = None
    membw_gbps: (
        Annotated[float, Meta(ge=0, le=MAX_MEMBW_GBPS, description="memory bandwidth used, GB/s")]
        | None
    ) = None
    copy_bw_mbps: (
        Annotated[
            float, Meta(ge=0, le=MAX_COPY_BW_MBPS, description="host-device copy bandwidth, MB/s")
        ]
        | None
    ) = None
    walltime_s: (
        Annotated[float, Meta(gt=0, le=MAX_WALLTIME_S, description="requested run time, s")] | None
    ) = None
    nodes: (
        Annotated[
            int,
            Meta(
                ge=1, le=MAX_JOB_NODES, description="gang: fewest nodes the job spans (default 1)"
            ),
        ]
        | None
    ) = None
    nodes_max: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_JOB_NODES,
                description="gang: most nodes the job may span (default: nodes)",
            ),
        ]
        | None
    ) = None
    processes_per_node: (
        Annotated[int, Meta(ge=1, le=MAX_PROCESSES, description="gang: most processes on one node")]
        | None
    ) = None
    charges: (
        Annotated[
            dict[
                Id,
                Annotated[
                    float,
                    Meta(
                        ge=0,
                        le=MAX_LIMIT_VALUE,
                        description="what the job counts against the limit",
                    ),
                ],
            ],
            Meta(
                max_length=MAX_CHARGES,
                description=(
                    "what the job counts against each limit of the snapshot's limits, by the "
                    "limit's id"
                ),
            ),
        ]
        | None
    ) = None


class LimitDoc(Doc):
    """A limit the scheduler enforces before it starts a job (a Slurm QOS or association
    limit, an HTCondor group quota or concurrency limit): jobs charged to it start only while
    used plus their charge stays within max."""

    id: Annotated[Id, Meta(description="the limit's key in pending jobs' charges")]
    name: Annotated[
        LimitText,
        Meta(description="as the scheduler names it, e.g. MaxTRESPerUser gres/gpu=4"),
    ]
    holder: Annotated[
        LimitText,
        Meta(description="whom it counts, e.g. user alice, account physics"),
    ]
    max: Annotated[float, Meta(ge=0, le=MAX_LIMIT_VALUE, description="the most it allows")]
    used: Annotated[
        float, Meta(ge=0, le=MAX_LIMIT_VALUE, description="what running jobs hold of it now")
    ]


class SnapshotDoc(Doc):
    """Input of `coshare plan` and the output of `coshare condor|slurm show --output json`:
    the cluster's nodes and devices, what holds resources, and the pending annotated jobs.
    Units are in the field names. Specified in docs/snapshot.md; the parser (coshare.schema)
    also refuses ids given twice and references to unknown nodes, devices or limits, which a
    schema cannot express."""

    nodes: Annotated[list[NodeDoc], Meta(max_length=MAX_SNAPSHOT_NODES)]
    running: list[RunningDoc] | None = None
    pending: list[PendingDoc] | None = None
    now: (
        Annotated[
            float,
            Meta(
                ge=-MAX_TIME_S,
                le=MAX_TIME_S,
                description="now, on the clock of submit_time (s); enables aging",
            ),
        ]
        | None
    ) = None
    limits: Annotated[list[LimitDoc], Meta(max_length=MAX_LIMITS)] | None = None
