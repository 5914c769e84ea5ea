"""What ``coshare simulate --workload sns`` prints: section 6.2's throughput of ``cs`` and
``sns`` against CE (``exclusive``) on the 36 job sequences per seed, beside the paper's
figures, and, with ``--sweep scaling_share=...``, section 6.3's run, wait and turnaround
times of ``sns`` against CE. It reads the profile data file and renders with rich, so it is
one of the simulator's I/O modules (tests/unit/test_purity.py).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

from rich import box
from rich.table import Table

from coshare.policies import PolicyOptions, make_policy
from coshare.profiles.programs import Profile, parse_profile
from coshare.sim.report import render
from coshare.sim.sns import (
    PAPER,
    PAPER_NODES,
    SEQUENCES,
    Cluster,
    SequenceRun,
    ratio_mix,
    run_sequence,
    scaling_ratio,
    sequence,
)

#: The data file of the paper's measurements (each value's source inside).
DATA_FILE = "spread_n_share.json"


def load_data() -> tuple[dict[str, Profile], Cluster, dict[str, Any]]:
    """The paper's profiles, its node and the raw data (for the sources), every profile
    checked as the profile store checks an admin's files."""
    text = resources.files("coshare.sim").joinpath("data").joinpath(DATA_FILE).read_text()
    data = json.loads(text)
    profiles = {}
    for i, raw in enumerate(data["profiles"]):
        profile = parse_profile(raw, f"{DATA_FILE} profiles[{i}]")
        profiles[profile.program] = profile
    node = data["node"]
    cluster = Cluster(node["cores"], node["llc_ways"], node["membw_gbps"], node["memory_mib"])
    return profiles, cluster, data


def _options(
    profiles: Mapping[str, Profile], params: Mapping[str, Any], age_limit_s: float | None
) -> PolicyOptions:
    extra = {k: v for k, v in params.items() if k in ("sns_default_alpha", "sns_ways_weight")}
    return PolicyOptions(sns_profiles=profiles, age_limit_s=age_limit_s, **extra)


def _geo(values: Sequence[float]) -> float:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values)) if values else math.nan


def run_paper(
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    nodes: int = PAPER_NODES,
    age_limit_s: float | None = 3600.0,
    cycle_delay_s: float = 1.0,
    advance: Callable[[int], None] | None = None,
) -> dict[int, list[dict[str, SequenceRun]]]:
    """Every sequence of every seed under ``exclusive`` and ``policies``: per seed, per
    sequence, the runs by policy."""
    profiles, cluster, _ = load_data()
    names = list(dict.fromkeys(["exclusive", *policies]))
    built = {n: make_policy(n, _options(profiles, {}, age_limit_s)) for n in names}
    out: dict[int, list[dict[str, SequenceRun]]] = {}
    for seed in seeds:
        out[seed] = []
        for i in range(SEQUENCES):
            jobs = sequence(profiles, seed, i, nodes)
            runs = {
                n: run_sequence(jobs, built[n], profiles, cluster, nodes, cycle_delay_s)
                for n in names
            }
            out[seed].append(runs)
            if advance is not None:
                advance(1)
    return out


