"""The fragmentation benchmark with and without MIG, side by side (``coshare simulate
alibaba-2023 --mig MIX``).

Pure: tables from runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table

from coshare.sim.fragmentation import FragRun, median_unallocated
from coshare.sim.mig import LAYOUTS, MIXES

#: The arrival level the published table reads.
LEVEL = 100


def mig_caption(mix: str) -> str:
    """What the MIG runs are: the mix's layouts per GPU of a node."""
    layouts = "; ".join(
        f"GPU {i}, {i + len(MIXES[mix])}, ...: " + "+".join(LAYOUTS[name])
        for i, name in enumerate(MIXES[mix])
    )
    return (
        f"MIG mix {mix!r}: the same GPUs as 80 GB A100s and H100s (nodes alternate), each "
        f"sliced into MIG instances ({layouts}); an instance is a device of its compute "
        "slices' share of a GPU; capacity is still the physical GPUs"
    )


def mig_table(whole: Sequence[FragRun], sliced: Sequence[FragRun], mix: str) -> Table:
    """Median unallocated GPU % at 100% arrival per protocol and policy, whole GPUs beside
    the MIG mix."""
    table = Table(
        title=f"Unallocated GPU % at {LEVEL}% arrival, median of seeds: whole GPUs and MIG "
        f"mix {mix!r}",
        box=box.SIMPLE,
        title_justify="left",
    )
    for i, column in enumerate(("protocol", "policy", "whole GPUs", f"MIG {mix}", "MIG - whole")):
        table.add_column(column, justify="left" if i < 2 else "right", no_wrap=i < 2)
    keys = list(dict.fromkeys((r.protocol, r.policy) for r in whole))
    for protocol, policy in keys:
        a = [r for r in whole if (r.protocol, r.policy) == (protocol, policy)]
        b = [r for r in sliced if (r.protocol, r.policy) == (protocol, policy)]
        if not a or not b:
            continue
        x, y = median_unallocated(a, LEVEL), median_unallocated(b, LEVEL)
        table.add_row(protocol, policy, f"{x:.2f}", f"{y:.2f}", f"{y - x:+.2f}")
    return table
