"""The compute share (``CoshareDeviceCompute``, ``device-compute=25%``): a fraction of a
device's SMs, read by the one parser both schedulers use, planned as device threads (strict
and soft alike), refused naming the job and the key when no device can give it, and the MPS
active thread percentage of the job's CUDA clients where the node runs MPS."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest
from coshare.config import load_config
from coshare.cycle.verify import check_plan
from coshare.errors import AnnotationError
from coshare.ledger.annotations import ClusterLimits, compute_threads, parse_job
from coshare.model import MILLI, Device, Node, Snapshot
from coshare.node.control.launcher import compute_percent, mps_environment, parser
from coshare.policies import PolicyOptions, make_policy

from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
from condor_addon.client import values_of
from condor_addon.view import parse_queue, parse_slots, read_job
from slurm_addon.comment import read_annotations
from tests.unit.test_slurm_view import job, node, view

#: Two 80 GB GPUs whose site declares SMs as device threads: an H100 (132) and an A100 (108).
H100 = Device("0", 81920, 132, "h100")
A100 = Device("1", 81920, 108, "a100")
LIMITS = ClusterLimits.of_nodes([Node("n1", 64 * MILLI, 512 * 1024, (H100, A100))])
CONDOR = Path(__file__).resolve().parents[1] / "fixtures" / "condor" / "23.9.6"


def test_a_share_is_threads_of_the_device_with_the_most() -> None:
    job_ = parse_job(
        "1.0", {"CoshareDeviceMemory": "10G", "CoshareDeviceCompute": "25%"}, limits=LIMITS
    )
    assert (job_.kind, job_.device_threads, job_.device_memory_mib) == ("device", 33, 10240)
    for spelled in ("25", " 25 %", 25, 25.0):
        keys = {"device-memory": "10G", "device-compute": spelled}
        assert parse_job("1.0", keys, limits=LIMITS).device_threads == 33
    assert compute_threads(100, 132) == 132 and compute_threads(0.1, 132) == 1
    assert compute_threads(12.5, 108) == 14  # 13.5 rounds up: never under-reserve


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("150%", "is more compute share than a device has (at most 100%)"),
        (100.5, "is more compute share than a device has (at most 100%)"),
        ("0%", "is not a share above 0%"),
        ("-5", "is not a share above 0%"),
        ("nan%", "is not a percent"),
        ("inf", "is not a percent"),
        ("25%%", "is not a percent"),
        ("a quarter", "is not a percent"),
    ],
)
def test_a_share_no_device_has_is_refused_naming_the_job_and_the_key(
    value: object, why: str
) -> None:
    with pytest.raises(AnnotationError) as info:
        parse_job(
            "9.0", {"CoshareDeviceMemory": 1024, "CoshareDeviceCompute": value}, limits=LIMITS
        )
    text = str(info.value)
    assert text.startswith("job 9.0: CoshareDeviceCompute=") and why in text
    assert "(allowed: a percent of a device's SMs in (0, 100], e.g. 25%)" in text


def test_a_share_beside_threads_without_a_cluster_or_on_a_cpu_job_is_refused() -> None:
    both = {"CoshareDeviceMemory": 1024, "CoshareDeviceThreads": 60, "CoshareDeviceCompute": 25}
    with pytest.raises(AnnotationError, match="is given beside CoshareDeviceThreads"):
        parse_job("2.0", both, limits=LIMITS)
    alone = {"CoshareDeviceMemory": 1024, "CoshareDeviceCompute": 25}
    with pytest.raises(AnnotationError, match="no device of the cluster declares its threads"):
        parse_job("2.0", alone)
    with pytest.raises(AnnotationError, match="is set on a cpu job"):
        parse_job("2.0", {"CoshareKind": "cpu", "CoshareDeviceCompute": 25}, limits=LIMITS)
    # memory alone still misses the threads (or the share)
    with pytest.raises(AnnotationError, match="CoshareDeviceThreads='' is missing"):
        parse_job("2.0", {"CoshareDeviceMemory": 1024}, limits=LIMITS)


@pytest.mark.parametrize(("mode", "placed"), [("strict", 4), ("soft", 5)])
def test_shares_are_planned_as_threads_in_strict_and_soft_modes(mode: str, placed: int) -> None:
    one = Node("n1", 64 * MILLI, 512 * 1024, (H100,))
    limits = ClusterLimits.of_nodes([one])
    pending = tuple(
        parse_job(f"{i}.0", {"device-memory": "8G", "device-compute": "25%"}, limits=limits)
        for i in range(5)
    )
    snapshot = Snapshot((one,), pending=pending)
    plan = make_policy("random", PolicyOptions(threads=mode)).plan(snapshot)  # type: ignore[arg-type]
    assert len(plan.assignments) == placed  # four quarters fill its SMs; soft lets a fifth in
    if mode == "strict":
        check_plan(snapshot, plan)


def test_an_htcondor_submit_file_share_reaches_the_parser() -> None:
    slots = [
        values_of(ad, SLOT_PROJECTION)
        for ad in classad2.parseAds((CONDOR / "slots.ads").read_text())
    ]
    cluster = parse_slots(slots, load_config(environ={}).device_kinds)
    # what `+CoshareDeviceCompute = "50%"` in a submit file puts into the job ad
    text = (
        "ClusterId = 40\nProcId = 0\nJobStatus = 1\nJobUniverse = 5\nRequestCpus = 1\n"
        'RequestMemory = 128\nCoshareDeviceMemory = "512M"\nCoshareDeviceCompute = "50%"\n'
    )
    [ad] = classad2.parseAds(text)
    queued = read_job(values_of(ad, JOB_PROJECTION))
    assert queued is not None and queued.annotations["CoshareDeviceCompute"] == "50%"
    [pending] = parse_queue([queued], cluster, now_s=0.0, replan_after_s=300).book.pending
    most = ClusterLimits.of_nodes(cluster.nodes).device_threads
    assert most > 0 and pending.device_threads == compute_threads(50, most)


def test_a_slurm_comment_share_reaches_the_parser() -> None:
    found = read_annotations("7", "coshare: device-memory=1G device-compute=50%")
    assert found == {"device-memory": "1G", "device-compute": "50%"}
    v = view([node()], [job("7", comment="coshare: device-memory=1G device-compute=50%")])
    [pending] = v.snapshot.pending
    assert pending.device_threads == 120  # half of the fakephi's 240 threads
    bad = view([node()], [job("8", comment="coshare: device-memory=1G device-compute=101%")])
    [(refused, reason)] = [(r.job, r.reason) for r in bad.rejected]
    assert refused == "8" and reason.startswith("job 8: device-compute='101%' is more compute")


def test_the_launcher_reads_the_share_the_job_wrapper_passes() -> None:
    args = parser().parse_args(
        ["run", "--socket", "s", "--job", "j", "--device-compute=25%", "--", "x"]
    )
    assert args.device_compute == "25%" and args.command == ["x"]
    assert (
        parser().parse_args(["run", "--socket", "s", "--job", "j", "--", "x"]).device_compute
        is None
    )


def test_the_mps_thread_percentage_is_the_share_where_one_is_given() -> None:
    reply = {"mps_memory_mib": "8192", "mps_percent": "31"}  # threads over a smaller device
    assert mps_environment(reply, "1", compute="25%")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert mps_environment(reply, "1", compute="12.5")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "13"
    assert mps_environment(reply, "1")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "31"
    # a job that declared no threads: the daemon gives no percentage, the share does
    only_memory = mps_environment({"mps_memory_mib": "8192"}, "1", compute="25%")
    assert only_memory["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # no MPS on the node (the daemon said nothing): the share sets nothing either
    assert mps_environment({}, "1", compute="25%") == {}
    assert [compute_percent(t) for t in ("25%", '"50"', "0", "101", "x", "")] == [
        25,
        50,
        None,
        None,
        None,
        None,
    ]


def test_a_running_htcondor_job_counts_its_share_not_its_whole_device() -> None:
    slots = [
        values_of(ad, SLOT_PROJECTION)
        for ad in classad2.parseAds((CONDOR / "slots.ads").read_text())
    ]
    claim = next(s for s in slots if "#14.0#" in str(s.get("GlobalJobId")))
    shared = {k: v for k, v in claim.items() if k != "CoshareDeviceThreads"}
    shared["CoshareDeviceCompute"] = "25%"
    slots = [shared if s is claim else s for s in slots]
    cluster = parse_slots(slots, load_config(environ={}).device_kinds)
    running = next(r for r in cluster.running if "#14.0#" in r.id)
    node = next(n for n in cluster.nodes if n.name == running.node)
    most = max(d.threads for d in node.devices)
    assert (running.device_memory_mib, running.device_threads) == (2048, compute_threads(25, most))
    assert not any("unreadable" in w for w in cluster.warnings)
