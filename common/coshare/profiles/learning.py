"""Profiles learned from normal runs (Spread-n-Share sections 4.1-4.2, 4.4).

The paper does not ask for dedicated profiling runs: "we piggyback per-program scaling-out
profiling on *normal* runs, by trying out different spreading plans" (section 4.1). Its rule
(section 4.2), which this module keeps:

- a program nobody has profiled runs first at scale factor 1 in E mode (its nodes to itself,
  as under CE); its run time alone is saved;
- its next run is scaled out to 2x, still in E mode, and so on through the paper's scales
  (1, 2, 4, 8) until "a configurable scaling limit" (the largest scale, 8) or "performance
  degradation above y%": a run more than :data:`STOP_SLOWER` slower than the best scale so
  far ends the trials (further spreading "saturates", section 4.1);
- then the program is classified from its run times (scaling, compact, neutral: as any
  profile, :attr:`coshare.profiles.programs.Profile.program_class`) and placed at its best scale;
  later runs alone at a scale refine that scale's mean ("learned enough: keep the best");
- only runs in exclusive mode count (section 4.4: "if the program happens to run in
  exclusive mode, the SNS monitor will take advantage of this opportunity to perform
  profiling"); a run that shared a node is counted as such and changes no run time.

What a learned profile holds: the mean run time alone at each scale tried, the runs behind
each, the CPU time the jobs used (from their cgroups), and the IPC and memory bandwidth the
nodes measured where they could (perf, resctrl MBM), or why they could not. It has *no*
IPC-LLC / BW-LLC curves: a normal run at one allocation gives one point, not a curve, so a
learned profile's jobs get no way allocation and count no bandwidth (the paper varies the
allocation every 5 s within runs to draw its curves; coshare draws them with ``coshare
profile ways``). The simulator (:mod:`coshare.sim.sns_learn`) may hand a learned entry its
program's curves, as the paper's in-run sampler would have measured them.

An admin's profile (``coshare profile import``) always wins over a learned one
(:func:`for_policy`).

Pure: no I/O, no clock; :mod:`coshare.profiles.learned_store` reads and writes the files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from coshare.profiles.programs import MAX_RUN_S, PROGRAM_NAME, SCALES, Profile

#: A run more than this much slower than the best scale so far ends the trials (the
#: paper's "performance degradation above y%"; it gives no value: 5%, its neutral band).
STOP_SLOWER = 0.05
#: How many counted job ids an entry remembers (a job is never counted twice).
MAX_JOBS_KEPT = 64
#: Largest CPU time accepted (seconds): 4096 cores busy for the longest run.
MAX_CPU_S = MAX_RUN_S * 4096

Source = Literal["admin", "learned", "learning"]


@dataclass(frozen=True)
class Run:
    """One finished job, as the cycle put it together from its nodes' job-end records.

    Attributes:
        job: the scheduler's job id.
        program: its ``CoshareProgram``.
        scale: the scale factor it ran at.
        elapsed_s: its run time (the slowest node's, start to end).
        alone: no other job used any of its nodes while it ran.
        cpu_s: CPU time of its processes on all its nodes (their cgroups); ``None``: not
            measured.
        ipc: instructions per cycle, where a node counted them; ``None``: not measured.
        membw_gbps: memory bandwidth per node (mean over its nodes), where measured.
        unsupported: why ``ipc`` or ``membw_gbps`` was not measured, by field.
        widest: the largest scale the job's node range allowed (``None``: not known).
    """

    job: str
    program: str
    scale: int
    elapsed_s: float
    alone: bool
    cpu_s: float | None = None
    ipc: float | None = None
    membw_gbps: float | None = None
    unsupported: Mapping[str, str] = field(default_factory=dict)
    widest: int | None = None


@dataclass(frozen=True)
class AtScale:
    """What the runs alone at one scale gave.

    Attributes:
        runs: how many.
        run_time_s: their mean run time.
        cpu_s: their mean CPU time (``None``: no run measured it).
    """

    runs: int
    run_time_s: float
    cpu_s: float | None = None


@dataclass(frozen=True)
class Learned:
    """A program's learned entry (the store's ``learned/PROGRAM.json``).

    Attributes:
        program: the ``CoshareProgram``.
        scales: by scale factor, the runs alone there.
        shared_runs: runs that shared a node (counted, not learned from).
        ipc: mean IPC of the runs where it was measured (``None``: never).
        membw_gbps: mean bandwidth per node where measured (``None``: never).
        unsupported: why IPC or bandwidth was not measured, by field (the node's words,
            naming the path looked at).
        jobs: the ids of the last jobs counted, so that a record read twice counts once.
        curves: the IPC-LLC and BW-LLC curves when something measured them (the simulator);
            ``None``: none (no way allocation).
        widest: the largest scale any of its jobs allowed (the trials' "scaling limit";
            ``None``: not known, the paper's scales all count); 1: it cannot leave a node.
    """

    program: str
    scales: Mapping[int, AtScale] = field(default_factory=dict)
    shared_runs: int = 0
    ipc: float | None = None
    ipc_runs: int = 0
    membw_gbps: float | None = None
    membw_runs: int = 0
    unsupported: Mapping[str, str] = field(default_factory=dict)
    jobs: tuple[str, ...] = ()
    curves: Profile | None = None
    widest: int | None = None

    @property
    def runs(self) -> int:
        """Every run counted, alone or not."""
        return sum(s.runs for s in self.scales.values()) + self.shared_runs

    def run_time(self, scale: int) -> float | None:
        """The mean run time alone at ``scale`` (``None``: not run there alone)."""
        at = self.scales.get(scale)
        return at.run_time_s if at is not None else None


def next_scale(entry: Learned | None) -> int | None:
    """The scale the program's next run tries alone, ``None`` once learned (section 4.2).

    Scales are tried in order from 1; the trials end after the largest scale (or the widest
    its jobs allow), or after a run more than :data:`STOP_SLOWER` slower than the best so far.
    """
    if entry is None:
        return SCALES[0]
    best: float | None = None
    for k in SCALES:
        if entry.widest is not None and k > entry.widest and best is not None:
            return None  # the scaling limit
        t = entry.run_time(k)
        if t is None:
            return k
        if best is not None and t > best * (1.0 + STOP_SLOWER):
            return None  # spreading further saturated
        best = t if best is None else min(best, t)
    return None


def observe(entry: Learned | None, run: Run) -> Learned:
    """``entry`` with ``run`` counted (a job already counted is not counted again)."""
    if entry is None:
        entry = Learned(run.program)
    if run.job in entry.jobs:
        return entry
    jobs = (*entry.jobs, run.job)[-MAX_JOBS_KEPT:]
    ipc, ipc_runs = _mean(entry.ipc, entry.ipc_runs, run.ipc)
    membw, membw_runs = _mean(entry.membw_gbps, entry.membw_runs, run.membw_gbps)
    widest = entry.widest
    if run.widest is not None:
        widest = run.widest if widest is None else max(widest, run.widest)
    entry = replace(
        entry,
        widest=widest,
        jobs=jobs,
        ipc=ipc,
        ipc_runs=ipc_runs,
        membw_gbps=membw,
        membw_runs=membw_runs,
        unsupported={**entry.unsupported, **run.unsupported},
    )
    if not run.alone:
        return replace(entry, shared_runs=entry.shared_runs + 1)
    old = entry.scales.get(run.scale)
    if old is None:
        at = AtScale(1, run.elapsed_s, run.cpu_s)
    else:
        n = old.runs + 1
        cpu = (
            run.cpu_s
            if old.cpu_s is None
            else old.cpu_s
            if run.cpu_s is None
            else old.cpu_s + (run.cpu_s - old.cpu_s) / n
        )
        at = AtScale(n, old.run_time_s + (run.elapsed_s - old.run_time_s) / n, cpu)
    return replace(entry, scales={**entry.scales, run.scale: at})


def _mean(old: float | None, count: int, value: float | None) -> tuple[float | None, int]:
    if value is None:
        return old, count
    if old is None:
        return value, 1
    return old + (value - old) / (count + 1), count + 1


def as_profile(entry: Learned) -> Profile | None:
    """The profile a learned entry stands for once its trials are over (``None`` before):
    the mean run time alone at each scale tried; the curves only when something measured
    them (:attr:`Learned.curves`)."""
    if next_scale(entry) is not None:
        return None
    runs = {k: s.run_time_s for k, s in sorted(entry.scales.items()) if k in SCALES}
    # The trials stop at the first saturating scale; the scales after it were never run.
    tried: dict[int, float] = {}
    for k in SCALES:
        if k not in runs or (entry.widest == 1 and k > 1):
            break
        tried[k] = runs[k]
    curves = entry.curves
    sources = {"run_time_s": f"learned from {entry.runs} normal run(s) (coshare.profiles.learning)"}
    return Profile(
        entry.program,
        tried,
        curves.ways if curves is not None else (),
        curves.ipc if curves is not None else (),
        curves.membw_gbps if curves is not None else (),
        curves.cores if curves is not None else 16,
        entry.widest == 1,
        sources,
    )


@dataclass(frozen=True)
class Known:
    """What the policy plans a program with, and where it came from.

    Attributes:
        program: the ``CoshareProgram``.
        source: ``admin`` (a profile file), ``learned`` (trials over) or ``learning``
            (trials going on: ``trying`` is the next scale).
        profile: the profile the policy uses (``None`` while learning).
        trying: the scale the next run tries alone (learning only).
        learned: the learned entry, if any (also when an admin's profile wins over it).
    """

    program: str
    source: Source
    profile: Profile | None
    trying: int | None = None
    learned: Learned | None = None


def for_policy(admin: Mapping[str, Profile], learned: Mapping[str, Learned]) -> dict[str, Known]:
    """Every program the policy knows of: an admin's profile wins over a learned entry."""
    out: dict[str, Known] = {}
    for name in sorted(set(admin) | set(learned)):
        entry = learned.get(name)
        if name in admin:
            out[name] = Known(name, "admin", admin[name], learned=entry)
            continue
        assert entry is not None
        profile = as_profile(entry)
        if profile is not None:
            out[name] = Known(name, "learned", profile, learned=entry)
        else:
            out[name] = Known(name, "learning", None, next_scale(entry), entry)
    return out


def policy_inputs(
    known: Mapping[str, Known], learn: bool
) -> tuple[dict[str, Profile], dict[str, int]]:
    """The ``sns`` policy's ``profiles`` and ``explore`` (``learn`` off: learned entries
    whose trials are over still count, no new trial is placed)."""
    profiles = {n: k.profile for n, k in known.items() if k.profile is not None}
    if not learn:
        return profiles, {}
    return profiles, {n: k.trying for n, k in known.items() if k.trying is not None}


def check_run(values: Mapping[str, object], where: str) -> list[str]:
    """Problems of a run's numbers (empty: usable), each naming ``where`` and the field."""
    problems = []
    program = values.get("program")
    if not isinstance(program, str) or PROGRAM_NAME.fullmatch(program) is None:
        problems.append(f"{where}: program: want 1-64 of A-Z a-z 0-9 _ . - (as CoshareProgram)")
    scale = values.get("scale")
    if isinstance(scale, bool) or scale not in SCALES:
        problems.append(f"{where}: scale: want one of {', '.join(map(str, SCALES))}")
    for name, high in (("elapsed_s", MAX_RUN_S), ("cpu_s", MAX_CPU_S), ("ipc", 1e3)):
        value = values.get(name)
        if value is None and name != "elapsed_s":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 <= value <= high
        ):
            problems.append(f"{where}: {name}: want a number in [0, {high:g}]")
    return problems


def describe(known: Known) -> str:
    """One line of ``coshare profile show``."""
    entry = known.learned
    learned_runs = (
        f"{entry.runs} run(s): "
        + ", ".join(
            f"scale {k} {s.run_time_s:.1f} s x{s.runs}" for k, s in sorted(entry.scales.items())
        )
        + (f", {entry.shared_runs} shared (not used)" if entry.shared_runs else "")
        if entry is not None
        else ""
    )
    if known.source == "admin":
        profile = known.profile
        assert profile is not None
        line = f"{known.program}: admin ({profile.program_class}, best scale {profile.best_scale})"
        if entry is not None:
            line += f"; learned entry not used, the admin's profile wins ({learned_runs})"
        return line
    if known.source == "learning":
        return f"{known.program}: learning (next run alone at scale {known.trying}; {learned_runs})"
    profile = known.profile
    assert profile is not None and entry is not None
    return (
        f"{known.program}: learned ({profile.program_class}, best scale {profile.best_scale}; "
        f"{learned_runs})"
    )


def measured_lines(entry: Learned) -> Sequence[str]:
    """What the nodes measured beside the run times (or why not), for ``profile show``."""
    out = []
    for name, value, runs in (
        ("ipc", entry.ipc, entry.ipc_runs),
        ("membw_gbps", entry.membw_gbps, entry.membw_runs),
    ):
        if value is not None:
            out.append(f"  {name}: {value:.3f} (mean of {runs} run(s))")
        else:
            out.append(f"  {name}: {entry.unsupported.get(name, 'not measured')}")
    cpu = [f"scale {k} {s.cpu_s:.1f} s" for k, s in sorted(entry.scales.items()) if s.cpu_s]
    if cpu:
        out.append(f"  cpu_s (mean per run alone): {', '.join(cpu)}")
    return out
