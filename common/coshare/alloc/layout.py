"""Domains and their layout: which cores each domain manager owns, where it sits on the mesh.

A domain (the paper's micro-kernel domain, section 2) owns the cores of some nodes; a core is
named ``node/index``. Domains sit on a ``rows x cols`` mesh (the paper's tile of domain
managers, section 6: 2 x 2 to 7 x 7) and talk to their four neighbours; the fixed propagation
pattern needs the mesh, the adaptive one only the links (section 4.4).

Bad input is refused at construction with one message: a node claimed by two domains names
both (two planners over the same nodes would book a device twice), a domain
without cores, a mesh that does not match the domain count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coshare.errors import InputError

#: The largest mesh side and cores per node a layout accepts (absurd sizes are refused).
MAX_SIDE = 64
MAX_CORES_PER_NODE = 4096


@dataclass(frozen=True)
class Domain:
    """One scheduling domain.

    Attributes:
        name: unique name (a schedd, a partition, a cluster; ``d0`` .. in the paper's tiles).
        nodes: ``(node, cores)`` pairs: the nodes this domain allocates and their core count.
    """

    name: str
    nodes: tuple[tuple[str, int], ...]

    def cores(self) -> tuple[str, ...]:
        """Every core of the domain, ``node/index``, in node order."""
        return tuple(f"{node}/{i}" for node, count in self.nodes for i in range(count))

    @property
    def core_count(self) -> int:
        return sum(count for _, count in self.nodes)


@dataclass(frozen=True)
class Layout:
    """Domains on a ``rows x cols`` mesh, row-major: domain ``i`` sits at ``divmod(i, cols)``.

    Raises:
        InputError: a node claimed by two domains (names both), duplicate domain names, a
            domain without cores, core counts outside 1..:data:`MAX_CORES_PER_NODE`, or a
            mesh whose size is not the domain count.
    """

    domains: tuple[Domain, ...]
    rows: int
    cols: int
    _owner: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (1 <= self.rows <= MAX_SIDE and 1 <= self.cols <= MAX_SIDE):
            raise InputError(f"layout: mesh {self.rows} x {self.cols}; each side 1..{MAX_SIDE}")
        if self.rows * self.cols != len(self.domains):
            raise InputError(
                f"layout: a {self.rows} x {self.cols} mesh holds "
                f"{self.rows * self.cols} domains, not {len(self.domains)}"
            )
        names: dict[str, int] = {}
        owner: dict[str, int] = {}
        for index, domain in enumerate(self.domains):
            if domain.name in names:
                raise InputError(f"layout: two domains are named {domain.name!r}")
            names[domain.name] = index
            if not domain.nodes:
                raise InputError(f"domain {domain.name!r}: nodes is empty; want at least one")
            for node, count in domain.nodes:
                if not 1 <= count <= MAX_CORES_PER_NODE:
                    raise InputError(
                        f"domain {domain.name!r}: node {node!r} has {count} "
                        f"cores; allowed 1..{MAX_CORES_PER_NODE}"
                    )
                if node in owner:
                    other = self.domains[owner[node]].name
                    raise InputError(
                        f"layout: node {node!r} is claimed by domain {other!r} "
                        f"and domain {domain.name!r}; a node belongs to one "
                        "domain"
                    )
                owner[node] = index
        object.__setattr__(self, "_owner", owner)

    @property
    def size(self) -> int:
        return len(self.domains)

    @property
    def total_cores(self) -> int:
        return sum(d.core_count for d in self.domains)

    def position(self, domain: int) -> tuple[int, int]:
        """``(row, col)`` of a domain on the mesh."""
        return divmod(domain, self.cols)

    def neighbours(self, domain: int) -> tuple[int, ...]:
        """The domains linked to ``domain`` (north, west, east, south), lowest id first."""
        row, col = self.position(domain)
        out = []
        for dr, dc in ((-1, 0), (0, -1), (0, 1), (1, 0)):
            r, c = row + dr, col + dc
            if 0 <= r < self.rows and 0 <= c < self.cols:
                out.append(r * self.cols + c)
        return tuple(out)

    def hops(self, a: int, b: int) -> int:
        """Links a message crosses from ``a`` to ``b`` (X-Y routing: the Manhattan distance)."""
        (ra, ca), (rb, cb) = self.position(a), self.position(b)
        return abs(ra - rb) + abs(ca - cb)

    def links(self) -> int:
        """Links of the mesh: ``rows (cols - 1) + cols (rows - 1)`` (``2n(n - 1)`` on a tile)."""
        return self.rows * (self.cols - 1) + self.cols * (self.rows - 1)

    def centre(self) -> int:
        """The domain with the smallest largest distance to any other, lowest id on ties (the
        sequencer's seat: the paper elects one, section 4.3, and does not say which)."""
        return min(
            range(self.size), key=lambda d: (max(self.hops(d, o) for o in range(self.size)), d)
        )


def tile(rows: int, cols: int | None = None, cores_per_domain: int = 8) -> Layout:
    """The paper's tile: ``rows x cols`` domains ``d0``, ``d1``, ..., each owning one node
    ``nI`` of ``cores_per_domain`` cores (8, the real-task mode's pico-kernels per domain,
    section 6)."""
    cols = rows if cols is None else cols
    if not (1 <= rows <= MAX_SIDE and 1 <= cols <= MAX_SIDE):
        raise InputError(f"tile: {rows} x {cols}; each side 1..{MAX_SIDE}")
    return Layout(
        tuple(Domain(f"d{i}", ((f"n{i}", cores_per_domain),)) for i in range(rows * cols)),
        rows,
        cols,
    )


def layout_of(domains: Sequence[Domain], rows: int, cols: int) -> Layout:
    """A layout from domains given in mesh order (see :class:`Layout` for what it refuses)."""
    return Layout(tuple(domains), rows, cols)
