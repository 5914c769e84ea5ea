"""Device memory accounting of the watchdog (the pure part; the kill is tested for real in
tests/node/), the NVML backend on a machine with an NVIDIA GPU, and a watchdog that keeps
going when a job, the device backend or a whole round fails (against a cgroup layout in a
temp dir; tests/node/test_watchdog_real.py does it with the real daemon and cgroups)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from coshare.config import NodeConfig
from coshare.errors import NodeError
from coshare.node import daemon
from coshare.node.gate.state import Client
from coshare.node.jobs import JobRecord, JobStore
from coshare.node.spec import JobSpec
from coshare.node.watchdog import Violation, Watchdog, device_memory_violations

MIB = 1024 * 1024


def record(job: str, devices: tuple[str, ...], device_memory_mib: int | None) -> JobRecord:
    spec = JobSpec(job, devices=devices, device_memory_mib=device_memory_mib)
    return JobRecord(spec, "v2", "/sys/fs/cgroup", "coshare")


def test_a_job_over_its_declaration_is_found_and_its_neighbour_is_not() -> None:
    records = [record("a", ("0",), 1000), record("b", ("0",), 1000)]
    pids = {10: "a", 11: "a", 20: "b", 30: None}
    usage = {
        ("0", 10): 600 * MIB,
        ("0", 11): 500 * MIB,
        ("0", 20): 999 * MIB,
        ("0", 30): 5000 * MIB,
    }
    found = device_memory_violations(records, usage, pids.get)
    assert found == [Violation("a", "device_memory", 1000, 1100, "0")]
    assert "used 1100 MiB of memory on device 0, over the declared 1000 MiB" in found[0].reason()


def test_use_of_a_device_not_assigned_is_a_violation() -> None:
    found = device_memory_violations([record("a", ("0",), 100)], {("1", 5): MIB}, {5: "a"}.get)
    assert found == [Violation("a", "device_memory", 0, 1, "1")]
    assert "not assigned" in found[0].reason()


def test_devices_named_by_uuid_are_matched_through_the_backend() -> None:
    records = [record("a", ("GPU-abc",), 100)]
    canonical = {"GPU-abc": "0"}.get
    found = device_memory_violations(
        records, {("0", 5): 50 * MIB}, {5: "a"}.get, lambda d: canonical(d) or d
    )
    assert found == []


def _nvml_reason() -> str | None:
    if importlib.util.find_spec("pynvml") is None:
        return "nvidia-ml-py is not installed (pip install 'coshare[nvml]')"
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA GPU or driver on this machine (NVML: {exc})"
    pynvml.nvmlShutdown()
    return None


@pytest.mark.gpu
def test_nvml_backend_lists_gpus_and_per_process_memory() -> None:
    reason = _nvml_reason()
    if reason is not None:
        pytest.skip(reason)
    from coshare.node.nvml import NvmlMemory

    backend = NvmlMemory()
    try:
        devices = backend.devices()
        assert devices and all(ids[1].startswith(("GPU-", "MIG-")) for ids in devices)
        assert backend.canonical(devices[0][1]) == devices[0][0]
        usage = backend.usage()
        assert all(d in {ids[0] for ids in devices} and n >= 0 for (d, _), n in usage.items())
    finally:
        backend.close()


def test_nvml_backend_without_a_gpu_says_so() -> None:
    if _nvml_reason() is None:
        pytest.skip("an NVIDIA GPU is present: the error path cannot be seen here")
    from coshare.errors import NodeError
    from coshare.node.nvml import NvmlMemory

    with pytest.raises(NodeError, match=r"nvml|NVML"):
        NvmlMemory()


# -- a watchdog that keeps going -------------------------------------------------------------


class GpuIsLost(Exception):
    """What NVML's bindings raise for a GPU that fell off the bus (not a coshare error)."""


class LostGpu:
    """A device memory backend whose GPU is gone: every read fails."""

    def __init__(self) -> None:
        self.calls = 0

    def usage(self) -> dict[tuple[str, int], int]:
        self.calls += 1
        raise GpuIsLost("GPU is lost")

    def canonical(self, device: str) -> str:
        return device


