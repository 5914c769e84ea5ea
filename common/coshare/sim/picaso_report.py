"""What ``coshare simulate --workload picaso-*`` prints: the distributed allocation
protocol's waits and message counts beside the paper's. It renders with rich, as
:mod:`coshare.sim.report` does, so it is one of the simulator's I/O modules
(tests/unit/test_purity.py); the runs themselves are :mod:`coshare.sim.picaso`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from coshare.alloc.propagation import SCHEMES
from coshare.sim.picaso import (
    ALL_PARTS,
    CORES_PER_DOMAIN,
    LONG_RUN,
    PAPER_CHANGE,
    SCENARIOS,
    SHORT_RUN,
    SIDE,
    PropagationRow,
    ProtocolRun,
    ScenarioResult,
    TilePoint,
    WorstPoint,
    change_pct,
    crossover,
    run_propagation,
    run_scenario,
    run_tiles,
    run_worst,
)
from coshare.sim.picaso_timing import WORST_COUNTS, TimingRow, run_timing_sweep
from coshare.sim.report import render

POLICY_NAMES = {"cancel": "active cancellation", "sequencer": "sequencer"}
#: Fig. 8's text: the first job's wait falls by 6% (2 x 2) to 60% (7 x 7) under active
#: cancellation; the last job's rises 1-12% on 2 x 2 and 3 x 3 and falls up to 15% beyond.
PAPER_TILES = {
    "first": "+6% (2x2) .. +60% (7x7)",
    "last": "-1..-12% (2x2, 3x3); up to +15% (larger)",
}
#: Section 7.4: the sequencer's first wait is lower once more than a quarter of the 49
#: domains request at once.
PAPER_CROSSOVER = SIDE * SIDE / 4


def _table(title: str, columns: Sequence[str]) -> Table:
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return table


def _formula_ok(run: ProtocolRun) -> bool:
    return all(run.messages[k] == v for k, v in run.expected.items())


def _run_json(run: ProtocolRun) -> dict[str, Any]:
    return {
        "policy": run.policy,
        "pattern": run.pattern,
        "sequencer": run.sequencer,
        "jobs": [
            {
                "id": r.job.id,
                "home": r.job.home,
                "cores": r.job.cores,
                "wait": r.wait,
                "attempts": r.attempts,
                "cancels": r.cancels,
                "local": r.local,
            }
            for r in run.jobs
        ],
        "messages": run.messages,
        "expected": run.expected,
        "formula_matches": _formula_ok(run),
        "link_crossings": run.link_crossings,
        "refused": [r.message for r in run.refused],
    }


def scenario_table(results: Sequence[ScenarioResult]) -> tuple[Table, dict[str, Any]]:
    """Figs. 5-7: per scenario and policy the waits of the 1st..4th job allocated, active
    cancellation's change against the sequencer beside the paper's, and the messages."""
    table = _table(
        f"Section 7.2, Figs. 5-7: four simultaneous jobs from the corners of a "
        f"{SIDE} x {SIDE} tile ({CORES_PER_DOMAIN} cores per domain; run "
        f"{SHORT_RUN} unit short, {LONG_RUN} long; fixed pattern; time unit = one "
        "hop or one handled message)",
        (
            "scenario",
            "policy",
            "waits (1st..4th allocated)",
            "AC change %",
            "paper AC change %",
            "messages",
            "cancels",
            "formula",
        ),
    )
    payload: dict[str, Any] = {}
    for result in results:
        change = result.change()
        for policy, run in result.runs.items():
            is_ac = policy == "cancel"
            table.add_row(
                result.name if is_ac else "",
                POLICY_NAMES[policy],
                " ".join(map(str, result.waits(policy))),
                " ".join(f"{c:+.0f}" for c in change) if is_ac else "",
                " ".join(PAPER_CHANGE[result.name]) if is_ac else "",
                str(run.total_messages),
                str(sum(r.cancels for r in run.jobs)),
                "matches" if _formula_ok(run) else "DIFFERS",
            )
        payload[result.name] = {
            "change_pct": [round(c, 1) for c in change],
            "paper_change_pct": list(PAPER_CHANGE[result.name]),
            "runs": {p: _run_json(r) for p, r in result.runs.items()},
        }
    return table, payload


def tiles_table(points: Sequence[TilePoint]) -> tuple[Table, list[dict[str, Any]]]:
    """Fig. 8 and section 7.3's count: per tile, first and last waits and the request and
    cancel propagations against ``1 + 3(n - 1)``."""
    table = _table(
        "Section 7.3, Fig. 8: n x n tile, n simultaneous jobs of n domains each "
        "(homes on the diagonal); paper, AC change: first job "
        f"{PAPER_TILES['first']}, last job {PAPER_TILES['last']}",
        (
            "tile",
            "AC first/last",
            "seq first/last",
            "AC change first/last %",
            "AC propagations (req+cancel)",
            "paper 1+3(n-1)",
            "messages AC / seq",
        ),
    )
    rows = []
    for point in points:
        ac, seq = point.first_last("cancel"), point.first_last("sequencer")
        first, last = change_pct(ac[0], seq[0]), change_pct(ac[1], seq[1])
        runs = point.runs
        table.add_row(
            f"{point.n}x{point.n}",
            f"{ac[0]}/{ac[1]}",
            f"{seq[0]}/{seq[1]}",
            f"{first:+.0f}/{last:+.0f}",
            str(runs["cancel"].broadcasts()),
            str(point.paper_broadcasts),
            f"{runs['cancel'].total_messages} / {runs['sequencer'].total_messages}",
        )
        rows.append(
            {
                "n": point.n,
                "first_last": {"cancel": ac, "sequencer": seq},
                "change_pct": [round(first, 1), round(last, 1)],
                "propagations": runs["cancel"].broadcasts(),
                "paper_propagations": point.paper_broadcasts,
                "runs": {p: _run_json(r) for p, r in runs.items()},
            }
        )
    return table, rows


def worst_table(points: Sequence[WorstPoint], seeds: int) -> tuple[Table, str, dict[str, Any]]:
    """Fig. 9: the first allocated job's mean wait against ``n``, and the crossover."""
    table = _table(
        f"Section 7.4, Fig. 9: {SIDE} x {SIDE}, n simultaneous jobs of all "
        f"{SIDE * SIDE} domains from n homes drawn per seed ({seeds} seeds); wait "
        "of the first job allocated (mean)",
        ("n", "active cancellation", "sequencer", "lower", "messages AC / seq"),
    )
    for point in points:
        ac, seq = point.mean("cancel"), point.mean("sequencer")
        msgs = {p: sum(v) / len(v) for p, v in point.messages.items()}
        table.add_row(
            str(point.n),
            f"{ac:.1f}",
            f"{seq:.1f}",
            "sequencer" if seq < ac else "AC" if ac < seq else "tie",
            f"{msgs['cancel']:.0f} / {msgs['sequencer']:.0f}",
        )
    cross = crossover(points)
    total = SIDE * SIDE
    line = (
        f"crossover: the sequencer's first wait is lower from n = {cross} of {total} "
        f"domains ({cross / total:.0%}) on; paper: once n exceeds a quarter "
        f"({PAPER_CROSSOVER:.2f}, n >= 13)"
        if cross is not None
        else "crossover: the sequencer never stays lower; paper: from n > 12.25"
    )
    payload = {
        "points": [{"n": p.n, "first_wait": p.first_wait, "messages": p.messages} for p in points],
        "crossover": cross,
        "paper_crossover_above": PAPER_CROSSOVER,
    }
    return table, line, payload


