"""Pattern-based message propagation (section 4.4) and the broadcast schemes of section 7.6.

A request (core allocation, job spawn, job cancel) goes from one domain to every other over
a spanning tree rooted at its source, so it crosses each tree edge once: ``N - 1`` messages
for ``N`` domains.

- **Fixed pattern** (Fig. 3(a), (b)): the source's column carries the message north and
  south; every node of that column carries it east and west along its row. A node is
  reached over a shortest path (depth = Manhattan distance); it needs the mesh.
- **Adaptive pattern**: once, at start-up, an empty message floods from the source; each
  node keeps as *preferred source* the neighbour whose copy arrived first (unit latency:
  one hop per time unit), lowest id on ties, and tells it so. Later messages follow these
  choices. It needs only the links. Fig. 3(c) draws one such tree for a 3 x 3 tile; the
  paper leaves the tie rule open ("the first received request or shortest distance"), and
  with lowest-id ties nodes 6 and 9 pick 3 and 6 where the figure picks 5 and 8: same
  message count and depth, another tree.

Section 7.6 counts, on an ``n x n`` tile: naive broadcast ``n^2 - 1`` (one unicast per
recipient), distributed flooding ``2n(n - 1)`` (every link once), fixed and adaptive
``n^2 - 1`` (adaptive plus a one-off set-up: one flood and ``n^2 - 1`` "preferred source"
notes). :func:`broadcast_messages` computes them by walking the schemes; the formulas are
:func:`paper_broadcast_messages`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from coshare.alloc.layout import Layout

Pattern = Literal["fixed", "adaptive"]
PATTERNS: tuple[Pattern, ...] = ("fixed", "adaptive")
Scheme = Literal["naive", "flooding", "fixed", "adaptive"]
SCHEMES: tuple[Scheme, ...] = ("naive", "flooding", "fixed", "adaptive")


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def fixed_parents(layout: Layout, source: int) -> dict[int, int]:
    """Each node's parent in the fixed pattern rooted at ``source`` (Fig. 3(a), (b))."""
    r0, c0 = layout.position(source)
    parents: dict[int, int] = {}
    for node in range(layout.size):
        if node == source:
            continue
        r, c = layout.position(node)
        if c == c0:  # the source's column: the vertical arm
            parents[node] = (r - _sign(r - r0)) * layout.cols + c
        else:  # along the row, back toward the arm
            parents[node] = r * layout.cols + (c - _sign(c - c0))
    return parents


def distances(layout: Layout, source: int) -> list[int]:
    """Hops from ``source`` to every node over the layout's links (breadth first)."""
    dist = [-1] * layout.size
    dist[source] = 0
    todo = deque([source])
    while todo:
        node = todo.popleft()
        for other in layout.neighbours(node):
            if dist[other] < 0:
                dist[other] = dist[node] + 1
                todo.append(other)
    return dist


def adaptive_parents(layout: Layout, source: int) -> dict[int, int]:
    """Each node's preferred source after the adaptive set-up flood from ``source``: the
    neighbour whose copy arrived first under unit latency (one hop closer), lowest id first."""
    dist = distances(layout, source)
    return {
        node: min(o for o in layout.neighbours(node) if dist[o] == dist[node] - 1)
        for node in range(layout.size)
        if node != source
    }


@dataclass
class Propagation:
    """Spanning trees of one pattern over one layout, built per source on first use.

    Attributes:
        layout: the domains and their links.
        pattern: ``fixed`` or ``adaptive``.
    """

    layout: Layout
    pattern: Pattern = "fixed"
    _children: dict[int, dict[int, tuple[int, ...]]] = field(default_factory=dict, repr=False)

    def parents(self, root: int) -> dict[int, int]:
        """Each node's parent in the tree rooted at ``root``."""
        if self.pattern == "fixed":
            return fixed_parents(self.layout, root)
        return adaptive_parents(self.layout, root)

    def children(self, root: int, node: int) -> tuple[int, ...]:
        """Where ``node`` forwards a message that started at ``root``."""
        if root not in self._children:
            kids: dict[int, list[int]] = {n: [] for n in range(self.layout.size)}
            for child, parent in sorted(self.parents(root).items()):
                kids[parent].append(child)
            self._children[root] = {n: tuple(c) for n, c in kids.items()}
        return self._children[root][node]

    def edges(self, root: int) -> int:
        """Messages one propagation from ``root`` sends: the tree's edges."""
        return sum(len(self.children(root, n)) for n in range(self.layout.size))

    def setup_messages(self, root: int) -> int:
        """Messages of the one-off set-up for ``root``'s tree: none for the fixed pattern;
        for the adaptive one the flood plus one note per node to its preferred source."""
        if self.pattern == "fixed":
            return 0
        return flooding_messages(self.layout, root) + self.layout.size - 1


def flooding_messages(layout: Layout, source: int) -> int:
    """Messages of distributed flooding from ``source`` under unit latency: a node forwards
    the first copy to every neighbour it has not already heard from, i.e. to those no
    closer to the source than itself (on a mesh, bipartite, that is every link once)."""
    dist = distances(layout, source)
    return sum(
        1
        for node in range(layout.size)
        for other in layout.neighbours(node)
        if dist[other] >= dist[node]
    )


def broadcast_messages(layout: Layout, source: int, scheme: Scheme) -> int:
    """Messages one broadcast from ``source`` to every other domain sends under ``scheme``,
    counted by walking the scheme (not by formula)."""
    if scheme == "naive":
        return len([d for d in range(layout.size) if d != source])
    if scheme == "flooding":
        return flooding_messages(layout, source)
    return Propagation(layout, scheme).edges(source)


def paper_broadcast_messages(n: int, scheme: Scheme) -> int:
    """Section 7.6's count for an ``n x n`` tile: ``2n(n - 1)`` for flooding, ``n^2 - 1``
    for the others."""
    return 2 * n * (n - 1) if scheme == "flooding" else n * n - 1
