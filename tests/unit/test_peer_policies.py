"""The fragmentation benchmark's peers, bestfit and fgd, on hand-built GPU clusters.

GPUs are modelled as the simulator reads the Alibaba trace: 1000 milli of memory and
threads each, a pod's GPU share as its memory and threads.
"""

from __future__ import annotations

import pytest
from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.fgd import FgdPolicy, job_shape, target_workload
from coshare.sim.trace_files import ALIBABA_DIR, data_dir


def gpu_node(name: str, gpus: int = 2, cores: int = 32) -> Node:
    return Node(name, cores * MILLI, 262144, tuple(Device(str(i), 1000, 1000) for i in range(gpus)))


def pod(ident: str, share: int, count: int = 1, cores: float = 4) -> Job:
    return Job(
        ident,
        device_memory_mib=share,
        device_threads=share,
        device_count=count,
        cpu_milli=int(cores * MILLI),
        memory_mib=1024,
        kind="device" if count else "cpu",
    )


def held(node: str, device: str, share: int, cores: int = 4) -> RunningJob:
    return RunningJob(f"r-{node}-{device}", node, (device,), share, share, cores * MILLI, 1024)


Where = dict[str, tuple[str, tuple[str, ...]]]


def where(snapshot: Snapshot, name: str, **options: object) -> Where:
    plan = make_policy(name, PolicyOptions(**options)).plan(snapshot)  # type: ignore[arg-type]
    assert check_plan(snapshot, plan) == []
    return {a.job: (a.node, a.devices) for a in plan.assignments}


def test_bestfit_takes_the_node_left_with_least_room_and_its_fullest_gpu() -> None:
    snap = Snapshot(
        (gpu_node("a"), gpu_node("b")),
        (held("b", "1", 600),),  # b has less GPU left
        (pod("p", 300),),
    )
    assert where(snap, "bestfit") == {"p": ("b", ("1",))}


def test_bestfit_weighs_host_cores_too() -> None:
    # a: GPUs half used, all cores free; b: GPUs free, cores nearly all used
    snap = Snapshot(
        (gpu_node("a"), gpu_node("b")),
        (held("a", "0", 500, 0), held("a", "1", 500, 0), held("b", "0", 0, 28)),
        (pod("p", 300),),
    )
    # left after placing: a 0.5*28/32 + 0.5*0.7/2 = 0.6125; b 0.5*0/32 + 0.5*1.7/2 = 0.425
    assert where(snap, "bestfit")["p"][0] == "b"


def test_bestfit_places_a_cpu_pod_where_fewest_cores_remain() -> None:
    snap = Snapshot((gpu_node("a", cores=64), gpu_node("b", cores=16)), (), (pod("c", 0, 0),))
    assert where(snap, "bestfit") == {"c": ("b", ())}


def test_fgd_keeps_whole_gpus_whole_when_whole_gpu_pods_are_expected() -> None:
    # b/0 is half used. A 0.3 pod on a's empty GPU would break a GPU the expected whole-GPU
    # pods need; on b/0 it only shrinks a fragment they could never use anyway.
    workload = target_workload([(4 * MILLI, 1000, 1)] * 8 + [(4 * MILLI, 300, 1)] * 2)
    snap = Snapshot(
        (gpu_node("a", gpus=1), gpu_node("b", gpus=2)),
        (held("b", "0", 500),),
        (pod("p", 300),),
    )
    for exact in (True, False):
        plan = FgdPolicy(workload=workload, exact=exact).plan(snap)
        assert [(a.node, a.devices) for a in plan.assignments] == [("b", ("0",))]


def test_fgd_with_the_workload_from_the_snapshot() -> None:
    # Expected pods (pending and running): 600 and 400 milli. The first 600 pod fills b/0
    # exactly; on an empty GPU it would leave 400, a fragment for the 600 pods.
    snap = Snapshot(
        (gpu_node("a"), gpu_node("b")),
        (held("b", "0", 400),),
        tuple(pod(f"p{i}", 600) for i in range(3)),
    )
    plan = make_policy("fgd").plan(snap)
    assert check_plan(snap, plan) == []
    assert plan.assignments[0].node == "b" and plan.assignments[0].devices == ("0",)
    assert plan.placed == 3


def test_multi_gpu_pods_take_free_gpus_of_one_node() -> None:
    snap = Snapshot(
        (gpu_node("a", gpus=4), gpu_node("b", gpus=4)),
        (held("a", "2", 100),),
        (pod("m", 1000, count=3),),
    )
    for name in ("bestfit", "fgd"):
        node, devices = where(snap, name)["m"]
        assert len(devices) == 3
        if node == "a":
            assert "2" not in devices


def test_target_workload_keeps_the_frequent_shapes_up_to_the_coverage() -> None:
    shapes = [(1, 1, 1)] * 60 + [(2, 2, 1)] * 30 + [(3, 3, 1)] * 6 + [(4, 4, 1)] * 4
    assert target_workload(shapes) == (((1, 1, 1), 60), ((2, 2, 1), 30), ((3, 3, 1), 6))
    assert target_workload(shapes, coverage=0.5) == (((1, 1, 1), 60),)


@pytest.mark.skipif(not (data_dir() / ALIBABA_DIR).is_dir(), reason="no shared traces")
def test_alibaba_target_workload_has_35_shapes_as_published() -> None:
    from coshare.sim.trace_files import read_alibaba

    trace = read_alibaba(data_dir() / ALIBABA_DIR)
    assert len(target_workload(job_shape(p.job) for p in trace.pods)) == 35
