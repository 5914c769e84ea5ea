"""The Alibaba fragmentation benchmark: protocol, the reduced online snapshot, trace parsing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from coshare.errors import InputError
from coshare.model import MILLI, Device, Job, Node
from coshare.policies import make_policy
from coshare.sim import fragmentation as frag
from coshare.sim.trace_files import ALIBABA_DIR, data_dir, read_alibaba
from coshare.sim.traces import (
    GPU_MILLI,
    TraceError,
    parse_alibaba_nodes,
    parse_alibaba_pods,
    parse_swf,
    parse_swf_machines,
)
from hypothesis import given, settings
from hypothesis import strategies as st

POLICIES = ("exclusive", "random", "knapsack", "bestfit", "fgd")
ALIBABA = data_dir() / ALIBABA_DIR


def gpu_nodes(kinds: list[tuple[int, int]], copies: int) -> list[Node]:
    """``copies`` identical nodes of each (GPUs, cores) kind, interleaved."""
    nodes = []
    for c in range(copies):
        for k, (gpus, cores) in enumerate(kinds):
            gpus_of = tuple(Device(str(g), GPU_MILLI, GPU_MILLI, "G") for g in range(gpus))
            nodes.append(Node(f"k{k}-{c}", cores * MILLI, 64 * 1024, gpus_of))
    return nodes


@st.composite
def pod_lists(draw: st.DrawFn) -> list[Job]:
    pods = []
    for i in range(draw(st.integers(5, 40))):
        count = draw(st.sampled_from((0, 1, 1, 1, 1, 2)))
        share = draw(st.sampled_from((100, 250, 470, 500, 810))) if count == 1 else 1000
        pods.append(
            Job(
                f"p{i}",
                share if count else 0,
                share if count else 0,
                count,
                cpu_milli=draw(st.sampled_from((1000, 4000, 8000))),
                memory_mib=1024,
                kind="device" if count else "cpu",
            )
        )
    return pods


@settings(max_examples=60)
@given(pods=pod_lists(), seed=st.integers(0, 5))
def test_the_reduced_online_snapshot_changes_no_decision(pods: list[Job], seed: int) -> None:
    nodes = gpu_nodes([(2, 16), (4, 32), (1, 8)], copies=3)
    options = frag.fragmentation_options(nodes, pods, seed)
    for name in POLICIES:
        policy = make_policy(name, options)
        ledger = frag._Ledger(frag.node_order(nodes, seed))
        for pod in frag.arrivals(pods, frag.gpu_capacity(nodes), seed, limit=1.1):
            full = policy.plan(ledger.snapshot([pod], reduced=False))
            reduced = policy.plan(ledger.snapshot([pod], reduced=True))
            assert full.assignments == reduced.assignments, name
            ledger.apply(full, [pod])


def test_arrivals_shuffle_then_clone_until_the_limit() -> None:
    pods = [Job(f"p{i}", 500, 500, 1) for i in range(10)] + [Job("c", kind="cpu", device_count=0)]
    capacity = 4 * GPU_MILLI
    seq = frag.arrivals(pods, capacity, seed=1)
    assert sorted(p.id for p in seq[: len(pods)]) == sorted(p.id for p in pods)
    assert len({p.id for p in seq}) == len(seq)
    total = sum(frag.gpu_request(p) for p in seq)
    assert total >= 1.3 * capacity > total - 500
    assert frag.arrivals(pods, capacity, seed=1) == seq
    assert frag.arrivals(pods, capacity, seed=2) != seq


@pytest.mark.parametrize("protocol", frag.PROTOCOLS)
@pytest.mark.parametrize("name", POLICIES)
def test_benchmark_records_arrivals_and_allocations(name: str, protocol: str) -> None:
    rng = random.Random(4)
    nodes = gpu_nodes([(2, 16), (8, 96)], copies=4)
    pods = [
        Job(f"p{i}", s, s, 1, cpu_milli=rng.choice((1000, 6000)), memory_mib=512)
        for i, s in enumerate(rng.choice((230, 470, 1000)) for _ in range(60))
    ]
    run = frag.run_benchmark(nodes, pods, name, protocol, seed=3, batch=7)
    assert list(run.arrived) == sorted(run.arrived) and run.arrived[-1] >= 130.0
    assert all(0 <= a <= 100.0 for a in run.allocated)
    assert all(a <= b + 1e-9 for a, b in zip(run.allocated, run.arrived))
    assert run.placed + run.dropped == len(frag.arrivals(pods, frag.gpu_capacity(nodes), 3))
    assert run.unallocated_at(50) == pytest.approx(
        100 - float(__import__("numpy").interp(50, run.arrived, run.allocated))
    )
    assert 0 <= run.unallocated_at(130) <= 100
    crossing = next(i for i, a in enumerate(run.arrived) if a >= 100.0)
    parts = run.at_100
    assert parts["idle_gpus"] + parts["partial"] == pytest.approx(100 - run.allocated[crossing])
    assert 0 <= parts["idle_gpus_no_cores"] <= parts["idle_gpus"]


def test_parsers_read_the_alibaba_and_swf_formats() -> None:
    nodes = parse_alibaba_nodes(
        "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\nn2,8000,32768,1,\n"
    )
    assert [len(n.devices) for n in nodes] == [8, 1]
    assert nodes[0].devices[0].model == "G2" and nodes[0].cpu_milli == 96000
    pods = parse_alibaba_pods(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "a,6000,12288,1,460,,LS,Running,0,100,0\n"
        "b,4000,1024,0,0,,BE,Running,5,,5\n"
        "c,32000,65536,4,1000,,LS,Running,9,90,9\n"
    )
    assert [(p.job.device_memory_mib, p.job.device_count, p.job.kind) for p in pods] == [
        (460, 1, "device"),
        (0, 0, "cpu"),
        (1000, 4, "device"),
    ]
    assert [p.gpu_milli for p in pods] == [460, 0, 4000]
    assert pods[1].deleted_s is None
    with pytest.raises(TraceError, match="gpu_milli"):
        parse_alibaba_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,1,1200\n")
    with pytest.raises(InputError, match="cpu_milli"):
        parse_alibaba_nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,many,1,1,G\n")

    swf = parse_swf(
        [
            "; Version: 2.2",
            "1   0 308434 31405 30 31405   -1 30 37980   -1 1 1 1 -1 -1 1 -1 -1",
            "2   8     10    -1  2    -1   -1  2   100   -1 5 1 1 -1 -1 1 -1 -1",
            "3  12      5    60  2    60 2048  2   100 4096 1 1 1 -1 -1 1 -1 -1",
        ]
    )
    assert swf.skipped == 1
    assert [(j.job.processes, j.run_s, j.job.memory_mib) for j in swf.jobs] == [
        (30, 31405.0, 0),
        (2, 60.0, 4),
    ]
    with pytest.raises(TraceError, match="18"):
        parse_swf(["1 2 3"])
    machines = parse_swf_machines("0 seth 3 2 1 1048576\n")
    assert [(n.name, n.cpu_milli, n.memory_mib) for n in machines] == [
        ("seth001", 2000, 1024),
        ("seth002", 2000, 1024),
        ("seth003", 2000, 1024),
    ]


@pytest.mark.skipif(not ALIBABA.is_dir(), reason="no shared traces")
def test_the_real_alibaba_trace_is_read_as_published() -> None:
    trace = read_alibaba(Path(ALIBABA))
    pods = [p.job for p in trace.pods]
    assert len(trace.nodes) == 1213 and len(pods) == 8152
    assert sum(len(n.devices) for n in trace.nodes) == 6212
    assert sum(n.cpu_milli for n in trace.nodes) == 107_018_000
    share = sum(frag.gpu_request(p) for p in pods) / frag.gpu_capacity(trace.nodes)
    assert share == pytest.approx(0.9798, abs=1e-4)
