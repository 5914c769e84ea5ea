"""The plan JSON contract (docs/plan.md), one struct per object, in the JSON's field names:
what ``coshare plan --output json`` writes (and the plan of ``coshare condor|slurm cycle
--output json``).

Optional fields are ``None`` when absent or ``null``. Unknown fields are refused, except in
``stats``, which tools may extend.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from msgspec import Meta, Struct

from coshare.contracts.fields import Devices, Id, Name, Text
from coshare.contracts.snapshot_doc import Doc
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_JOB_NODES,
    MAX_LLC_WAYS,
    MAX_MEMBW_GBPS,
    MAX_PROCESSES,
)

Code = Literal[
    "invalid", "never_fits", "no_room", "reserved", "not_chosen", "unsupported", "policy_failed"
]

Reason = Annotated[Text, Meta(description="one sentence a person can act on")]


class AssignmentDoc(Doc):
    job: Id
    node: Name
    device: (
        Annotated[Devices, Meta(description='device ids on the node joined by commas ("0,1")')]
        | None
    ) = None
    processes: (
        Annotated[
            int,
            Meta(ge=1, le=MAX_PROCESSES, description="processes of a multi-node job on this node"),
        ]
        | None
    ) = None
    harvest_from: (
        Annotated[
            Id,
            Meta(
                description=(
                    "collocate: the running GPU job whose idle cores this CPU job is placed on"
                )
            ),
        ]
        | None
    ) = None
    llc_ways: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_LLC_WAYS,
                description=(
                    "LLC ways allocated to the job on this node (sns, Spread-n-Share section "
                    "4.3); absent: no way allocation"
                ),
            ),
        ]
        | None
    ) = None
    membw_gbps: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_MEMBW_GBPS,
                description=(
                    "memory bandwidth (GB/s) the policy counts for the job on this node (sns); "
                    "absent: not counted"
                ),
            ),
        ]
        | None
    ) = None
    llc_ways_spare: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_LLC_WAYS,
                description=(
                    "sns: LLC ways the job gets on this node on top of llc_ways when it starts, "
                    "its equal (floor) share of the ways no job is allocated (Spread-n-Share "
                    "section 4.4); they shrink as jobs come and grow as they leave; absent: no "
                    "way allocation"
                ),
            ),
        ]
        | None
    ) = None


class UnplacedDoc(Doc):
    job: Id
    reason: Reason
    code: Annotated[Code, Meta(description="the reason's family, for tools")] | None = None


class TrialDoc(Doc):
    job: Id
    node: Name
    partners: (
        Annotated[list[Id], Meta(description="the jobs already on the node, sorted")] | None
    ) = None


class SpreadDoc(Doc):
    job: Id
    scale: Annotated[int, Meta(ge=1, le=MAX_JOB_NODES, description="the scale factor k")]
    nodes: Annotated[int, Meta(ge=1, le=MAX_JOB_NODES, description="nodes it runs on")]
    cores_per_node: Annotated[
        int,
        Meta(ge=1, le=MAX_CORES, description="the most processes (cores) it has on one node"),
    ]
    ways: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_LLC_WAYS,
                description="LLC ways allocated on each node; absent: none allocated",
            ),
        ]
        | None
    ) = None
    note: (
        Annotated[
            Text,
            Meta(description="why it runs as it does (no profile, no resctrl), for people"),
        ]
        | None
    ) = None
    membw_gbps: (
        Annotated[
            float,
            Meta(
                gt=0,
                le=MAX_MEMBW_GBPS,
                description=(
                    "policy.sns.mba: the memory bandwidth (GB/s) per node to cap the job at "
                    "with MBA (its profile's b at cores_per_node); absent: no cap"
                ),
            ),
        ]
        | None
    ) = None


class StatsDoc(Struct, omit_defaults=True, gc=False):
    """Figures of the plan; tools may add their own."""

    pending: Annotated[int, Meta(ge=0)] | None = None
    placed: Annotated[int, Meta(ge=0)] | None = None
    seconds: Annotated[float, Meta(ge=0, le=1e18)] | None = None


class PlanDoc(Doc):
    """Output of `coshare plan --output json` (and the plan of `coshare condor|slurm cycle
    --output json`): where each pending job goes, or why it waits. Every pending job appears
    once, in assignments or in unplaced; a job spread over nodes has one assignment per node.
    Specified in docs/plan.md."""

    #: Fields the schema requires because coshare always writes them (the parser takes a
    #: plan without them as empty).
    WRITTEN_ALWAYS: ClassVar[tuple[str, ...]] = ("assignments", "unplaced")

    policy: Annotated[Text, Meta(description="the policy that planned")]
    assignments: list[AssignmentDoc] | None = None
    unplaced: list[UnplacedDoc] | None = None
    stats: StatsDoc | None = None
    trials: (
        Annotated[
            list[TrialDoc],
            Meta(
                description=(
                    "trial co-runs of the membw policy (poncos section 7): each job here also "
                    "has an assignment to node, and is tried beside partners, the jobs already "
                    "there; absent when there are none"
                )
            ),
        ]
        | None
    ) = None
    requeue: (
        Annotated[
            list[UnplacedDoc],
            Meta(
                description=(
                    "running jobs to give back their resources through the scheduler "
                    "(collocate: CPU jobs on the cores of a GPU job whose load rose), each "
                    "with the reason"
                )
            ),
        ]
        | None
    ) = None
    spreads: (
        Annotated[
            list[SpreadDoc],
            Meta(
                description=(
                    "how the Spread-n-Share policies (sns, cs) placed each job: scale factor "
                    "k, nodes n = k * ceil(P/T), cores per node ceil(P/n), LLC ways per node "
                    "(absent: no way allocation) and a note when it does not run at its "
                    "profile's best scale; absent when there are none"
                )
            ),
        ]
        | None
    ) = None
