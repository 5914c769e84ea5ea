"""The ClassAd attributes coshare reads and writes, in one place.

Job attributes (the schedd's queue is the planner's ledger)::

    CoshareDeviceMemory, CoshareDeviceThreads, ...  the user's annotations
    (coshare.ledger.annotations)
    CoshareManaged           true: set by the schedd's transform on annotated jobs
    CoshareUserRequirements  the user's Requirements, kept by the transform
    CosharePlacedAt          when the planner placed the job (epoch seconds); written first
    CosharePlacedDevices     the planned device ids, comma-separated ("0,1"); written second
    CoshareWaitReason        why the job waits ("no_room: needs 240 free device threads; ..."),
                             written only when it changed, cleared when the job is placed
                             (``condor_q -af CoshareWaitReason``)
    CosharePlacedNodes       a parallel-universe job (a gang): its planned nodes,
                             a list ({"node1", "node2"}); written before the gate opens
    CosharePlacedNodeDevices its device ids on each of those nodes, a list in the same order
                             ({"0,1", "0"}); written with CosharePlacedNodes
    CoshareTrial             a trial co-run's record (membw: coshare.ledger.trials), as a
                             string "state:at:share:partners:why"; written before the gate
                             opens, rewritten as the trial moves on
    CoshareHarvestFrom       a CPU-only job placed on a running GPU job's idle cores (the
                             collocate policy): that job's GlobalJobId; written before the
                             gate opens, undefined otherwise. Only a lend slot admits it
                             (deploy/condor/config.d/20-coshare-execute.conf), and its
                             wrapper has the node take the cores out of that job's cpuset
    CoshareLender            true: a GPU job placed as one whose idle cores may be lent later
                             (its wrapper tells the node daemon: START lends=1)
    CosharePlacedNode        the planned node (a gang: its first); written last: it opens the
                             gate. Requirements (the schedd transform):
                             ifThenElse(MY.CosharePlacedNodes is undefined,
                                 TARGET.CoshareNodeName =?= MY.CosharePlacedNode,
                                 MY.CosharePlacedNode isnt undefined &&
                                 member(TARGET.CoshareNodeName, MY.CosharePlacedNodes) =?= true)
                             && (MY.CoshareUserRequirements)

Machine (slot) attributes, advertised by every execute node::

    CoshareNodeName            the node's name as coshare knows it (the gate compares it)
    CoshareNodeDeviceIds       {"0", "1"}       from coshare-devices (startd cron)
    CoshareNodeDeviceMemory    {8192, 8192}     MiB
    CoshareNodeDeviceThreads   {240, 240}       hardware threads (0: look up the model)
    CoshareNodeDeviceModels    {"phi-5110p", ...}
    CoshareNodeFacts           "coshare-facts;v=1;at=...;..."  from coshare-facts (startd cron):
                               the node daemon's measurements (coshare.ledger.facts parses them)
    CoshareLendSlot            true on a lend slot (collocate's lent cores): its cores and
                               memory are not the node's; a claim on it borrows a GPU job's

Claimed slots also carry the job's CoshareManaged, CosharePlacedNode, CosharePlacedDevices,
CosharePlacedNodes, CosharePlacedNodeDevices, CoshareDeviceMemory, CoshareDeviceThreads and
CoshareDeviceCompute (and, on a pool with lend slots, CoshareHarvestFrom; ``STARTD_JOB_ATTRS``):
what the job really started with, the truth of what runs where.
"""

from __future__ import annotations

from coshare.ledger.annotations import KEYS

MANAGED = "CoshareManaged"
USER_REQUIREMENTS = "CoshareUserRequirements"
PLACED_AT = "CosharePlacedAt"
PLACED_DEVICES = "CosharePlacedDevices"
PLACED_NODE = "CosharePlacedNode"
PLACED_NODES = "CosharePlacedNodes"
PLACED_NODE_DEVICES = "CosharePlacedNodeDevices"
WAIT_REASON = "CoshareWaitReason"
TRIAL = "CoshareTrial"
HARVEST_FROM = "CoshareHarvestFrom"
LENDER = "CoshareLender"

