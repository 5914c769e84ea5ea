"""MIG: a GPU sliced into instances is planned by its instances, never as a whole.

A device id ``<parent>:<instance>`` names a MIG instance of GPU ``<parent>`` (the id
``coshare node gpus`` gives, and the one HTCondor's and Slurm's GPU discovery list MIG devices
under); each instance is a device of its own size. A node that lists a GPU *and* instances of
it (a scheduler whose discovery lists both) would let a job take the whole GPU while others
hold its instances: the parent is left out of planning, with a note, and the plan check
refuses a placement on it (:func:`coshare.cycle.verify.check_plan`).

Pure.
"""

from __future__ import annotations

from dataclasses import replace

from coshare.model import Node, Snapshot


def mig_parents(node: Node) -> frozenset[str]:
    """The ids of ``node``'s devices that it also lists instances of (``0`` beside ``0:1``)."""
    ids = {d.id for d in node.devices}
    return frozenset(d.split(":", 1)[0] for d in ids if ":" in d and d.split(":", 1)[0] in ids)


def without_mig_parents(snapshot: Snapshot) -> tuple[Snapshot, tuple[str, ...]]:
    """``snapshot`` with every MIG parent left out of its nodes' devices, and a note per node
    that had one (the snapshot itself when none has)."""
    nodes: list[Node] = []
    notes: list[str] = []
    for node in snapshot.nodes:
        parents = mig_parents(node)
        if not parents:
            nodes.append(node)
            continue
        shown = ", ".join(sorted(parents))
        notes.append(
            f"node {node.name}: GPU {shown} is in MIG mode: planned by its instances, "
            "never as a whole device"
        )
        nodes.append(replace(node, devices=tuple(d for d in node.devices if d.id not in parents)))
    if not notes:
        return snapshot, ()
    return replace(snapshot, nodes=tuple(nodes)), tuple(notes)