def timing_table(rows: Sequence[TimingRow], seeds: int) -> tuple[Table, str, dict[str, Any]]:
    """The time-model sweep: per assumption, parallel-12's changes and Fig. 9's crossover,
    the paper's first."""
    counts = ", ".join(map(str, WORST_COUNTS))
    table = _table(
        f"PICASO time model, one assumption changed at a time ({seeds} seeds): "
        "parallel-12's AC change % (1st..4th job allocated) and Fig. 9 on n = "
        f"{counts}",
        (
            "assumption",
            "parallel-12 AC change %",
            "Fig. 9 crossover",
            "seq lower at",
            "n=1 AC / seq",
            "n=49 AC / seq",
        ),
    )
    table.add_row(
        "paper (section 7.2 text, 7.4)",
        " ".join(PAPER_CHANGE["parallel-12"]),
        f"n > {PAPER_CROSSOVER:.2f}",
        "-",
        "-",
        "-",
    )
    out = []
    for row in rows:
        first, last = row.worst[0], row.worst[-1]
        cross = row.crossover
        table.add_row(
            row.assumption.name,
            " ".join(f"{c:+.0f}" for c in row.parallel12),
            "never stays lower" if cross is None else f"n = {cross}",
            f"{row.sequencer_lower} of {len(row.worst)}",
            f"{first.mean('cancel'):.0f} / {first.mean('sequencer'):.0f}",
            f"{last.mean('cancel'):.0f} / {last.mean('sequencer'):.0f}",
        )
        out.append(
            {
                "assumption": row.assumption.name,
                "timing": {
                    "hop_units": row.assumption.timing.hop_units,
                    "handle_units": row.assumption.timing.handle_units,
                    "send_units": row.assumption.timing.send_units,
                    "jitter_units": row.assumption.timing.jitter_units,
                },
                "sequencer": row.assumption.sequencer,
                "pattern": row.assumption.pattern,
                "parallel12_change_pct": [round(c, 1) for c in row.parallel12],
                "crossover": cross,
                "sequencer_lower": row.sequencer_lower,
                "worst": [
                    {"n": p.n, "cancel": p.mean("cancel"), "sequencer": p.mean("sequencer")}
                    for p in row.worst
                ],
            }
        )
    line = (
        "Fig. 9 crossover: the smallest n run from which the sequencer's mean first wait "
        "stays lower; seq lower at: at how many of the n run it is lower. Link delay is "
        "drawn per seed; every other row is deterministic (parallel-12 runs once)."
    )
    return table, line, {"counts": list(WORST_COUNTS), "rows": out}