#: Attributes coshare itself writes or the transform sets: never user annotations.
RESERVED = frozenset(
    name.lower()
    for name in (
        MANAGED,
        USER_REQUIREMENTS,
        PLACED_AT,
        PLACED_DEVICES,
        PLACED_NODE,
        WAIT_REASON,
        PLACED_NODES,
        PLACED_NODE_DEVICES,
        TRIAL,
        HARVEST_FROM,
        LENDER,
    )
)

#: The annotation keys users write, as HTCondor attribute names.
ANNOTATIONS: tuple[str, ...] = tuple(spec.attribute for spec in KEYS)

NODE_NAME = "CoshareNodeName"
DEVICE_IDS = "CoshareNodeDeviceIds"
DEVICE_MEMORY = "CoshareNodeDeviceMemory"
DEVICE_THREADS = "CoshareNodeDeviceThreads"
DEVICE_MODELS = "CoshareNodeDeviceModels"
NODE_FACTS = "CoshareNodeFacts"
LEND_SLOT = "CoshareLendSlot"

#: What the Source asks the schedd for (a projection keeps the query small).
JOB_PROJECTION: tuple[str, ...] = (
    "ClusterId",
    "ProcId",
    "GlobalJobId",
    "JobStatus",
    "QDate",
    "JobPrio",
    "RequestCpus",
    "RequestMemory",
    "RemoteHost",
    MANAGED,
    PLACED_AT,
    PLACED_DEVICES,
    PLACED_NODE,
    *ANNOTATIONS,
    WAIT_REASON,
    "JobUniverse",
    "MinHosts",
    "MaxHosts",
    PLACED_NODES,
    PLACED_NODE_DEVICES,
    TRIAL,
    "JobCurrentStartDate",
    HARVEST_FROM,
    LENDER,
    # the negotiator's order and limits (condor_addon.accounting, condor_addon.pool_limits)
    "AccountingGroup",
    "Owner",
    "ConcurrencyLimits",
)

#: What the Source asks the collector for, per slot.
SLOT_PROJECTION: tuple[str, ...] = (
    "Name",
    "Machine",
    "SlotType",
    "State",
    "Activity",
    "Cpus",
    "Memory",
    "TotalSlotCpus",
    "TotalSlotMemory",
    "GlobalJobId",
    "JobId",
    NODE_NAME,
    DEVICE_IDS,
    DEVICE_MEMORY,
    DEVICE_THREADS,
    DEVICE_MODELS,
    MANAGED,
    PLACED_NODE,
    PLACED_DEVICES,
    PLACED_NODES,
    PLACED_NODE_DEVICES,
    "CoshareDeviceMemory",
    "CoshareDeviceThreads",
    "CoshareDeviceCompute",
    "DrainReason",
    NODE_FACTS,
    LEND_SLOT,
    "SlotTypeID",
    HARVEST_FROM,
    # what a claimed slot's job holds of the pool's limits (condor_addon.pool_limits)
    "ConcurrencyLimits",
    "RemoteNegotiatingGroup",
    "AccountingGroup",
    "SlotWeight",
)

#: HTCondor's JobUniverse code of the parallel universe (``universe = parallel``): the
#: dedicated scheduler starts the job on ``machine_count`` machines at once (a gang).
PARALLEL_UNIVERSE = 11

#: HTCondor's JobStatus codes (condor_q's letters) for the states coshare cares about.
IDLE = 1
RUNNING = 2
REMOVED = 3
COMPLETED = 4
HELD = 5
TRANSFERRING_OUTPUT = 6
SUSPENDED = 7

JOB_STATUS_NAMES: dict[int, str] = {
    IDLE: "idle",
    RUNNING: "running",
    REMOVED: "removed",
    COMPLETED: "completed",
    HELD: "held",
    TRANSFERRING_OUTPUT: "transferring output",
    SUSPENDED: "suspended",
}


def job_status_name(status: object) -> str:
    """A JobStatus code as a word, for messages (``unknown status X`` for anything else)."""
    if isinstance(status, int) and status in JOB_STATUS_NAMES:
        return JOB_STATUS_NAMES[status]
    return f"unknown status {status!r}"
