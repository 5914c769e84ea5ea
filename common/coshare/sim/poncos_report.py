"""What ``coshare simulate --workload poncos`` prints: the admission matrix of Table 1's
applications under the 90% rule beside section 8's decisions, and the schedule of both
queues under each :data:`~coshare.sim.poncos.VARIANTS` with its makespan against running
the queue one job at a time. It renders with rich, as :mod:`coshare.sim.report` does, so
it is one of the simulator's I/O modules (tests/unit/test_purity.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from coshare.sim.engine import SimResult
from coshare.sim.poncos import (
    AVAILABLE_PERCENT,
    MAX_SHARE,
    NAMES,
    PAPER_TEXT_REFUSED,
    QUEUES,
    RUN_ALONE_S,
    USE,
    VARIANTS,
    admits,
    run_queue,
)
from coshare.sim.poncos_trials import (
    CYCLE_S,
    PROBE_S,
    SAMPLE_S,
    TrialSetup,
    run_with_trials,
    summary,
)
from coshare.sim.report import render

#: What section 8 reports of the queues' schedules (its Figs. 7 and 9 print no values).
PAPER_SCHEDULES = {
    "queue 1": "every heat alg. 9 run co-scheduled with a heat alg. 2 run; done when both "
    "alg. 2 runs end; alg. 2 slower when co-scheduled",
    "queue 2": "LAMA alone until measured, then MPIBlast beside it to the end; both LAMA "
    "runs end before MPIBlast",
    "queue 3": "- (coshare's queue: two alg. 2 runs, where the rule has something to do)",
}


def _matrix() -> tuple[Table, list[dict[str, Any]], list[str]]:
    table = Table(
        title=f"Admission under the {MAX_SHARE:.0%} rule (row: running, column: "
        "new; yes = co-scheduled; [paper] where section 8's text differs)",
        box=box.SIMPLE,
        title_justify="left",
    )
    table.add_column("running \\ new (use)", no_wrap=True)
    for p in USE:
        table.add_column(NAMES[p], justify="right")
    rows, differ = [], []
    for old in USE:
        cells = []
        for new in USE:
            ours = admits(old, new)
            paper = not (old in PAPER_TEXT_REFUSED and new in PAPER_TEXT_REFUSED)
            rows.append(
                {
                    "running": old,
                    "new": new,
                    "sum": round(USE[old] + USE[new], 3),
                    "coshare": ours,
                    "paper_text": paper,
                }
            )
            cell = "yes" if ours else "no"
            if ours != paper:
                cell += f" [{'yes' if paper else 'no'}]"
                if list(USE).index(old) <= list(USE).index(new):
                    differ.append(f"{NAMES[old]} + {NAMES[new]}")
            cells.append(cell)
        table.add_row(f"{NAMES[old]} ({USE[old]:.3f})", *cells)
    return table, rows, differ


def _schedules() -> tuple[list[Table], dict[str, Any]]:
    tables: list[Table] = []
    payload: dict[str, Any] = {}
    for name, queue in QUEUES.items():
        runs = {v.name: run_queue(queue, v) for v in VARIANTS}
        base = runs["dedicated"].makespan_s
        table = Table(
            title=f"{name}: {', '.join(queue)} (each {RUN_ALONE_S:g} s alone, "
            "assumed); paper: " + PAPER_SCHEDULES[name],
            box=box.SIMPLE,
            title_justify="left",
        )
        for column in ("variant", "makespan s", "vs dedicated", "co-runs (start-end s)"):
            table.add_column(column, justify="left" if column != "makespan s" else "right")
        payload[name] = {}
        for variant in VARIANTS:
            run = runs[variant.name]
            table.add_row(
                variant.name,
                f"{run.makespan_s:.1f}",
                f"{run.makespan_s / base - 1:+.1%}" if base else "-",
                _order(run),
            )
            payload[name][variant.name] = {
                "note": variant.note,
                "makespan_s": round(run.makespan_s, 3),
                "jobs": [
                    {"id": r.id, "start_s": r.start_s, "end_s": r.end_s, "slowdown": r.slowdown}
                    for r in run.jobs
                ],
            }
        tables.append(table)
    return tables, payload


def _order(run: SimResult) -> str:
    """Each job with its start and end, in start order (job ids name queue position and
    program)."""
    jobs = sorted(
        (r for r in run.jobs if r.start_s is not None), key=lambda r: (r.start_s or 0.0, r.id)
    )
    return ", ".join(f"{r.id} {r.start_s:.0f}-{r.end_s or 0:.0f}" for r in jobs)


def poncos_outcome(
    trials: str = "off", noise: float = 0.0, seeds: Sequence[int] = (0,)
) -> tuple[str, dict[str, Any]]:
    """The text and JSON of ``coshare simulate --workload poncos``; with ``trials`` ``on`` or
    ``both``, also the queues through poncos' own sequence (:func:`trials_outcome`)."""
    matrix, rows, differ = _matrix()
    schedules, payload = _schedules()
    notes = [
        "Table 1 (input): available % "
        + ", ".join(f"{NAMES[p]} {a:g}" for p, a in AVAILABLE_PERCENT.items())
        + "; use = 1 - available.",
        "Section 8's text excludes Hydro, LAMA and Heat alg. 9 from each other; its Table 1 and "
        "the 90% rule exclude Heat alg. 2 instead. Cells that differ: "
        + ("; ".join(differ) if differ else "none")
        + ".",
        "Variants: " + "; ".join(f"{v.name}: {v.note}" for v in VARIANTS) + ".",
        "Run times alone are assumed equal (only LAMA's 44.0 s is in the text); a job slows "
        "only while its node's uses sum above 1 (coshare.sim.poncos.BandwidthModel).",
    ]
    text = render(matrix, *schedules, *notes)
    out = {"max_share": MAX_SHARE, "use": USE, "matrix": rows, "differ": differ, "queues": payload}
    if trials != "off":
        more, out["trials"] = trials_outcome(trials, noise, seeds)
        text += more
    return text, out


