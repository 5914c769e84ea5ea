"""Which assumption of the PICASO time model moves its results: a sweep.

The simulator's unit-latency model (:class:`coshare.sim.picaso.Timing`) prices a link
crossed and a message handled at one unit each; the paper (TilePro64, NoCMsg over the UDN)
publishes no such constants, so none is fitted. Two results differ from the paper's: the
parallel-12 gains of active cancellation (section 7.2: +21/+58/+73/+48% per job) and
Fig. 9's crossover (the sequencer's first wait lower once ``n`` exceeds a quarter of the 49
domains, ``n >= 13``). This module runs both under one assumption changed at a time (a
different hop or handling cost, a per-message set-up cost at the sender, random link delay,
the sequencer's seat, the adaptive pattern), so the table shows which one moves them and
how far; ``coshare simulate --workload picaso-timing`` prints it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from coshare.alloc.propagation import Pattern
from coshare.sim.picaso import (
    SIDE,
    Timing,
    WorstPoint,
    change_pct,
    crossover,
    run_scenario,
    run_worst,
)

#: The ``n`` of Fig. 9 the sweep runs (every ``n`` costs as much as the rest together
#: beyond 25; the paper's quarter, 13, is among them).
WORST_COUNTS = (1, 2, 3, 4, 6, 8, 10, 13, 16, 20, 25, 31, 37, 43, 49)


@dataclass(frozen=True)
class Assumption:
    """One variant of the time model.

    Attributes:
        name: how the table names it.
        timing: the unit costs.
        sequencer: the sequencer's domain (``None``: the tile's centre).
        pattern: the propagation pattern.
    """

    name: str
    timing: Timing = field(default_factory=Timing)
    sequencer: int | None = None
    pattern: Pattern = "fixed"


#: The variants, the first being the model every other figure uses.
ASSUMPTIONS = (
    Assumption("unit latency (every figure)"),
    Assumption("handling 4 units", Timing(handle_units=4)),
    Assumption("hop 4 units", Timing(hop_units=4)),
    Assumption("set-up 1 unit per message sent", Timing(send_units=1)),
    Assumption("set-up 1, hop 4, handling 4", Timing(hop_units=4, handle_units=4, send_units=1)),
    Assumption("link delay +0..2 units", Timing(jitter_units=2)),
    Assumption("link delay +0..8 units", Timing(jitter_units=8)),
    Assumption("sequencer in a corner", sequencer=0),
    Assumption("adaptive pattern", pattern="adaptive"),
)


@dataclass(frozen=True)
class TimingRow:
    """One assumption's results.

    Attributes:
        assumption: the variant.
        parallel12: active cancellation's change against the sequencer per job (%), from
            the waits averaged over the seeds (the paper averages 15 runs).
        worst: Fig. 9's points.
    """

    assumption: Assumption
    parallel12: tuple[float, ...]
    worst: tuple[WorstPoint, ...]

    @property
    def crossover(self) -> int | None:
        """The smallest ``n`` from which the sequencer's mean first wait stays lower."""
        return crossover(self.worst)

    @property
    def sequencer_lower(self) -> int:
        """At how many of the ``n`` run the sequencer's mean first wait is lower."""
        return sum(p.mean("sequencer") < p.mean("cancel") for p in self.worst)


def parallel12(assumption: Assumption, seeds: Sequence[int]) -> tuple[float, ...]:
    """The parallel-12 change per job, waits averaged over ``seeds`` (one run without link
    delay: nothing else is drawn)."""
    drawn = seeds if assumption.timing.jitter_units > 0 else seeds[:1]
    totals = {"cancel": [0.0] * 4, "sequencer": [0.0] * 4}
    for seed in drawn:
        timing = replace(assumption.timing, seed=seed)
        result = run_scenario("parallel-12", assumption.pattern, timing, assumption.sequencer)
        for policy, sums in totals.items():
            for i, wait in enumerate(result.waits(policy)):
                sums[i] += wait
    return tuple(
        change_pct(ac, seq) for ac, seq in zip(totals["cancel"], totals["sequencer"], strict=True)
    )


def run_assumption(
    assumption: Assumption, seeds: Sequence[int], counts: Sequence[int] = WORST_COUNTS
) -> TimingRow:
    """Parallel-12 and Fig. 9 (on ``counts``) under ``assumption``."""
    if not seeds:
        raise ValueError("at least one seed")
    if any(not 1 <= n <= SIDE * SIDE for n in counts):
        raise ValueError(f"every n must be 1..{SIDE * SIDE}")
    worst = run_worst(counts, seeds, assumption.pattern, assumption.timing, assumption.sequencer)
    return TimingRow(assumption, parallel12(assumption, seeds), tuple(worst))


def run_timing_sweep(
    seeds: Sequence[int],
    assumptions: Sequence[Assumption] = ASSUMPTIONS,
    counts: Sequence[int] = WORST_COUNTS,
) -> list[TimingRow]:
    """Every assumption's row."""
    return [run_assumption(a, seeds, counts) for a in assumptions]
