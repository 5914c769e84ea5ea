"""MIG slices as devices in the simulator: a cluster's GPUs as 80 GB A100s and H100s, each
sliced into MIG instances by a layout, every instance a device of its own size.

NVIDIA's MIG user guide ("Supported MIG Profiles") gives the A100-80GB and H100-80GB the same
profiles: a ``Ng`` instance holds ``N`` of the GPU's 7 compute slices (its fraction of the
SMs) and a fraction of its memory::

    profile    SMs  memory  instances per GPU
    1g.10gb    1/7  1/8     7
    2g.20gb    2/7  2/8     3
    3g.40gb    3/7  4/8     2
    4g.40gb    4/7  4/8     1
    7g.80gb    7/7  full    1

A job lands on one instance, never across two (instances are isolated), and several jobs may
share one instance as they share a whole GPU. In the fragmentation benchmark a device's size
is GPU milli (a share of a whole GPU's compute): an instance is its compute slices' part of
1000 (``3g.40gb``: 428), so a pod asking for half a GPU fits a ``4g`` or ``7g`` instance only.
The cluster's capacity stays its physical GPUs (1000 milli each): the slices a layout leaves
unused, and the rounding, count as unallocated, as on a real MIG node.

Layouts are ``+``-joined profiles that NVIDIA's placement rules allow on one GPU
(:data:`LAYOUTS`); a mix (:data:`MIXES`) gives each GPU of a node its layout. A GPU's
instances get the ids ``<gpu>:<instance>``, the ids ``coshare node gpus`` gives them
(:mod:`coshare.node.gpus`), and its model says the GPU and the profile (``a100-80gb/3g.40gb``).
Nodes alternate between A100s and H100s (the first node A100s): they share the profiles, so
only the model names differ.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coshare.model import Device, Node
from coshare.sim.traces import GPU_MILLI

#: Compute slices of a whole GPU (A100, H100).
SLICES = 7
#: The profiles of an 80 GB A100 and H100: compute slices, and how many fit one GPU.
PROFILES: dict[str, tuple[int, int]] = {
    "1g.10gb": (1, 7),
    "2g.20gb": (2, 3),
    "3g.40gb": (3, 2),
    "4g.40gb": (4, 1),
    "7g.80gb": (7, 1),
}
#: Layouts one GPU may be sliced into (NVIDIA's placement rules; ``balanced`` is
#: nvidia-mig-parted's ``all-balanced``).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "whole": ("7g.80gb",),
    "halves": ("4g.40gb", "3g.40gb"),
    "balanced": ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
    "fours": ("4g.40gb", "2g.20gb", "1g.10gb"),
    "twos": ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
    "sevenths": ("1g.10gb",) * 7,
}
#: Mixes: the layouts the GPUs of a node take in turn (GPU 0 the first, ...).
MIXES: dict[str, tuple[str, ...]] = {
    "balanced": ("balanced",),
    "mixed": ("whole", "halves", "balanced", "twos"),
    "halves": ("halves",),
}
#: The GPU models nodes alternate between.
MODELS = ("a100-80gb", "h100-80gb")


def instance_milli(profile: str) -> int:
    """An instance's size in GPU milli: its compute slices' part of a whole GPU."""
    slices, _ = PROFILES[profile]
    return GPU_MILLI * slices // SLICES


def mig_nodes(nodes: Sequence[Node], mix: str) -> tuple[Node, ...]:
    """``nodes`` with each GPU sliced into the MIG instances of ``mix`` (see the module
    docstring); host cores and memory as they were.

    Raises:
        ValueError: an unknown mix.
    """
    if mix not in MIXES:
        raise ValueError(f"unknown MIG mix {mix!r} (known: {', '.join(sorted(MIXES))})")
    layouts = MIXES[mix]
    out: list[Node] = []
    for n, node in enumerate(nodes):
        model = MODELS[n % len(MODELS)]
        devices: list[Device] = []
        for g, _gpu in enumerate(node.devices):
            for i, profile in enumerate(LAYOUTS[layouts[g % len(layouts)]]):
                size = instance_milli(profile)
                devices.append(Device(f"{g}:{i}", size, size, f"{model}/{profile}"))
        out.append(replace(node, devices=tuple(devices)))
    return tuple(out)


def whole_gpu_nodes(nodes: Sequence[Node]) -> tuple[Node, ...]:
    """``nodes`` with the same A100/H100 models as :func:`mig_nodes` gives them, each GPU
    whole (MIG off): the baseline a MIG mix is compared with."""
    return tuple(
        replace(
            node,
            devices=tuple(replace(d, model=MODELS[n % len(MODELS)]) for d in node.devices),
        )
        for n, node in enumerate(nodes)
    )


def physical_gpus(node: Node) -> int:
    """The GPUs of a node, counting a GPU's MIG instances (``<gpu>:<i>``) once."""
    return len({d.id.split(":", 1)[0] for d in node.devices})
