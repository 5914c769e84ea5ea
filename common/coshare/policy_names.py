"""The planning policies' names, without importing them (they need numpy, the ``planner``
extra): for the command line's help, which every node loads.

:func:`coshare.policies.policy_names` is the registry; a unit test keeps the two equal.
"""

from __future__ import annotations

#: Every name :func:`coshare.policies.make_policy` accepts, sorted.
POLICY_NAMES: tuple[str, ...] = (
    "bestfit",
    "collocate",
    "cs",
    "exclusive",
    "fgd",
    "knapsack",
    "membw",
    "random",
    "sharepack",
    "sns",
)

#: The policy of a configuration that names none (:data:`coshare.policies.DEFAULT_POLICY`).
DEFAULT_POLICY = "sharepack"
