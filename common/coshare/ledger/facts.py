"""Node facts: what a node measures about itself, as one line of text both schedulers carry.

Three of the papers plan by what is measured on a node: the CPU load of each
running job (Wu & Hong, section IV-A: sampled every minute), the main-memory bandwidth the
node still has on its free cores (poncos section 6, libDistGen's probe), and its LLC ways
(Spread-n-Share, section 4.4: total and free). The node daemon measures them and writes
them as one line (:func:`format_facts`); HTCondor's startd cron publishes the line as the
machine attribute ``CoshareNodeFacts``, Slurm's publisher writes it into the node's
``Extra`` field; each adapter only hands the text to :func:`with_facts`, so parsing, the
staleness rule and what the snapshot gains live here once::

    coshare-facts;v=1;at=1700000000.000;membw_gbps=9.80;membw_baseline_gbps=19.60;
        membw_cores=2;membw_at=1699999990.000;llc_ways=20;llc_ways_free=12;
        load=1234:0.520:0.500:1.000:3600,1235:3.900:4.000:4.000:600;copy_mbps=1234:512.000;
        cpus=1234:6;wait=1234:0.010:0.020,1235:0.400:1.100;trial=1235:1699999950:0.4300

(one line, no spaces; broken here for reading). Items are ``key=value`` separated by ``;``;
``load`` lists ``job:mean:last:max:window_s`` per running job, in cores busy (CPU seconds
per second of its cgroup) and seconds. ``copy_mbps`` lists ``job:MB/s`` per running GPU job:
its host<->device copy bandwidth (Wu & Hong section III-B3), NVML's PCIe throughput (TX + RX)
of the GPUs it holds alone; a node without NVML publishes none, and the planner keeps the
job's declaration (``CoshareCopyBandwidth``). ``cpus`` lists ``job:cores`` per running job
pinned to cores: how many its cpuset holds now, fewer than it asked for while it lends some
(``collocate``): its load can never exceed them, so a lender whose load fills them may need
its cores back. ``wait`` lists ``job:mean:last`` per running job: its run-queue delay
(:mod:`coshare.node.load`), the time its tasks were runnable but waiting for a CPU, per second,
in cores, over the load's history and its last interval: what it wanted beyond its load. A
node whose kernel keeps no per-task scheduler statistics publishes none. ``trial`` lists
``job:at:result`` per trial co-run the node's daemon probed for a request it read from the
scheduler's queue (``policy.membw.probe_via: facts``, :mod:`coshare.node.trial_requests`):
``at`` is the request's (the ``at`` of the job's ``measuring`` record), ``result`` the job's
measured share in 0..1 or, when the daemon could not measure, its error code (``a-z`` and
``_``, e.g. ``unknown_job``). Keys other than these are ignored (a newer node may publish
more; an older planner ignores ``wait`` and ``trial``); a known key with an unusable value, a
key given twice, or another version makes the whole line unusable, except ``trial``: an
unusable entry of it is left out with a note naming the node and the entry, and the rest of
the line is used. Every number follows :func:`coshare.ledger.bounds.parse_number` and
is bounded.

Facts older than ``cycle.node_facts_max_age_s`` (or dated in the future by more than that)
are ignored: the node is planned as if it had published none, and the cycle's notes say
why. So is a membw probe older than that inside fresh facts (a node whose cores are all
busy is not probed).

Pure: no I/O, no clock (``now_s`` is passed in).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coshare.errors import FactsError
from coshare.ledger.bounds import (
    MAX_COPY_BW_MBPS,
    MAX_CORES,
    MAX_LLC_WAYS,
    MAX_MEMBW_GBPS,
    MAX_TIME_S,
    parse_number,
)
from coshare.model import Node, RunningJob, Snapshot, TrialResult

#: The line's first item; a record whose text does not start with it holds no coshare facts.
PREFIX = "coshare-facts"
VERSION = 1
#: Longest facts line accepted (a node with a thousand jobs writes about 40 kB).
MAX_FACTS_CHARS = 128 * 1024
#: Most running jobs one line may report.
MAX_LOADS = 4096
#: Characters a facts line may hold: safe inside a ClassAd string and a Slurm field as they are.
_TEXT = re.compile(r"[A-Za-z0-9._:;=,+-]*")
#: A job id as the node knows it (coshare.node.spec: HTCondor's GlobalJobId in id characters,
#: Slurm's job id); never holds ``:`` or ``,``.
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
#: A trial's ``at`` (epoch seconds, as the trial record writes it) and a daemon's error code.
_TRIAL_AT = re.compile(r"[0-9]{1,12}")
_TRIAL_CODE = re.compile(r"[a-z][a-z_]{0,31}")
#: How many nodes one grouped note names before it counts the rest.
NOTE_NODES = 5


@dataclass(frozen=True, slots=True)
class JobLoad:
    """One running job's CPU load, from its cgroup's CPU time.

    Attributes:
        job: the job's id on the node.
        mean_cores: mean load over the sampled history (cores busy).
        last_cores: load over the last sampling interval.
        max_cores: the highest interval load of the history.
        window_s: seconds the history covers.
    """

    job: str
    mean_cores: float
    last_cores: float
    max_cores: float
    window_s: float


@dataclass(frozen=True, slots=True)
class JobCopy:
    """One running GPU job's host<->device copy bandwidth, measured.

    Attributes:
        job: the job's id on the node.
        mbps: MB/s over PCIe to and from its GPUs (NVML ``nvmlDeviceGetPcieThroughput``,
            TX + RX, KB/s / 1000), summed over the GPUs it holds alone.
    """

    job: str
    mbps: float


@dataclass(frozen=True, slots=True)
class JobCpus:
    """How many cores one running job's cpuset holds now.

    Attributes:
        job: the job's id on the node.
        cores: cores in its cpuset.
    """

    job: str
    cores: int


@dataclass(frozen=True, slots=True)
class JobWait:
    """One running job's run-queue delay: cores' worth of its tasks runnable but waiting for
    a CPU (``/proc/<tid>/schedstat``, summed over its tasks, per second of wall time).

    Attributes:
        job: the job's id on the node.
        mean_cores: over the sampled history (the load's window).
        last_cores: over the last sampling interval.
    """

    job: str
    mean_cores: float
    last_cores: float


@dataclass(frozen=True, slots=True)
class MembwFacts:
    """The last memory-bandwidth probe (poncos section 6).

    Attributes:
        avail_gbps: what the probe reached on the cores it ran on.
        baseline_gbps: what it reached on the same cores of the idle node.
        cores: how many cores it ran on.
        at_s: when it ran (epoch seconds).
    """

    avail_gbps: float
    baseline_gbps: float
    cores: int
    at_s: float

    @property
    def fraction(self) -> float:
        """Available over baseline: libDistGen's ``distgen_membw_available()`` (never 0: the
        probe's own accesses always complete)."""
        return self.avail_gbps / self.baseline_gbps


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What one node measured.

    Attributes:
        at_s: when (epoch seconds).
        membw: the last bandwidth probe, if the node has one.
        llc_ways: LLC ways of the node (resctrl ``info/L3/cbm_mask``), if it has resctrl.
        llc_ways_free: ways no coshare job's resctrl group holds.
        loads: CPU load of each running coshare job.
        copies: copy bandwidth of each running GPU job, where the node measures it (NVML).
        cpus: cores each running job pinned to cores holds now.
        waits: run-queue delay of each running coshare job, where the kernel counts it.
        trials: the trial probes the node's daemon ran for the scheduler's requests.
        trial_problems: why ``trial`` entries were left out (node facts a planner reads:
            the entry and what is wrong with it).
    """

    at_s: float
    membw: MembwFacts | None = None
    llc_ways: int | None = None
    llc_ways_free: int | None = None
    loads: tuple[JobLoad, ...] = ()
    copies: tuple[JobCopy, ...] = ()
    cpus: tuple[JobCpus, ...] = ()
    waits: tuple[JobWait, ...] = ()
    trials: tuple[TrialResult, ...] = ()
    trial_problems: tuple[str, ...] = ()


def _num(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}"


def format_facts(facts: NodeFacts) -> str:
    """The one line a node publishes (see the module docstring).

    Raises:
        FactsError: a value the line cannot carry (a job id of other characters, a
            non-finite number); the node daemon never builds one.
    """
    items = [PREFIX, f"v={VERSION}", f"at={_num(facts.at_s)}"]
    if facts.membw is not None:
        m = facts.membw
        items += [
            f"membw_gbps={_num(m.avail_gbps)}",
            f"membw_baseline_gbps={_num(m.baseline_gbps)}",
            f"membw_cores={m.cores}",
            f"membw_at={_num(m.at_s)}",
        ]
    if facts.llc_ways is not None:
        items.append(f"llc_ways={facts.llc_ways}")
    if facts.llc_ways_free is not None:
        items.append(f"llc_ways_free={facts.llc_ways_free}")
    if facts.loads:
        entries = []
        for load in facts.loads:
            if not _JOB.fullmatch(load.job):
                raise FactsError(f"job id {load.job!r} cannot be carried in node facts")
            entries.append(
                ":".join(
                    [
                        load.job,
                        _num(load.mean_cores),
                        _num(load.last_cores),
                        _num(load.max_cores),
                        _num(load.window_s, 0),
                    ]
                )
            )
        items.append("load=" + ",".join(entries))
    if facts.copies:
        for copy in facts.copies:
            if not _JOB.fullmatch(copy.job):
                raise FactsError(f"job id {copy.job!r} cannot be carried in node facts")
        items.append("copy_mbps=" + ",".join(f"{c.job}:{_num(c.mbps)}" for c in facts.copies))
    if facts.cpus:
        for held in facts.cpus:
            if not _JOB.fullmatch(held.job):
                raise FactsError(f"job id {held.job!r} cannot be carried in node facts")
        items.append("cpus=" + ",".join(f"{c.job}:{c.cores}" for c in facts.cpus))
    if facts.waits:
        for wait in facts.waits:
            if not _JOB.fullmatch(wait.job):
                raise FactsError(f"job id {wait.job!r} cannot be carried in node facts")
        items.append(
            "wait="
            + ",".join(f"{w.job}:{_num(w.mean_cores)}:{_num(w.last_cores)}" for w in facts.waits)
        )
    if facts.trials:
        items.append("trial=" + ",".join(_trial_entry(t) for t in facts.trials))
    text = ";".join(items)
    parse_facts(text)  # what a node publishes, a planner must read back
    return text


def parse_facts(text: str) -> NodeFacts:
    """Read a facts line.

    Raises:
        FactsError: naming the item and what is wrong, shortened (the text came through a
            scheduler record).
    """
    if len(text) > MAX_FACTS_CHARS:
        raise FactsError(f"is {len(text)} characters long (at most {MAX_FACTS_CHARS})")
    if not _TEXT.fullmatch(text):
        bad = next(c for c in text if not _TEXT.fullmatch(c))
        raise FactsError(f"holds the character {bad!a} (allowed: letters, digits and ._:;=,+-)")
    items = text.split(";")
    if items[0] != PREFIX:
        raise FactsError(f"does not start with {PREFIX!r}")
    fields: dict[str, str] = {}
    for item in items[1:]:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise FactsError(f"item {_short(item)!r} is not key=value")
        if key in fields:
            raise FactsError(f"item {_short(key)!r} is given twice")
        fields[key] = value
    if fields.get("v") != str(VERSION):
        raise FactsError(
            f"is version {_short(fields.get('v', '(none)'))!r}; this coshare reads "
            f"version {VERSION}"
        )
    if "at" not in fields:
        raise FactsError("has no time (at=)")
    at_s = _number(fields, "at", 0, MAX_TIME_S)
    membw = _membw(fields)
    ways = _integer(fields, "llc_ways", 1, MAX_LLC_WAYS) if "llc_ways" in fields else None
    free = None
    if "llc_ways_free" in fields:
        if ways is None:
            raise FactsError("has llc_ways_free without llc_ways")
        free = _integer(fields, "llc_ways_free", 0, ways)
    loads = _loads(fields["load"]) if "load" in fields else ()
    copies = _copies(fields["copy_mbps"]) if "copy_mbps" in fields else ()
    cpus = _cpus(fields["cpus"]) if "cpus" in fields else ()
    waits = _waits(fields["wait"]) if "wait" in fields else ()
    trials, problems = _trials(fields["trial"]) if "trial" in fields else ((), ())
    return NodeFacts(at_s, membw, ways, free, loads, copies, cpus, waits, trials, problems)


def _trial_entry(trial: TrialResult) -> str:
    """``job:at:result`` of one trial probe (see the module docstring)."""
    if not _JOB.fullmatch(trial.job):
        raise FactsError(f"job id {trial.job!r} cannot be carried in node facts")
    if trial.share is not None:
        if not (math.isfinite(trial.share) and 0.0 <= trial.share <= 1.0):
            raise FactsError(f"trial of job {trial.job}: share {trial.share!r} is outside [0, 1]")
        result = f"{trial.share:.4f}"
    elif _is_code(trial.error):
        result = trial.error
    else:
        raise FactsError(f"trial of job {trial.job}: error code {trial.error!r} is not a-z and _")
    if not 0 <= trial.at_s < 10**12:
        raise FactsError(f"trial of job {trial.job}: at {trial.at_s!r} is not 0..999999999999")
    return f"{trial.job}:{trial.at_s}:{result}"


def _is_code(text: str) -> bool:
    """Whether ``text`` is an error code: ``a-z`` and ``_``, and no number (``nan``)."""
    if _TRIAL_CODE.fullmatch(text) is None:
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


def _trials(text: str) -> tuple[tuple[TrialResult, ...], tuple[str, ...]]:
    """The usable ``trial`` entries and why the others were left out: one bad entry (or a
    job given twice: both left out, which one is right cannot be told) never costs the
    node its other facts, nor a trial its other entries."""
    if not text:
        return (), ()
    entries = text.split(",")
    problems: list[str] = []
    if len(entries) > MAX_LOADS:
        problems.append(
            f"trial lists {len(entries)} entries; the {len(entries) - MAX_LOADS} "
            f"after the first {MAX_LOADS} are ignored"
        )
        entries = entries[:MAX_LOADS]
    found: dict[str, TrialResult] = {}
    twice: set[str] = set()
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 3 or not _JOB.fullmatch(parts[0]):
            problems.append(f"trial entry {_short(entry)!r} is not job:at:result")
            continue
        job, at, result = parts
        if not _TRIAL_AT.fullmatch(at):
            problems.append(f"trial entry of job {job}: at {_short(at)!r} is not epoch seconds")
            continue
        if _is_code(result):
            trial = TrialResult(job, int(at), None, result)
        else:
            share = parse_number(result)
            if share is None or not math.isfinite(share) or not 0 <= share <= 1:
                problems.append(
                    f"trial entry of job {job}: share {_short(result)!r} is not a "
                    "number in 0..1 (nor an error code)"
                )
                continue
            trial = TrialResult(job, int(at), share)
        if job in found or job in twice:
            twice.add(job)
            found.pop(job, None)
            continue
        found[job] = trial
    problems += [f"trial lists job {job} twice; both entries ignored" for job in sorted(twice)]
    return tuple(found.values()), tuple(problems)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _value(key: str, raw: str, low: float, high: float, what: str = "a number") -> float:
    number = parse_number(raw)
    if number is None or not math.isfinite(number) or not low <= number <= high:
        raise FactsError(f"{key}={_short(raw)!r} is not {what} in {low:g}..{high:g}")
    return number


def _number(fields: Mapping[str, str], key: str, low: float, high: float) -> float:
    return _value(key, fields[key], low, high)


def _integer(fields: Mapping[str, str], key: str, low: int, high: int) -> int:
    raw = fields[key]
    if not raw.isdigit() or len(raw) > 12 or not low <= int(raw) <= high:
        raise FactsError(f"{key}={_short(raw)!r} is not an integer in {low}..{high}")
    return int(raw)


_MEMBW_KEYS = ("membw_gbps", "membw_baseline_gbps", "membw_cores", "membw_at")


def _membw(fields: Mapping[str, str]) -> MembwFacts | None:
    given = [k for k in _MEMBW_KEYS if k in fields]
    if not given:
        return None
    if len(given) != len(_MEMBW_KEYS):
        missing = ", ".join(k for k in _MEMBW_KEYS if k not in fields)
        raise FactsError(f"has a membw probe without {missing}")
    baseline = _number(fields, "membw_baseline_gbps", 0, MAX_MEMBW_GBPS)
    if baseline <= 0:
        raise FactsError("membw_baseline_gbps is 0 (a baseline is a measured bandwidth)")
    return MembwFacts(
        avail_gbps=_number(fields, "membw_gbps", 0, MAX_MEMBW_GBPS),
        baseline_gbps=baseline,
        cores=_integer(fields, "membw_cores", 1, MAX_CORES),
        at_s=_number(fields, "membw_at", 0, MAX_TIME_S),
    )


def _loads(text: str) -> tuple[JobLoad, ...]:
    if not text:
        return ()
    entries = text.split(",")
    if len(entries) > MAX_LOADS:
        raise FactsError(f"load lists {len(entries)} jobs (at most {MAX_LOADS})")
    loads: list[JobLoad] = []
    seen: set[str] = set()
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 5 or not _JOB.fullmatch(parts[0]):
            raise FactsError(f"load entry {_short(entry)!r} is not job:mean:last:max:window_s")
        job = parts[0]
        if job in seen:
            raise FactsError(f"load lists job {job} twice")
        seen.add(job)
        what = f"load of job {job}:"
        mean, last, peak = (
            _value(f"{what} {name}", parts[i], 0, MAX_CORES)
            for i, name in ((1, "mean"), (2, "last"), (3, "max"))
        )
        window = _value(f"{what} window_s", parts[4], 0, MAX_TIME_S)
        loads.append(JobLoad(job, mean, last, peak, window))
    return tuple(loads)


def _job_values(text: str, key: str, unit: str) -> list[tuple[str, str]]:
    """The ``job:value`` entries of a per-job fact (``copy_mbps``, ``cpus``), each job once."""
    if not text:
        return []
    entries = text.split(",")
    if len(entries) > MAX_LOADS:
        raise FactsError(f"{key} lists {len(entries)} jobs (at most {MAX_LOADS})")
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for entry in entries:
        job, colon, value = entry.partition(":")
        if not colon or not _JOB.fullmatch(job):
            raise FactsError(f"{key} entry {_short(entry)!r} is not job:{unit}")
        if job in seen:
            raise FactsError(f"{key} lists job {job} twice")
        seen.add(job)
        pairs.append((job, value))
    return pairs


def _copies(text: str) -> tuple[JobCopy, ...]:
    return tuple(
        JobCopy(job, _value(f"copy_mbps of job {job}", value, 0, MAX_COPY_BW_MBPS))
        for job, value in _job_values(text, "copy_mbps", "MB/s")
    )


def _cpus(text: str) -> tuple[JobCpus, ...]:
    return tuple(
        JobCpus(job, _integer({"cpus": value}, "cpus", 1, MAX_CORES))
        for job, value in _job_values(text, "cpus", "cores")
    )


def _waits(text: str) -> tuple[JobWait, ...]:
    out = []
    for job, value in _job_values(text, "wait", "mean:last"):
        mean, colon, last = value.partition(":")
        if not colon:
            raise FactsError(f"wait entry {_short(job + ':' + value)!r} is not job:mean:last")
        out.append(
            JobWait(
                job,
                *(
                    _value(f"wait of job {job}: {name}", raw, 0, MAX_CORES)
                    for name, raw in (("mean", mean), ("last", last))
                ),
            )
        )
    return tuple(out)


def without_stale_probes(
    snapshot: Snapshot, max_age_s: float, clock_s: float | None = None
) -> tuple[Snapshot, tuple[str, ...]]:
    """``snapshot`` with every node's membw probe that is too old, or dated in the future, by
    :func:`age_problem` at its ``now`` dropped (a note per node): the rule the adapters apply
    when they read facts, for a snapshot that carries its facts already (``coshare plan``).

    A snapshot without ``now`` does not say when it was read (it may be an old one, planned
    again), so the age of its probes is unknown; but no probe ran after the moment it is
    planned: against ``clock_s`` (the planning machine's clock), a probe dated in the future
    by more than ``max_age_s`` is dropped as the adapters would. With neither, the snapshot
    is returned as it is."""
    now = snapshot.now_s if snapshot.now_s is not None else clock_s
    if now is None:
        return snapshot, ()
    future_only = snapshot.now_s is None
    nodes, notes = [], []
    for node in snapshot.nodes:
        at = node.membw_at_s if node.membw_at_s is not None else node.facts_at_s
        old = (
            age_problem(at, now, max_age_s)
            if node.membw_avail_gbps is not None and at is not None
            else None
        )
        if old is None or (future_only and at is not None and at <= now):
            nodes.append(node)
            continue
        notes.append(
            f"node {node.name}: membw probe {old}: not used (cycle.node_facts_max_age_s "
            f"= {max_age_s:g} s)"
        )
        nodes.append(
            replace(node, membw_avail_gbps=None, membw_baseline_gbps=None, membw_at_s=None)
        )
    if not notes:
        return snapshot, ()
    return replace(snapshot, nodes=tuple(nodes)), tuple(notes)


def age_problem(at_s: float, now_s: float, max_age_s: float) -> str | None:
    """Why facts measured at ``at_s`` are not used at ``now_s`` (too old, or from a clock
    that is ahead by more than ``max_age_s``); ``None`` when they are."""
    age = now_s - at_s
    if age > max_age_s:
        return f"{age:.0f} s old"
    if -age > max_age_s:
        return f"dated {-age:.0f} s in the future (is the node's clock right?)"
    return None


def attach(
    snapshot: Snapshot,
    facts: Mapping[str, NodeFacts],
    local_ids: Callable[[RunningJob], str] | None = None,
) -> Snapshot:
    """``snapshot`` with each node's (usable) facts in its optional fields.

    Args:
        snapshot: what the adapter read.
        facts: usable facts by node name (stale ones already left out).
        local_ids: a running job's id on its node (HTCondor: its GlobalJobId in id
            characters); default: its id in the snapshot.

    A node's ``llc_ways`` is taken from its facts when the snapshot has none. Loads attach to
    running (not planned) jobs of that node; loads of jobs the snapshot does not list are
    ignored. A measured copy bandwidth replaces the job's declared one (``copy_bw_mbps``):
    what NVML sees beats what the user said; without a measurement the declaration stays.
    The cores a running job's cpuset holds go into ``cpu_cores_held``, its run-queue delay
    into ``cpu_wait_cores`` and ``cpu_wait_last_cores``.
    """
    if not facts:
        return snapshot
    nodes = tuple(_node_with(n, facts[n.name]) if n.name in facts else n for n in snapshot.nodes)
    loads = {name: {load.job: load for load in f.loads} for name, f in facts.items() if f.loads}
    copies = {name: {c.job: c.mbps for c in f.copies} for name, f in facts.items() if f.copies}
    cpus = {name: {c.job: c.cores for c in f.cpus} for name, f in facts.items() if f.cpus}
    waits = {name: {w.job: w for w in f.waits} for name, f in facts.items() if f.waits}
    running = snapshot.running
    key = local_ids or (lambda r: r.id)
    if loads:
        running = tuple(
            _running_with(r, loads[r.node].get(key(r)))
            if r.state == "running" and r.node in loads
            else r
            for r in running
        )
    if copies:
        running = tuple(
            replace(r, copy_bw_mbps=copies[r.node][key(r)])
            if r.state == "running" and key(r) in copies.get(r.node, {})
            else r
            for r in running
        )
    if cpus:
        running = tuple(
            replace(r, cpu_cores_held=cpus[r.node][key(r)])
            if r.state == "running" and key(r) in cpus.get(r.node, {})
            else r
            for r in running
        )
    if waits:
        running = tuple(
            _waiting(r, waits[r.node][key(r)])
            if r.state == "running" and key(r) in waits.get(r.node, {})
            else r
            for r in running
        )
    return replace(snapshot, nodes=nodes, running=running)


def _waiting(job: RunningJob, wait: JobWait) -> RunningJob:
    return replace(job, cpu_wait_cores=wait.mean_cores, cpu_wait_last_cores=wait.last_cores)


def _node_with(node: Node, facts: NodeFacts) -> Node:
    membw = facts.membw
    return replace(
        node,
        facts_at_s=facts.at_s,
        membw_at_s=membw.at_s if membw else None,
        membw_avail_gbps=membw.avail_gbps if membw else None,
        membw_baseline_gbps=membw.baseline_gbps if membw else None,
        llc_ways=node.llc_ways if node.llc_ways is not None else facts.llc_ways,
        llc_ways_free=facts.llc_ways_free,
        trial_results=facts.trials,
    )


def _running_with(job: RunningJob, load: JobLoad | None) -> RunningJob:
    if load is None:
        return job
    return replace(
        job,
        cpu_load_cores=load.mean_cores,
        cpu_load_last_cores=load.last_cores,
        cpu_load_max_cores=load.max_cores,
        cpu_load_window_s=load.window_s,
    )


def usable_facts(
    texts: Mapping[str, str], *, now_s: float, max_age_s: float
) -> tuple[dict[str, NodeFacts], tuple[str, ...]]:
    """Read every node's facts text; keep the usable ones.

    Args:
        texts: the text each node's scheduler record carries (empty: the node published
            none, which is no problem: it is planned as before facts existed).
        now_s: the cycle's time (epoch seconds).
        max_age_s: ``cycle.node_facts_max_age_s``.

    Returns:
        the usable facts by node, and notes for the cycle: one per kind of problem, naming
        at most :data:`NOTE_NODES` nodes (a thousand stale nodes make one line, not a
        thousand).
    """
    usable: dict[str, NodeFacts] = {}
    problems: dict[str, list[tuple[str, str]]] = {}
    for node in sorted(texts):
        text = texts[node]
        if not text:
            continue
        try:
            facts = parse_facts(text)
        except FactsError as exc:
            problems.setdefault("unreadable", []).append((node, str(exc)))
            continue
        old = age_problem(facts.at_s, now_s, max_age_s)
        if old is not None:
            problems.setdefault("stale", []).append((node, old))
            continue
        for problem in facts.trial_problems:
            problems.setdefault("trial", []).append((node, problem))
        if facts.membw is not None:
            probe_old = age_problem(facts.membw.at_s, now_s, max_age_s)
            if probe_old is not None:
                problems.setdefault("probe", []).append((node, probe_old))
                facts = replace(facts, membw=None)
        usable[node] = facts
    limit = f"cycle.node_facts_max_age_s = {max_age_s:g} s"
    what = {
        "unreadable": "node facts unreadable",
        "stale": f"node facts older than {limit}",
        "probe": f"membw probe older than {limit}",
    }
    notes = tuple(_grouped(what[kind], problems[kind]) for kind in what if kind in problems)
    if "trial" in problems:
        found = problems["trial"]
        shown = "; ".join(f"{node}: {detail}" for node, detail in found[:NOTE_NODES])
        more = f"; and {len(found) - NOTE_NODES} more" if len(found) > NOTE_NODES else ""
        notes += (
            f"node facts: {len(found)} trial entries unusable, ignored (the trials they "
            f"answer wait for a usable one: {shown}{more})",
        )
    return usable, notes


def _grouped(what: str, found: Sequence[tuple[str, str]]) -> str:
    shown = "; ".join(f"{node}: {detail}" for node, detail in found[:NOTE_NODES])
    more = f"; and {len(found) - NOTE_NODES} more nodes" if len(found) > NOTE_NODES else ""
    return f"{what} on {len(found)} node(s), planned without them ({shown}{more})"


def with_facts(
    snapshot: Snapshot,
    texts: Mapping[str, str],
    *,
    now_s: float,
    max_age_s: float,
    local_ids: Callable[[RunningJob], str] | None = None,
) -> tuple[Snapshot, tuple[str, ...]]:
    """What both adapters call: ``snapshot`` with the usable facts of its nodes, and the
    cycle's notes about the unusable ones (see :func:`usable_facts` and :func:`attach`)."""
    names = {n.name for n in snapshot.nodes}
    usable, notes = usable_facts(
        {k: v for k, v in texts.items() if k in names}, now_s=now_s, max_age_s=max_age_s
    )
    return attach(snapshot, usable, local_ids), notes
