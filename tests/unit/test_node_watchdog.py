"""Device memory accounting of the watchdog (the pure part; the kill is tested for real in
tests/node/), and the NVML backend on a machine with an NVIDIA GPU."""

from __future__ import annotations

import importlib.util

import pytest
from coshare.node.jobs import JobRecord
from coshare.node.spec import JobSpec
from coshare.node.watchdog import Violation, device_memory_violations

MIB = 1024 * 1024


def record(job: str, devices: tuple[str, ...], device_memory_mib: int | None) -> JobRecord:
    spec = JobSpec(job, devices=devices, device_memory_mib=device_memory_mib)
    return JobRecord(spec, "v2", "/sys/fs/cgroup", "coshare")


def test_a_job_over_its_declaration_is_found_and_its_neighbour_is_not() -> None:
    records = [record("a", ("0",), 1000), record("b", ("0",), 1000)]
    pids = {10: "a", 11: "a", 20: "b", 30: None}
    usage = {("0", 10): 600 * MIB, ("0", 11): 500 * MIB, ("0", 20): 999 * MIB,
             ("0", 30): 5000 * MIB}  # fmt: skip
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
    found = device_memory_violations(records, {("0", 5): 50 * MIB}, {5: "a"}.get,
                                     lambda d: canonical(d) or d)  # fmt: skip
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