def trials_outcome(mode: str, noise: float, seeds: Sequence[int]) -> tuple[str, dict[str, Any]]:
    """The queues run through poncos' own sequence (:mod:`coshare.sim.poncos_trials`): with
    trial co-runs (``mode`` ``on``) beside the same runner without them (``both``), probes
    read with relative ``noise``, once per seed."""
    table = Table(
        title=f"poncos' sequence (probe, trial co-run, freeze {PROBE_S:g} s, decide), "
        f"nothing recorded beforehand; probe noise {noise:g} (relative sigma), "
        f"seeds {_seeds(seeds)}",
        box=box.SIMPLE,
        title_justify="left",
    )
    for column in ("queue", "run", "makespan s", "min-max", "vs no trials", "trials"):
        table.add_column(column, justify="left" if column in ("queue", "run") else "right")
    table.add_column("wrong / decisions", justify="right")
    payload: dict[str, Any] = {"noise": noise, "seeds": list(seeds), "probe_s": PROBE_S}
    wrong: list[str] = []
    for name, queue in QUEUES.items():
        off = summary([run_with_trials(queue, TrialSetup(trials=False))])
        runs = [run_with_trials(queue, TrialSetup(noise=noise, seed=s)) for s in seeds]
        on = summary(runs)
        rows = [("no trials (default)", off)] if mode == "both" else []
        rows.append(("trials", on))
        for label, figures in rows:
            table.add_row(
                name,
                label,
                f"{figures['makespan_s']:.1f}",
                f"{figures['makespan_min_s']:.0f}-{figures['makespan_max_s']:.0f}",
                f"{figures['makespan_s'] / off['makespan_s'] - 1:+.1%}",
                f"{figures['trials']:g}",
                f"{figures['wrong']:g} / {figures['decisions']:g}",
            )
        payload[name] = {"no_trials": off, "trials": on}
        for seed, run in zip(seeds, runs, strict=True):
            wrong += [
                f"{name} seed {seed}: {d.kind} of {d.job} beside {', '.join(d.others)} at "
                f"{d.at_s:.0f} s ({'co-run' if d.co_run else 'not'}; true sum {d.true_sum:g})"
                for d in run.decisions
                if d.wrong
            ]
    notes = [
        "Trials: the live policy (policy.membw.trials on) and the live trial steps "
        "(coshare.cycle.trial_steps.run_trials) on modelled probes: a reading is the available "
        "bandwidth Table 1's true uses leave, times 1 + noise x N(0, 1); the partners are "
        f"frozen {PROBE_S:g} s per probe (section 6: one probe takes less than a second); "
        f"cycles every {CYCLE_S:g} s and at each job end, the node's probe every "
        f"{SAMPLE_S:g} s (assumed). Figures are means over the seeds; wrong / decisions: "
        "trial keeps or suspends and co-runs started on measured shares that the 90% rule "
        "on the true uses decides otherwise, per run.",
        "Wrong decisions: "
        + ("; ".join(wrong[:10]) if wrong else "none")
        + (f"; and {len(wrong) - 10} more" if len(wrong) > 10 else "")
        + ".",
    ]
    return render(table, *notes), payload


def _seeds(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)
