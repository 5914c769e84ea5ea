"""Parallel-universe jobs (gangs) on the real pool: deploy/condor/pool names
its schedd every node's dedicated scheduler, coshare plans a ``machine_count = 2`` job as a
gang, writes its nodes and devices before its one gate, and HTCondor's dedicated scheduler
starts it on exactly those nodes, each process seeing its own node's devices."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.integration.condor_pool import CHROOT, WORK, Pool, wait_for
from tests.integration.test_condor_pool import DEVICES, DyingClient, annotated

pytestmark = [pytest.mark.integration, pytest.mark.condor]


def submit_gang(
    live: Pool, machines: int = 2, sleep_s: float = 3, to: Any = None, **extra: str
) -> str:
    """A parallel-universe job of ``machines`` machines (to schedd ``to``, else the pool's
    only one); each node writes out.C.<node>."""
    desc = {
        "universe": "parallel",
        "machine_count": str(machines),
        "executable": f"{WORK}/job.sh",
        "arguments": str(sleep_s),
        "initialdir": WORK,
        "transfer_executable": "false",
        "request_memory": "64",
        "request_cpus": "1",
        "should_transfer_files": "NO",
        # the job ends when every node's process has (by default node 0's end kills the
        # others, perhaps before they print what they saw)
        "+ParallelShutdownPolicy": '"WAIT_FOR_ALL"',
        "output": f"{WORK}/out.$(Cluster).$(Node)",
        "error": f"{WORK}/err.$(Cluster).$(Node)",
        **extra,
    }
    return str((to or live.schedd).submit(live.htcondor.Submit(desc), count=1).cluster())


def gang_placement(live: Pool, job: str) -> list[tuple[str, str]]:
    ad = live.jobs(f"ClusterId == {job.split('.')[0]}")[job]
    nodes, devices = ad.get("CosharePlacedNodes"), ad.get("CosharePlacedNodeDevices")
    assert isinstance(nodes, list) and isinstance(devices, list), ad
    assert ad.get("CosharePlacedNode") == nodes[0]
    return list(zip(nodes, devices, strict=True))


#: What the pool's SchedLog says when HTCondor's dedicated scheduler loses a claim it was
#: given twice (docs/deploy-htcondor.md): the negotiator hands it the same slot on
#: two cycles a second apart, the startd refuses the second claim, and the dedicated scheduler
#: drops the first ("claim id not found ... ignoring this resource"); the gang then sits idle.
RACE = ("claim id not found", "NOT accepted")


def race_lines(since: int) -> list[str]:
    """The SchedLog lines of that race written after line ``since``."""
    log = (CHROOT / "pool" / "log" / "SchedLog").read_text(errors="replace").splitlines()
    return [line for line in log[since:] if any(r in line for r in RACE)]


def schedlog_length() -> int:
    return len((CHROOT / "pool" / "log" / "SchedLog").read_text(errors="replace").splitlines())


def test_a_two_node_parallel_job_runs_on_the_nodes_and_devices_coshare_planned(live: Pool) -> None:
    # Each machine's slot takes every core of a node (the pool's nodes have min(4, this
    # host's cores) with the node helpers): HTCondor's dedicated scheduler matches all
    # machine_count slots against one Requirements and can take two dynamic slots of one
    # node for the same job (docs/deploy-htcondor.md); a whole-node slot cannot be
    # taken twice, so this checks the placement, not that race.
    # The dedicated scheduler's own claim race (RACE: the negotiator handing it one slot on
    # two cycles a second apart) is HTCondor's, not coshare's; deploy/condor/pool's
    # NEGOTIATOR_MIN_INTERVAL = 4 leaves the collector time to show a claim (no RACE line in
    # 4 runs of this test nor in a run of every HTCondor test, against 2 of 3 runs at 1 s).
    # Should it still happen, such a run, and only such a run, is started once more from an
    # empty queue, and the second run must pass.
    for attempt in (1, 2):
        since = schedlog_length()
        try:
            _two_node_gang_runs_as_planned(live)
            return
        except AssertionError:
            raced = race_lines(since)
            if attempt == 2 or not raced:
                raise
            live.remove_all()


def _two_node_gang_runs_as_planned(live: Pool) -> None:
    cores = str(live.node_cores())
    cluster = submit_gang(live, request_cpus=cores, **annotated(2048, 60))
    singles = live.submit(2, sleep_s=3, **annotated(4096, 120))
    job = f"{cluster}.0"
    report = live.cycle()
    assert report.exit_status == 0, report
    parts = [(a.node, a.devices) for a in report.plan.assignments if a.job == job]
    assert len(parts) == 2 and len({n for n, _ in parts}) == 2, report.plan
    assert job in report.apply.applied
    placed = gang_placement(live, job)
    assert sorted(placed) == sorted((n, ",".join(d)) for n, d in parts)
    for node, devices in placed:  # one device per node, of the pool's devices
        assert (node, devices) in DEVICES
    # The single-node jobs are placed beside it, with room for all on every device.
    others = {a.job for a in report.plan.assignments if a.job != job}
    assert others == {f"{singles}.0", f"{singles}.1"}

    try:
        wait_for(
            lambda: not live.jobs(f"ClusterId == {cluster} || ClusterId == {singles}"),
            180,
            "the parallel job and the single-node jobs to finish",
        )
    except AssertionError as exc:  # say what the queue and the dedicated scheduler show
        left = {j: (ad.get("JobStatus"), ad.get("HoldReason")) for j, ad in live.jobs().items()}
        said = race_lines(0)
        raise AssertionError(f"{exc}; queue: {left}; SchedLog: {said[-6:]}") from exc
    [history] = live.history(cluster)
    assert history.get("ExitCode") == 0, history
    # Each process reports the node it ran on and the devices it was given: one process on
    # each planned node, each with that node's planned devices.
    seen = []
    for node_no in range(2):
        out = (live.output(f"{cluster}.{node_no}")).splitlines()
        devices = out[0].split()[2]
        seen.append((out[1], devices))
    assert Counter(seen) == Counter(placed), (seen, placed)


def test_a_gang_waits_whole_until_it_fits_and_is_never_half_placed(live: Pool) -> None:
    # Four nodes, and a gang of five: never fits, said with the counts, nothing written.
    cores = str(live.node_cores())
    cluster = submit_gang(live, machines=5, request_cpus=cores, **annotated(1024, 30))
    # A gang of 1-core slots on these 2-core nodes: the dedicated scheduler could start two
    # of its processes on one node, so it is refused (held) with that reason.
    small = submit_gang(live, machines=2, **annotated(1024, 30))
    report = live.cycle()
    [unplaced] = [u for u in report.plan.unplaced if u.job == f"{cluster}.0"]
    assert unplaced.code == "never_fits" and "5 nodes" in unplaced.reason
    ad = live.jobs(f"ClusterId == {cluster}")[f"{cluster}.0"]
    assert ad.get("CosharePlacedNode") is None and ad.get("CosharePlacedNodes") is None
    reasons = {r.job: r.reason for r in report.rejected}
    assert "HTCondor may run two of its processes there" in reasons[f"{small}.0"], reasons
    held = live.jobs(f"ClusterId == {small}")[f"{small}.0"]
    assert held["JobStatus"] == 5 and "parallel_may_double" in str(held["HoldReason"]), held


def assert_gangs_whole(live: Pool) -> int:
    """Every open gate of a parallel job belongs to a whole placement: its node list holds
    distinct coshare nodes, one device each, starting at the gate's node."""
    open_gates = 0
    for job, ad in live.jobs("CoshareManaged =?= true && JobUniverse == 11").items():
        if ad.get("CosharePlacedNode") is None:
            continue
        open_gates += 1
        placed = gang_placement(live, job)
        assert len(placed) == 2 and len({n for n, _ in placed}) == 2, (job, placed)
        assert all(p in DEVICES for p in placed), (job, placed)
        assert ad.get("CosharePlacedAt"), job
    return open_gates


def test_a_cycle_killed_between_a_gangs_writes_leaves_it_whole_or_unplaced(live: Pool) -> None:
    for _ in range(3):
        submit_gang(
            live,
            requirements="CoshareNeverStart =?= true",
            request_cpus=str(live.node_cores()),
            **annotated(3000, 60),
        )
    deaths = 0
    for budget in range(30):  # die after 0, 1, 2, ... transactions, until a cycle completes
        try:
            live.cycle(client=DyingClient(budget), replan_after_s=0)
        except KeyboardInterrupt:
            deaths += 1
            assert_gangs_whole(live)
            continue
        break
    assert deaths >= 4  # at, nodes, devices and gate writes were each interrupted
    final = live.cycle(replan_after_s=0)
    assert final.exit_status == 0
    settled = live.cycle(replan_after_s=300)
    assert settled.apply.applied == ()
    assert assert_gangs_whole(live) == len(final.plan.placed_jobs) > 0
