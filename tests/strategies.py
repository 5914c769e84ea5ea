"""Hypothesis strategies for random but valid snapshots (shared by the property tests)."""

from __future__ import annotations

from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from hypothesis import strategies as st

DEVICE_SIZES = (1024, 2048, 6144, 8192, 16384)
THREAD_LIMITS = (8, 60, 228, 240, 244)


@st.composite
def nodes(draw: st.DrawFn, max_nodes: int = 5) -> tuple[Node, ...]:
    count = draw(st.integers(1, max_nodes))
    out = []
    for i in range(count):
        devices = tuple(
            Device(
                str(d), draw(st.sampled_from(DEVICE_SIZES)), draw(st.sampled_from(THREAD_LIMITS))
            )
            for d in range(draw(st.integers(0, 3)))
        )
        out.append(
            Node(
                name=f"n{i}",
                cpu_milli=draw(st.sampled_from((1, 2, 4, 16))) * MILLI,
                memory_mib=draw(st.sampled_from((2048, 8192, 65536))),
                devices=devices,
            )
        )
    return tuple(out)


@st.composite
def jobs(draw: st.DrawFn, prefix: str, count: int) -> list[Job]:
    out = []
    for i in range(count):
        kind = draw(st.sampled_from(("device", "device", "device", "device", "cpu")))
        out.append(
            Job(
                id=f"{prefix}{i}",
                device_memory_mib=draw(st.integers(1, 9000)) if kind == "device" else 0,
                device_threads=draw(st.sampled_from((0, 1, 7, 60, 120, 180, 240, 300)))
                if kind == "device"
                else 0,
                device_count=draw(st.sampled_from((1, 1, 1, 2))) if kind == "device" else 0,
                cpu_milli=draw(st.sampled_from((250, 1000, 1500, 4000))),
                memory_mib=draw(st.sampled_from((0, 512, 1024, 4096))),
                priority=draw(st.integers(-2, 2)),
                submit_time_s=float(draw(st.integers(0, 10_000))),
                kind=kind,
                processes=draw(st.sampled_from((1, 1, 1, 2))),
            )
        )
    return out


@st.composite
def snapshots(draw: st.DrawFn, max_pending: int = 30) -> Snapshot:
    """A cluster, jobs already holding resources within every limit, and pending jobs."""
    cluster = draw(nodes())
    running = []
    for n in cluster:
        free_cpu, free_mem = n.cpu_milli, n.memory_mib
        for d in n.devices:
            mem_left, thr_left = d.memory_mib, d.threads
            for k in range(draw(st.integers(0, 2))):
                m = draw(st.integers(0, mem_left))
                t = draw(st.integers(0, thr_left))
                c = draw(st.integers(0, free_cpu))
                h = draw(st.integers(0, free_mem))
                mem_left, thr_left, free_cpu, free_mem = (
                    mem_left - m,
                    thr_left - t,
                    free_cpu - c,
                    free_mem - h,
                )
                state = draw(st.sampled_from(("running", "planned")))
                running.append(
                    RunningJob(f"r-{n.name}-{d.id}-{k}", n.name, (d.id,), m, t, c, h, state)
                )
    pending = draw(jobs("p", draw(st.integers(0, max_pending))))
    now = draw(st.one_of(st.none(), st.just(20_000.0)))
    return Snapshot(cluster, tuple(running), tuple(pending), now)
