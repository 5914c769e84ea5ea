"""Two planners over the local HTCondor pool's nodes, one per schedd, sharing them through one
PostgreSQL engine (live). The pool runs a second schedd
(``CONDOR_POOL_SCHEDDS=2``); ``coshare condor cycle`` of ``coshare-pool`` and of
``coshare-pool2`` run at the same moment, cycle after cycle. What the jobs saw and when they
ran (their outputs, each schedd's history) shows no device ever held beyond its memory, and
devices running jobs of both schedds. A planner SIGKILLed mid-cycle leaves every open
gate of both queues within every device's memory while its claims live; its claims are gone
once its lease expires, and its open gates, read from its schedd's queue, still keep the
other planner off."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from condor_addon.view import machine_of
from tests.integration.condor_pool import (
    CHROOT,
    CLIENT_CONFIG,
    POOL_SCRIPT,
    ROOT,
    WORK,
    Pool,
    pool,
    start_pool,
)
from tests.integration.test_condor_pool import COSHARE, DEVICES, annotated
from tests.postgres import Postgres, running_postgres

pytestmark = [pytest.mark.integration, pytest.mark.condor, pytest.mark.postgres]

SCHEDDS = {"a": "coshare-pool@127.0.0.1", "b": "coshare-pool2@127.0.0.1"}
#: Long enough for the killed cycle's claims to outlive the checks after the kill on a loaded
#: machine (at 10 s one full run found them expired before it could count them).
LEASE_S = 25.0
SIZES = [2500, 3000, 3500, 2000]


@pytest.fixture(scope="module")
def two_schedds() -> Iterator[Pool]:
    """The pool with two schedds, for this module only; a pool already running (another
    module's, one schedd) is stopped first and started again afterwards."""
    was_running = (
        subprocess.run([str(POOL_SCRIPT), "status"], capture_output=True, timeout=60).returncode
        == 0
    )
    if was_running:
        pool("stop")
    try:
        started = start_pool(schedds=2)
        live = next(started)
        try:
            settle_sessions(live)
            yield live
        finally:
            started.close()  # stops it (start_pool's own finally)
    finally:
        if was_running:
            pool("start")


@pytest.fixture
def engine_and_planners(
    two_schedds: Pool, tmp_path: Path
) -> Iterator[tuple[Postgres, dict[str, Path]]]:
    with running_postgres() as engine:
        yield engine, configs(engine, tmp_path)
    for name in SCHEDDS.values():
        schedd(two_schedds, name).act(two_schedds.htcondor.JobAction.Remove, "true")


@pytest.fixture
def planners(engine_and_planners: tuple[Postgres, dict[str, Path]]) -> dict[str, Path]:
    return engine_and_planners[1]


def configs(engine: Postgres, tmp_path: Path) -> dict[str, Path]:
    dsn = engine.new_database()
    out = {}
    for planner, name in SCHEDDS.items():
        config = {
            "condor": {
                "config_file": str(CLIENT_CONFIG),
                "schedd": name,
                "lock_file": str(tmp_path / f"{planner}.lock"),
            },
            # fence_every_s 0: the lease checked before every queue transaction (the
            # engine-stop test stops the engine after the first)
            "coordination": {
                "dsn": dsn,
                "domain": f"condor-{planner}",
                "instance": "cm",
                "lease_s": LEASE_S,
                "fence_every_s": 0,
            },
        }
        out[planner] = tmp_path / f"{planner}.yaml"
        out[planner].write_text(yaml.safe_dump(config))
    return out


def settle_sessions(live: Pool) -> None:
    """Talk to both schedds until they answer. This process's security sessions with the
    daemons of the pool that ran before the restart (the same addresses) are refused once
    ("SECMAN:2004:Server rejected our session id", in a full run), which drops them; tried
    again for up to 60 s, so the test's own calls find fresh sessions."""
    deadline = time.monotonic() + 60
    for name in SCHEDDS.values():
        while True:
            try:
                schedd(live, name).query("false", projection=["ClusterId"])
                break
            except live.htcondor.HTCondorException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


def schedd(live: Pool, name: str) -> Any:
    """Schedd ``name``, located through the collector. The first query after this module
    restarted the pool with two schedds failed once in a full run ("Failed communication
    with collector", the previous pool's session at the same address): located again for up
    to 60 s before that counts."""
    htc = live.htcondor
    deadline = time.monotonic() + 60
    while True:
        try:
            return htc.Schedd(
                htc.Collector(live.client.collector_name).locate(htc.DaemonType.Schedd, name)
            )
        except htc.HTCondorException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def submit(
    live: Pool, planner: str, count: int, memory_mib: int | None = None, **extra: str
) -> dict[str, int]:
    """``count`` annotated jobs on ``planner``'s schedd; ``{planner:cluster.proc: memory}``."""
    jobs = {}
    for i in range(count):
        memory = memory_mib or SIZES[(i + (planner == "b")) % len(SIZES)]
        desc = {
            "executable": f"{WORK}/job.sh",
            "arguments": str(3 + i % 2),
            "initialdir": WORK,
            "transfer_executable": "false",
            "request_memory": "64",
            "output": f"{WORK}/out.{planner}.$(Cluster).$(Process)",
            "error": f"{WORK}/err.{planner}.$(Cluster).$(Process)",
            **annotated(memory, 60),
            **extra,
        }
        result = schedd(live, SCHEDDS[planner]).submit(live.htcondor.Submit(desc), count=1)
        jobs[f"{planner}:{result.cluster()}.0"] = memory
    return jobs


def cycle(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [COSHARE, "--config", str(config), "condor", "cycle"],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def queued(live: Pool, planner: str) -> list[Any]:
    return list(
        schedd(live, SCHEDDS[planner]).query(
            "true",
            projection=[
                "ClusterId",
                "ProcId",
                "CosharePlacedNode",
                "CosharePlacedDevices",
                "CoshareDeviceMemory",
            ],
        )
    )


def test_two_schedds_planners_never_book_a_device_beyond_its_memory(
    two_schedds: Pool, planners: dict[str, Path]
) -> None:
    live = two_schedds
    jobs = {**submit(live, "a", 10), **submit(live, "b", 10)}
    rounds, lost = cycle_both_until_done(live, planners, 300)
    nodes = live.node_of_machine()
    spans: Spans = defaultdict(list)
    for planner, name in SCHEDDS.items():
        for ad in schedd(live, name).history(
            "true",
            projection=[
                "ClusterId",
                "ProcId",
                "LastRemoteHost",
                "CosharePlacedNode",
                "CosharePlacedDevices",
                "ExitCode",
            ],
        ):
            job = f"{planner}:{ad['ClusterId']}.{ad['ProcId']}"
            node = nodes[machine_of(ad["LastRemoteHost"])]
            devices = tuple(str(ad["CosharePlacedDevices"]).split(","))
            assert ad["ExitCode"] == 0 and node == ad["CosharePlacedNode"], ad
            out = CHROOT / WORK.lstrip("/") / f"out.{planner}.{ad['ClusterId']}.{ad['ProcId']}"
            start, end, seen = out.read_text().splitlines()[0].split()
            assert seen == ",".join(devices)
            for device in devices:
                spans[(node, device)].append((float(start), float(end), jobs[job], planner))
    assert sum(len(v) for v in spans.values()) == len(jobs)
    at_once = never_beyond_memory(spans)
    # The planners shared the devices: some ran jobs of both schedds (at once or in turn;
    # the policy packs each planner's jobs, so "at once" is up to the race).
    shared = [d for d, runs in spans.items() if len({p for *_, p in runs}) == 2]
    assert shared, f"no device ran jobs of both schedds: {dict(spans)}"
    print(
        f"{rounds} rounds of two cycles; {lost} cycles lost jobs to the other's claims; "
        f"{len(shared)} devices ran jobs of both schedds, {at_once} starts beside a job of "
        "the other schedd"
    )


Spans = dict[tuple[str, str], list[tuple[float, float, int, str]]]


def cycle_both_until_done(
    live: Pool,
    planners: dict[str, Path],
    within_s: float,
    each_round: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Both planners' cycles at the same moment, round after round (``each_round`` after
    each), until both queues are empty; how many rounds, and how many cycles lost jobs to
    the other's claims."""
    deadline = time.monotonic() + within_s
    rounds = lost = 0
    while any(queued(live, p) for p in SCHEDDS):
        assert time.monotonic() < deadline, f"jobs still queued after {within_s:g} s"
        procs = [cycle(planners[p]) for p in SCHEDDS]
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, out + err
            lost += (out + err).count("lost their devices to another planner")
        rounds += 1
        if each_round is not None:
            each_round()
        time.sleep(1)
    return rounds, lost


def never_beyond_memory(spans: Spans) -> int:
    """Check that no device ever held more than its memory (the load at every start is the
    peak load); how many starts were beside a job of the other planner."""
    at_once = 0
    for device, runs in spans.items():
        for start, _, _, _ in runs:
            load = [(m, p) for s, e, m, p in runs if s <= start < e]
            assert sum(m for m, _ in load) <= DEVICES[device][0], (device, load)
            at_once += len({p for _, p in load}) == 2
    return at_once


def open_gates(live: Pool, only: str | None = None) -> dict[tuple[str, str], int]:
    """Device memory of the open gates (placed, idle) of both schedds (or ``only`` one's),
    per device."""
    load: dict[tuple[str, str], int] = defaultdict(int)
    for planner in [only] if only else SCHEDDS:
        for ad in queued(live, planner):
            if ad.get("CosharePlacedNode"):
                for device in str(ad["CosharePlacedDevices"]).split(","):
                    load[(str(ad["CosharePlacedNode"]), device)] += int(ad["CoshareDeviceMemory"])
    return load


def booked(live: Pool) -> dict[tuple[str, str], int]:
    """Device memory of every placed job in both queues (an open gate or running), a gang's
    on each of its nodes, per device."""
    load: dict[tuple[str, str], int] = defaultdict(int)
    for name in SCHEDDS.values():
        for ad in schedd(live, name).query(
            "true",
            projection=[
                "CosharePlacedNode",
                "CosharePlacedDevices",
                "CosharePlacedNodes",
                "CosharePlacedNodeDevices",
                "CoshareDeviceMemory",
            ],
        ):
            if ad.get("CosharePlacedNodes"):
                parts = zip(ad["CosharePlacedNodes"], ad["CosharePlacedNodeDevices"], strict=True)
            elif ad.get("CosharePlacedNode"):
                parts = zip([ad["CosharePlacedNode"]], [ad["CosharePlacedDevices"]], strict=True)
            else:
                continue
            for node, devices in parts:
                for device in str(devices).split(","):
                    load[(str(node), device)] += int(ad["CoshareDeviceMemory"])
    return load


def live_claims(dsn: str, planner: str) -> dict[tuple[str, str], int]:
    """The planner's live claims: device memory per device."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT node, device, sum(memory_mib) FROM coshare_live_claims "
            "WHERE planner = %s GROUP BY node, device",
            (planner,),
        ).fetchall()
    return {(str(node), str(device)): int(mib) for node, device, mib in rows}


def cycle_of(config: Path) -> None:
    done = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "cycle"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def within_memory(load: dict[tuple[str, str], int]) -> None:
    for device, memory in load.items():
        assert memory <= DEVICES[device][0], (device, memory, dict(load))


def test_a_planner_sigkilled_mid_cycle_leaves_both_queues_consistent(
    two_schedds: Pool, planners: dict[str, Path]
) -> None:
    live = two_schedds
    never = {"requirements": "CoshareNeverStart =?= true"}  # open gates stay open
    dsn = yaml.safe_load(planners["b"].read_text())["coordination"]["dsn"]
    # Jobs of 5000 MiB: one on an 8 GiB device, three on the 16 GiB one; each node has two
    # cores, so device memory, not cores, is what the planners can get wrong.
    submit(live, "b", 3, 5000, **never)
    cycle_of(planners["b"])  # b's first jobs placed: open gates, claims held
    assert sum(1 for ad in queued(live, "b") if ad.get("CosharePlacedNode")) == 3
    submit(live, "b", 2, 5000, **never)
    # b dies after two edits of its second cycle: claims made for the new jobs, their
    # placements half written, no gate of them open.
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.condor_cycle_with_faults",
            "--config",
            str(planners["b"]),
            "--kill-after-edit",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    killed_at = time.monotonic()
    assert killed.returncode == -9, killed.stdout + killed.stderr
    claims = live_claims(dsn, "condor-b")
    assert sum(claims.values()) == 5 * 5000  # the unwritten ones too
    # Within its lease, the other planner plans around its claims and its open gates.
    submit(live, "a", 2, 5000, **never)
    cycle_of(planners["a"])
    assert time.monotonic() < killed_at + LEASE_S, "too slow: the claims expired meanwhile"
    mine = open_gates(live, only="a")
    assert mine, "planner a placed nothing"
    within_memory({k: mine.get(k, 0) + claims.get(k, 0) for k in {*mine, *claims}})
    time.sleep(max(0.0, killed_at + LEASE_S + 0.5 - time.monotonic()))
    assert live_claims(dsn, "condor-b") == {}  # dead with its lease, nobody cleaned them
    # After it, the dead planner's open gates still hold their devices (the other planner
    # reads them from that schedd's queue): more jobs of planner a than the pool has room
    # for book none of them twice.
    submit(live, "a", 8, 5000, **never)
    cycle_of(planners["a"])
    assert len(open_gates(live, only="a")) > 2, "planner a placed nothing more"
    within_memory(open_gates(live))


Planners = tuple[Postgres, dict[str, Path]]


def test_the_engine_stopped_mid_cycle_and_restarted(
    two_schedds: Pool, engine_and_planners: Planners
) -> None:
    """The engine stops right after planner b's first queue edit: the fence before its next
    transaction finds no engine, so it stops there with no gate opened (the gate is written
    last) and exits 1 naming the address; planner a then finds no engine, writes nothing
    and exits 1 too; once the engine runs again, b opens its gates and a plans around them
    and b's claims, and no device holds more than its memory."""
    live = two_schedds
    engine, planners = engine_and_planners
    never = {"requirements": "CoshareNeverStart =?= true"}  # open gates stay open
    submit(live, "b", 4, 5000, **never)
    try:
        stopped = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.integration.condor_cycle_with_faults",
                "--config",
                str(planners["b"]),
                "--stop-engine-after-edit",
                "1",
                "--engine",
                str(engine.dir),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert not engine.running(), "the engine still runs"
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 1, said
        assert f"127.0.0.1:{engine.port}" in said and "stopped between two batches" in said, said
        assert not any(ad.get("CosharePlacedNode") for ad in queued(live, "b")), said
        submit(live, "a", 3, 5000, **never)
        other = subprocess.run(
            [COSHARE, "--config", str(planners["a"]), "condor", "cycle"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = other.stdout + other.stderr
        assert other.returncode == 1, said
        assert f"127.0.0.1:{engine.port}" in said and "unreachable" in said, said
        assert not open_gates(live, only="a")  # nothing written
    finally:
        if not engine.running():
            engine.start()
    cycle_of(planners["b"])
    assert sum(1 for ad in queued(live, "b") if ad.get("CosharePlacedNode")) == 4
    cycle_of(planners["a"])
    assert open_gates(live, only="a"), "planner a placed nothing after the restart"
    within_memory(open_gates(live))


GANG_MEMORY_MIB = 3000


def test_a_gang_of_one_planner_and_the_other_planners_jobs_never_book_a_device_twice(
    two_schedds: Pool, planners: dict[str, Path]
) -> None:
    """Gangs with two planners, as HTCondor allows
    them: parallel-universe jobs run from one dedicated scheduler per pool (deploy/condor/pool
    names schedd a), so the gang is planner a's, over two nodes, and planner b's single-node
    jobs want the same devices. Both planners cycle at the same moment until both queues are
    empty; every part of the gang is claimed before it is written, so no device ever holds
    more than its memory (the jobs' own start and end times), and the gang ran whole, one
    process on each node it was placed on, each with that node's planned devices."""
    from tests.integration.test_condor_gangs import race_lines, schedlog_length, submit_gang

    live = two_schedds
    for attempt in (1, 2):
        since = schedlog_length()
        # Whole-node slots for the gang: HTCondor's dedicated scheduler may take two dynamic
        # slots of one node for it otherwise (docs/deploy-htcondor.md).
        gang = submit_gang(
            live,
            to=schedd(live, SCHEDDS["a"]),
            request_cpus=str(live.node_cores()),
            **annotated(GANG_MEMORY_MIB, 60),
        )
        singles = submit(live, "b", 6)
        try:
            # After every round: what both queues have placed (open gates, running jobs,
            # the gang on both its nodes) within every device's memory.
            rounds, lost = cycle_both_until_done(
                live, planners, 300, lambda: within_memory(booked(live))
            )
            break
        except AssertionError as exc:
            # HTCondor's own claim race of the dedicated scheduler (test_condor_gangs.RACE)
            # leaves a gang idle for good; only such a run (timed out, the race in the
            # SchedLog) is started once more.
            if attempt == 2 or "still queued" not in str(exc) or not race_lines(since):
                raise
            for name in SCHEDDS.values():
                schedd(live, name).act(live.htcondor.JobAction.Remove, "true")
    [ended] = schedd(live, SCHEDDS["a"]).history(
        f"ClusterId == {gang}",
        projection=["ExitCode", "CosharePlacedNodes", "CosharePlacedNodeDevices"],
    )
    placed = [
        (str(n), str(d))
        for n, d in zip(ended["CosharePlacedNodes"], ended["CosharePlacedNodeDevices"], strict=True)
    ]
    assert ended["ExitCode"] == 0 and len({n for n, _ in placed}) == 2, ended
    spans: Spans = defaultdict(list)
    seen = []
    for node_no in range(2):
        out = (CHROOT / WORK.lstrip("/") / f"out.{gang}.{node_no}").read_text().splitlines()
        start, end, devices = out[0].split()
        seen.append((out[1], devices))
        for device in devices.split(","):
            spans[(out[1], device)].append((float(start), float(end), GANG_MEMORY_MIB, "a"))
    assert sorted(seen) == sorted(placed), (seen, placed)
    for ad in schedd(live, SCHEDDS["b"]).history("true", projection=["ClusterId", "ProcId"]):
        job = f"b:{ad['ClusterId']}.{ad['ProcId']}"
        if job not in singles:
            continue  # an earlier attempt's, removed
        out = CHROOT / WORK.lstrip("/") / f"out.b.{ad['ClusterId']}.{ad['ProcId']}"
        start, end, devices = out.read_text().splitlines()[0].split()
        node = out.read_text().splitlines()[1]
        for device in devices.split(","):
            spans[(node, device)].append((float(start), float(end), singles[job], "b"))
    assert sum(len(v) for v in spans.values()) >= 2 + len(singles), dict(spans)
    at_once = never_beyond_memory(spans)
    gang_devices = {(n, d) for n, d in placed}
    shared = [d for d in gang_devices if len({p for *_, p in spans[d]}) == 2]
    print(
        f"{rounds} rounds of two cycles; {lost} cycles lost jobs to the other's claims; "
        f"the gang on {placed}; {len(shared)} of its devices ran b's jobs too, "
        f"{at_once} starts beside a job of the other planner"
    )
