"""Fair share: the order a scheduler gives jobs by how much their users have used lately.

Slurm's classic fair-share factor (its ``priority/multifactor`` plugin without Fair Tree):
each user's usage (core-seconds) decays with a half-life (``PriorityDecayHalfLife``, 7 days by
default), and a user's factor is ``F = 2^(-U/S)``, ``U`` the user's share of all decayed usage
and ``S`` the user's share of all shares: a user who used nothing has 1, one who used exactly
their share has 0.5, one who used everything while holding half the shares has 0.25. Jobs of a
user with a larger factor go first; among equal factors, the older first.

The simulator orders jobs by it (``--order scheduler``), beside coshare's own order (priority,
then submit time: ``--order coshare``), so an admin sees what taking over the order of the
jobs does to each user's waits.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Slurm's default ``PriorityDecayHalfLife`` (7 days).
DEFAULT_HALF_LIFE_S = 7 * 86400.0
#: The factor as an integer priority: Slurm's own priorities are integers too.
SCALE = 1_000_000


@dataclass
class FairShare:
    """Decayed usage per user and the fair-share factor from it.

    Attributes:
        half_life_s: usage halves in this time (0: no decay).
        shares: each user's shares; a user not named has ``default_shares``.
        default_shares: shares of a user not in ``shares`` (equal shares by default).
    """

    half_life_s: float = DEFAULT_HALF_LIFE_S
    shares: Mapping[str, float] = field(default_factory=dict)
    default_shares: float = 1.0
    usage: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    last_s: float | None = None

    def accrue(self, running: Iterable[tuple[str, float]], now_s: float) -> None:
        """Decay the usage to ``now_s``, then charge each running ``(user, cores)`` for the
        time since the last call (what Slurm does every ``PriorityCalcPeriod``)."""
        if self.last_s is not None and now_s > self.last_s:
            elapsed = now_s - self.last_s
            if self.half_life_s > 0:
                decay = math.pow(2.0, -elapsed / self.half_life_s)
                for user in self.usage:
                    self.usage[user] *= decay
            for user, cores in running:
                self.usage[user] = self.usage.get(user, 0.0) + cores * elapsed
        self.last_s = now_s if self.last_s is None else max(self.last_s, now_s)

    def factors(self, users: Iterable[str]) -> dict[str, float]:
        """``2^(-U/S)`` of each of ``users`` (1.0 while nobody has used anything); the users
        asked of once count among those holding shares from then on."""
        wanted = set(users)
        self.seen |= wanted
        total = sum(self.usage.values())
        if total <= 0:
            return dict.fromkeys(wanted, 1.0)
        holders = self.seen | set(self.usage)
        shares = sum(self.shares.get(u, self.default_shares) for u in holders)
        out = {}
        for user in wanted:
            mine = self.shares.get(user, self.default_shares)
            if shares <= 0 or mine <= 0:
                out[user] = 0.0
                continue
            out[user] = math.pow(2.0, -(self.usage.get(user, 0.0) / total) / (mine / shares))
        return out

    def priorities(self, users: Iterable[str]) -> dict[str, int]:
        """The factors as integer priorities (higher first)."""
        return {u: round(f * SCALE) for u, f in self.factors(users).items()}