def frozen_job(root: Path, state: Path, job: str) -> JobStore:
    """A cgroup v1 layout (a temp dir shaped as the kernel's) where ``job`` waits at its
    memory limit, its OOM killer off (memory.oom_control ``under_oom 1``)."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "memory" / "cgroup.procs").write_text("")
    group = root / "memory" / "coshare" / f"job-{job}"
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("")
    (group / "memory.oom_control").write_text("oom_kill_disable 1\nunder_oom 1\noom_kill 0\n")
    store = JobStore(state)
    store.write(
        JobRecord(
            JobSpec(job, memory_mib=64, devices=("0",), device_memory_mib=100),
            "v1",
            str(root),
            "coshare",
        )
    )
    return store


def test_a_failing_device_backend_does_not_stop_the_host_memory_checks(tmp_path: Path) -> None:
    store = frozen_job(tmp_path / "cg", tmp_path / "state", "frozen")
    backend = LostGpu()
    watchdog = Watchdog(store, backend, lambda pid: None, timeout_s=1.0)
    found = watchdog.check()
    assert found == [Violation("frozen", "host_memory", 64)]
    assert (store.reason("frozen") or "").startswith("coshare killed job frozen: its host memory")
    assert watchdog.check() == [] and backend.calls == 2 and watchdog.device_failures == 2


def test_one_unreadable_job_does_not_hide_the_others(tmp_path: Path) -> None:
    store = frozen_job(tmp_path / "cg", tmp_path / "state", "frozen")
    (store.jobs_dir / "job-broken.json").write_text("{not json")
    found = Watchdog(store, None, lambda pid: None, timeout_s=1.0).check()
    assert [v.job for v in found] == ["frozen"]


def watch_config(**values: object) -> NodeConfig:
    base: dict[str, Any] = {
        "watch_interval_s": 0.01,
        "kill_timeout_s": 0.1,
        "watch_failure_limit": 3,
    }
    return NodeConfig(**{**base, **values})


class Rounds:
    """A watchdog whose rounds fail as told: an exception to raise, or ``"hang"``."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.rounds = 0

    def check(self) -> list[Violation]:
        self.rounds += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome == "hang":
            threading.Event().wait()
        if isinstance(outcome, BaseException):
            raise outcome
        return []


def run_watch(rounds: Rounds, config: NodeConfig, stop_after_s: float = 1.0) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(stop_after_s, stop.set)
        await daemon._watch(rounds, None, config, stop)  # type: ignore[arg-type]

    asyncio.run(main())


def test_failed_rounds_are_retried_and_a_success_starts_the_count_afresh() -> None:
    failures = [RuntimeError("NVML_ERROR_UNKNOWN"), OSError("cgroup fs gone")]
    rounds = Rounds(*failures, None, *failures, None)
    run_watch(rounds, watch_config(), stop_after_s=0.3)
    assert rounds.rounds > 6  # it went on after each failure


def test_the_watchdog_gives_up_after_the_failure_limit() -> None:
    rounds = Rounds(*[GpuIsLost(f"round {n}") for n in range(10)])
    with pytest.raises(
        NodeError,
        match="the memory watchdog failed 3 rounds in a row, the "
        "last with: round 2; the daemon stops",
    ):
        run_watch(rounds, watch_config(), stop_after_s=30)
    assert rounds.rounds == 3


def test_a_round_that_never_ends_stops_the_daemon() -> None:
    rounds = Rounds("hang")
    started = time.monotonic()
    with pytest.raises(NodeError, match=r"a memory watchdog round did not finish in 0\.3 s"):
        run_watch(rounds, watch_config(), stop_after_s=30)
    assert time.monotonic() - started < 5


def test_serve_stops_and_cleans_up_when_the_watchdog_cannot_run(tmp_path: Path) -> None:
    config = watch_config(
        gate_socket=str(tmp_path / "gate.sock"), state_dir=str(tmp_path), cgroup_root=str(tmp_path)
    )
    rounds = Rounds(*[RuntimeError("boom")] * 3)

    async def main() -> None:
        await daemon.serve(
            config,
            {"0": 8},
            asyncio.Event(),
            control=False,
            identify=lambda pid, uid: Client(None),
            watchdog=rounds,
        )  # type: ignore[arg-type]

    with pytest.raises(NodeError, match="failed 3 rounds in a row"):
        asyncio.run(main())
    assert not (tmp_path / "gate.sock").exists()


def test_nvml_errors_become_node_errors_naming_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bindings stand-in of tests/node/fake_nvml: one GPU, lost (nvidia-ml-py's names).
    spec = importlib.util.spec_from_file_location(
        "pynvml", Path(__file__).parents[1] / "node" / "fake_nvml" / "pynvml.py"
    )
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    from coshare.node.nvml import NvmlMemory

    with pytest.raises(
        NodeError,
        match=r"NVML cannot list the processes of GPU 0 "
        r"\(GPU-00000000-fake-.*\): GPU is lost",
    ):
        NvmlMemory().usage()
