"""LLC way and memory-bandwidth allocation as resctrl writes them: masks and schemata (pure).

Spread-n-Share gives each job its own LLC ways (Intel CAT, AMD L3 QoS) and, where the
processor has it, a memory-bandwidth share (MBA), section 4.4. Linux exposes both through
resctrl (Documentation/arch/x86/resctrl.rst), and this module holds its rules:

- A cache allocation is a *capacity bitmask* (CBM) per cache domain; ``info/L3/cbm_mask``
  is the mask of all ways ("equivalent to 100%"), ``info/L3/min_cbm_bits`` the fewest
  consecutive bits a mask may have, and Intel requires the set bits to be contiguous ("0x3,
  0x6 and 0xC are legal 4-bit masks with two bits set, but 0x5, 0x9 and 0xA are not").
- The ``schemata`` file has one line per resource, ``L3:<cache_id>=<cbm>;<cache_id>=<cbm>``
  (``L3CODE``/``L3DATA`` with code and data prioritization), and ``MB:<cache_id>=<percent>``
  where the percentage is rounded up to the next step ``min_bandwidth + N *
  bandwidth_gran`` of ``info/MB``.

coshare gives each job N contiguous ways that no other coshare job holds (first fit from the
lowest way), the same in every cache domain, so a job's processes keep their ways wherever
they run. Pure: text in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coshare.errors import JobSpecError
from coshare.ledger.llc import spare_shares

#: The resources of a cache allocation: plain L3, or L3 with code/data prioritization.
L3_RESOURCES = ("L3",)
CDP_RESOURCES = ("L3CODE", "L3DATA")


def parse_mask(text: str) -> int:
    """A CBM as resctrl writes it (hexadecimal, no ``0x``).

    Raises:
        ValueError: for anything else.
    """
    value = text.strip().lower().removeprefix("0x")
    if not value or len(value) > 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"{text.strip()[:40]!r} is not a cache bitmask")
    return int(value, 16)


def ways_of(mask: int) -> int:
    """Ways (set bits) of a mask."""
    return bin(mask).count("1")


def runs(mask: int) -> list[tuple[int, int]]:
    """The contiguous runs of set bits: ``(first bit, length)``, lowest first."""
    out: list[tuple[int, int]] = []
    bit = 0
    while mask >> bit:
        if (mask >> bit) & 1:
            start = bit
            while (mask >> bit) & 1:
                bit += 1
            out.append((start, bit - start))
        else:
            bit += 1
    return out


def format_runs(mask: int) -> str:
    """Ways of a mask for messages: ``0-3,8-11`` (bit numbers), or ``none``."""
    return ",".join(f"{s}-{s + n - 1}" if n > 1 else str(s) for s, n in runs(mask)) or "none"


def choose_ways(full_mask: int, used: Iterable[int], ways: int, min_bits: int) -> int:
    """N contiguous ways of ``full_mask`` that no mask in ``used`` holds: the lowest that fit.

    Raises:
        JobSpecError: ``ways`` outside ``min_bits..`` the node's ways, or no run of that many
            free ways (naming the free ones).
    """
    total = ways_of(full_mask)
    if not max(min_bits, 1) <= ways <= total:
        raise JobSpecError(
            f"llc_ways={ways}: this node's L3 has {total} ways and takes at "
            f"least {max(min_bits, 1)} per group (allowed: "
            f"{max(min_bits, 1)}..{total})"
        )
    taken = 0
    for mask in used:
        taken |= mask
    free = full_mask & ~taken
    for start, length in runs(free):
        if length >= ways:
            return ((1 << ways) - 1) << start
    raise JobSpecError(
        f"llc_ways={ways}: no {ways} contiguous ways are free (free ways: "
        f"{format_runs(free)} of {format_runs(full_mask)}); they are held by "
        "other jobs' groups"
    )


def mb_percent(percent: int, min_bandwidth: int, granularity: int) -> int:
    """A memory-bandwidth percentage rounded up to the hardware's next step
    (``min_bandwidth + N * bandwidth_gran``), at most 100.

    Raises:
        JobSpecError: a percentage outside 1..100.
    """
    if not 1 <= percent <= 100:
        raise JobSpecError(f"membw_percent={percent} (allowed: 1..100)")
    if percent <= min_bandwidth:
        return min_bandwidth
    steps = -(-(percent - min_bandwidth) // max(granularity, 1))
    return min(min_bandwidth + steps * max(granularity, 1), 100)


@dataclass(frozen=True)
class Schemata:
    """A parsed ``schemata`` file: per resource, the value of each cache domain."""

    lines: Mapping[str, Mapping[str, str]]

    def domains(self, resource: str) -> tuple[str, ...]:
        """The cache ids a resource has (``("0", "1")`` on two sockets)."""
        return tuple(self.lines.get(resource, {}))

    def mask(self, resource: str, domain: str) -> int | None:
        """The CBM of a cache resource in one domain, ``None`` when absent or unreadable."""
        value = self.lines.get(resource, {}).get(domain)
        if value is None:
            return None
        try:
            return parse_mask(value)
        except ValueError:
            return None


def parse_schemata(text: str) -> Schemata:
    """Read a ``schemata`` file (``L3:0=fffff;1=fffff`` lines; the kernel pads some values
    with spaces: ``MB:0=2048;1=  16``).

    Raises:
        ValueError: a line that is not ``RESOURCE:id=value;...``.
    """
    lines: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        resource, colon, body = line.partition(":")
        if not colon or not resource.strip():
            raise ValueError(f"schemata line {line[:60]!r} is not RESOURCE:id=value;...")
        values: dict[str, str] = {}
        for item in body.split(";"):
            if not item.strip():
                continue
            domain, equals, value = item.partition("=")
            if not equals:
                raise ValueError(f"schemata item {item[:40]!r} is not id=value")
            values[domain.strip()] = value.strip()
        lines[resource.strip()] = values
    return Schemata(lines)


def schemata_text(
    resources: Iterable[str],
    domains: Iterable[str],
    mask: int | None,
    mb: int | None,
    mb_domains: Iterable[str] = (),
) -> str:
    """The lines coshare writes into a job's ``schemata``: the same mask in every cache
    domain, and an ``MB:`` line when a bandwidth share is given."""
    ids = list(domains)
    lines = []
    if mask is not None:
        lines += [f"{r}:" + ";".join(f"{d}={mask:x}" for d in ids) for r in resources]
    if mb is not None:
        lines.append("MB:" + ";".join(f"{d}={mb}" for d in (list(mb_domains) or ids)))
    return "\n".join(lines) + "\n"


def layout_masks(
    full_mask: int, allocations: Sequence[tuple[str, int]], share_spare: bool
) -> dict[str, int]:
    """Every coshare job's mask on a node, laid out afresh: contiguous, disjoint runs from the
    lowest way in ``allocations``' order, each of the job's ways plus, with ``share_spare``,
    its share of the ways no job is allocated (:func:`coshare.ledger.llc.spare_shares`, Spread-n-
    Share section 4.4). Laying all of them out again (rather than first fit into holes) is
    what gives spare ways away and reclaims them when a job comes: any allocations that add
    up to at most the node's ways fit.

    Raises:
        JobSpecError: the allocations add up to more ways than ``full_mask`` has.
    """
    total = ways_of(full_mask)
    need = sum(w for _, w in allocations)
    if need > total:
        held = ", ".join(f"{job}: {w}" for job, w in allocations[:-1])
        last, ways = allocations[-1]
        raise JobSpecError(
            f"llc_ways={ways} for job {last}: this node's L3 has {total} ways "
            f"and coshare jobs hold {need - ways} ({held or 'none'})"
        )
    extra = spare_shares(total, allocations) if share_spare else {}
    bit = runs(full_mask)[0][0] if full_mask else 0
    out: dict[str, int] = {}
    for job, ways in allocations:
        count = ways + extra.get(job, 0)
        out[job] = ((1 << count) - 1) << bit
        bit += count
    return out