def paper_outcome(
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    nodes: int = PAPER_NODES,
    age_limit_s: float | None = 3600.0,
    cycle_delay_s: float = 1.0,
    advance: Callable[[int], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The text and JSON of section 6.2's comparison."""
    profiles, _, _ = load_data()
    runs = run_paper(
        policies,
        seeds,
        nodes=nodes,
        age_limit_s=age_limit_s,
        cycle_delay_s=cycle_delay_s,
        advance=advance,
    )
    names = [n for n in dict.fromkeys(["exclusive", *policies])]
    title = (
        f"sns: {SEQUENCES} sequences x 20 jobs (16 or 28 processes, all submitted at 0) per "
        f"seed on {nodes} nodes x 28 cores, 20 LLC ways, 118.26 GB/s; seeds "
        f"{', '.join(map(str, seeds))}; throughput = 1 / mean turnaround, against CE "
        "(exclusive): mean over the sequences (range over seeds), geometric mean, best "
        "and worst sequence; jobs over alpha; run time over CE (geometric mean)"
    )
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for column in (
        "policy",
        "throughput vs CE",
        "paper",
        "geo. mean",
        "best seq.",
        "worst seq.",
        "over alpha",
        "paper",
        "run time",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    payload: dict[str, Any] = {"paper": PAPER, "seeds": {}, "policies": {}}
    per_seed: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for seed, sequences in runs.items():
        payload["seeds"][seed] = [
            {
                "scaling_ratio": round(
                    scaling_ratio(sequence(profiles, seed, i, nodes), profiles), 4
                ),
                **{
                    n: {
                        "turnaround_s": round(r.turnaround_s, 3),
                        "wait_s": round(r.wait_s, 3),
                        "run_s": round(r.run_s, 3),
                        "over_alpha": r.over(0.9),
                        "scales": list(r.scales),
                    }
                    for n, r in seq.items()
                },
            }
            for i, seq in enumerate(sequences)
        ]
        for n in names:
            gains = [seq["exclusive"].turnaround_s / seq[n].turnaround_s for seq in sequences]
            normalized = [x for seq in sequences for x in seq[n].normalized]
            per_seed[n].append(
                {
                    "mean": statistics.fmean(gains) - 1,
                    "geo": _geo(gains) - 1,
                    "best": max(gains) - 1,
                    "worst": min(gains) - 1,
                    "over": sum(seq[n].over(0.9) for seq in sequences),
                    "jobs": sum(len(seq[n].normalized) for seq in sequences),
                    "run_geo": _geo(normalized),
                }
            )
    for n in names:
        stats = per_seed[n]

        def spread(
            key: str,
            fmt: str = "{:+.1%}",
            stats: list[dict[str, float]] = stats,
            short: bool = False,
        ) -> str:
            values = [s[key] for s in stats]
            mean = fmt.format(statistics.fmean(values))
            if short or len(values) == 1 or min(values) == max(values):
                return mean
            return f"{mean} ({fmt.format(min(values))}..{fmt.format(max(values))})"

        paper_gain = {"cs": f"{PAPER['cs_gain']:+.1%}", "sns": f"{PAPER['sns_gain']:+.1%}"}
        over = (
            f"{statistics.fmean(s['over'] for s in stats):.0f} of "
            f"{statistics.fmean(s['jobs'] for s in stats):.0f}"
        )
        table.add_row(
            n,
            spread("mean"),
            paper_gain.get(n, "-" if n != "exclusive" else "0"),
            spread("geo", short=True),
            spread("best", short=True),
            spread("worst", short=True),
            over,
            f"{PAPER['over_alpha']} of {PAPER['jobs']}" if n == "sns" else "-",
            spread("run_geo", "{:.3f}", short=True),
        )
        payload["policies"][n] = stats
    lines = []
    if "sns" in names and "cs" in names:
        wins = [
            sum(1 for seq in sequences if seq["sns"].turnaround_s < seq["cs"].turnaround_s)
            for sequences in runs.values()
        ]
        below = [
            sum(1 for seq in sequences if seq["sns"].turnaround_s > seq["exclusive"].turnaround_s)
            for sequences in runs.values()
        ]
        payload["sns_beats_cs"] = wins
        payload["sns_below_ce"] = below
        lines.append(
            f"sns beats cs on {statistics.fmean(wins):.1f} of {SEQUENCES} sequences "
            f"(seeds: {', '.join(map(str, wins))}); paper: {PAPER['sns_beats_cs']} of "
            f"{PAPER['sequences']}. sns below CE on {statistics.fmean(below):.1f} of "
            f"{SEQUENCES} (paper: 1, by 2%)."
        )
    lines += [
        "Jobs over alpha: run time above CE run time / 0.9. Profiles: the paper's text where it "
        "gives numbers, coshare's assumptions elsewhere (coshare/sim/data/spread_n_share.json "
        "names each value's source; the paper's figures are not in its text). CE run times "
        "uniform 50-1200 s (assumed); sequences redrawn until their scaling ratio is in "
        "0.4-0.8 (the paper's).",
    ]
    return render(table, *lines), payload


def ratio_outcome(
    shares: Sequence[float],
    seeds: Sequence[int],
    *,
    nodes: int = PAPER_NODES,
    age_limit_s: float | None = 3600.0,
    cycle_delay_s: float = 1.0,
    params: Sequence[Mapping[str, Any]] | None = None,
    advance: Callable[[int], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Section 6.3: at each scaling share, sns's mean run, wait and turnaround time over
    CE's (30 jobs of 28 processes, BW and HC)."""
    profiles, cluster, _ = load_data()
    table = Table(
        title=f"sns: section 6.3, {nodes} nodes, 30 jobs x 28 processes of BW "
        f"(scaling) and HC (neutral); sns over CE, mean over seeds "
        f"{', '.join(map(str, seeds))} (range)",
        box=box.SIMPLE,
        title_justify="left",
    )
    for column in ("point", "run time", "wait time", "turnaround", "throughput vs CE"):
        table.add_column(column, justify="left" if column == "point" else "right")
    rows = []
    for k, share in enumerate(shares):
        extra = dict(params[k]) if params is not None else {}
        label = " ".join([f"scaling_share={share}", *(f"{k}={v}" for k, v in extra.items())])
        ce = make_policy("exclusive", _options(profiles, extra, age_limit_s))
        sns = make_policy("sns", _options(profiles, extra, age_limit_s))
        ratios: dict[str, list[float]] = {"run": [], "wait": [], "turnaround": []}
        for seed in seeds:
            jobs = ratio_mix(profiles, share, seed, nodes)
            a = run_sequence(jobs, ce, profiles, cluster, nodes, cycle_delay_s)
            b = run_sequence(jobs, sns, profiles, cluster, nodes, cycle_delay_s)
            ratios["run"].append(b.run_s / a.run_s)
            ratios["wait"].append(b.wait_s / a.wait_s if a.wait_s > 0 else math.nan)
            ratios["turnaround"].append(b.turnaround_s / a.turnaround_s)
            if advance is not None:
                advance(1)

        def cell(values: list[float]) -> str:
            good = [v for v in values if not math.isnan(v)]
            if not good:
                return "-"
            mean = f"{statistics.fmean(good):.3f}"
            return mean if min(good) == max(good) else f"{mean} ({min(good):.3f}-{max(good):.3f})"

        gain = [1 / v - 1 for v in ratios["turnaround"]]
        table.add_row(
            label,
            cell(ratios["run"]),
            cell(ratios["wait"]),
            cell(ratios["turnaround"]),
            f"{statistics.fmean(gain):+.1%}",
        )
        point: dict[str, Any] = {"scaling_share": share, **extra}
        rows.append(
            {
                "point": point,
                "run": ratios["run"],
                "wait": ratios["wait"],
                "turnaround": ratios["turnaround"],
            }
        )
    note = (
        "Paper (Fig. 19, text): at ratio 0 sns equals CE; run time falls as the ratio grows; "
        "wait time falls until 0.75, then grows; turnaround over 10% below CE between 0.35 "
        "and 0.85."
    )
    return render(table, note), {"ratio_sweep": rows}