def propagation_table(rows: Sequence[PropagationRow]) -> tuple[Table, list[dict[str, Any]]]:
    """Section 7.6: messages of one broadcast from the corner, counted and by the formula."""
    table = _table(
        "Section 7.6: messages per broadcast from a corner (counted by walking the "
        "scheme [paper's formula]); adaptive set-up once per source",
        ("tile", *SCHEMES, "adaptive set-up", "tree depth fixed/adaptive"),
    )
    out = []
    for row in rows:
        table.add_row(
            f"{row.n}x{row.n}",
            *(f"{row.counted[s]} [{row.paper[s]}]" for s in SCHEMES),
            str(row.adaptive_setup),
            f"{row.depth['fixed']}/{row.depth['adaptive']}",
        )
        out.append(
            {
                "n": row.n,
                "counted": row.counted,
                "paper": row.paper,
                "adaptive_setup": row.adaptive_setup,
                "depth": row.depth,
            }
        )
    return table, out


def picaso_outcome(part: str, seeds: Sequence[int]) -> tuple[str, dict[str, Any]]:
    """The text and JSON of ``coshare simulate --workload picaso[-PART]``.

    Args:
        part: one of :data:`PARTS`, or ``all``.
        seeds: the seeds that draw the homes of the worst case (Fig. 9).
    """
    parts = ALL_PARTS if part == "all" else (part,)
    items: list[Table | str] = []
    payload: dict[str, Any] = {
        "model": "unit latency: 1 unit per link crossed, 1 unit per "
        "message handled, one at a time per domain"
    }
    scenarios = [run_scenario(p) for p in parts if p in SCENARIOS]
    if scenarios:
        table, data = scenario_table(scenarios)
        items.append(table)
        payload["scenarios"] = data
    if "tiles" in parts:
        table, rows = tiles_table(run_tiles())
        items.append(table)
        payload["tiles"] = rows
    if "worst" in parts:
        table, line, data = worst_table(run_worst(seeds=seeds), len(seeds))
        items += [table, line]
        payload["worst"] = data
    if "timing" in parts:
        table, line, data = timing_table(run_timing_sweep(seeds), len(seeds))
        items += [table, line]
        payload["timing"] = data
    if "propagation" in parts:
        table, rows = propagation_table(run_propagation())
        items.append(table)
        payload["propagation"] = rows
    items.append(
        "AC change % = (O_seq - O_ac) / O_seq per job in allocation order (the "
        "paper's convention: positive = active cancellation waits less); formula = "
        "the messages sent equal section 4's counts from the protocol's attempts and "
        "cancels (answers excluded)."
    )
    return render(*items), payload
