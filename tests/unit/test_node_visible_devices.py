"""The devices a job's CUDA clients are told: each planned id as its NVML UUID (a MIG
instance is visible to CUDA by its ``MIG-`` UUID only), from the node daemon's START and
JOIN replies to what ``coshare-launch`` and Slurm's TaskProlog export; against a faithful
fake of NVML (tests/unit/fake_nvml_mig.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.cgroups.v1 import CONTROLLERS
from coshare.node.control.launcher import task_prolog
from coshare.node.control.service import JobControl
from coshare.node.gpus import GpuDevice, discover, visible_devices

from tests.unit.fake_nvml_mig import FakeNvml, Instance, a100_80gb, h100_80gb

G3_40 = Instance(3, 40192, 42)
G1_10 = Instance(1, 9856, 14)


def node_gpus() -> list[GpuDevice]:
    """An H100 whole (``0``) beside an A100 in MIG mode with two instances (``1:0``, ``1:2``)."""
    return discover(
        FakeNvml([h100_80gb(), a100_80gb([G3_40, None, G1_10, None, None, None, None])])
    )


def test_each_planned_id_becomes_its_uuid_in_the_plans_order() -> None:
    found = {d.id: d.uuid for d in node_gpus()}
    assert visible_devices(("1:2", "0"), node_gpus()) == f"{found['1:2']},{found['0']}"
    assert found["1:2"].startswith("MIG-") and found["0"].startswith("GPU-")
    assert visible_devices((), node_gpus()) == ""


@pytest.mark.parametrize(
    ("device", "why"),
    [
        ("7", "device 7 is not on this node (NVML lists 0, 1:0, 1:2)"),
        ("1", "device 1 is a GPU in MIG mode: its instances are planned"),
        ("1:1", "device 1:1 is not on this node"),
    ],
)
def test_a_device_nvml_does_not_list_or_a_mig_parent_is_refused_naming_it(
    device: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        visible_devices(("0", device), node_gpus())


def service(tmp_path: Path, gpus: list[GpuDevice]) -> JobControl:
    """The node daemon's job control over a temp dir with the kernel's cgroup v1 layout."""
    root = tmp_path / "cgroup"
    for controller in CONTROLLERS:
        (root / controller / "coshare").mkdir(parents=True, exist_ok=True)
        (root / controller / "cgroup.procs").write_text("")
    (root / "cpuset" / "coshare" / "cpuset.effective_cpus").write_text("0-1\n")
    config = NodeConfig(cgroup_root=str(root), state_dir=str(tmp_path / "state"))
    return JobControl(config, gpus=lambda: gpus)


def test_start_is_refused_before_anything_is_made_for_a_device_this_node_lacks(
    tmp_path: Path,
) -> None:
    svc = service(tmp_path, node_gpus())
    reply = svc.handle(b"START job=5 cores=1 devices=0,9", os.getpid(), 0, None)
    assert reply.startswith("ERR bad_device job 5: device 9 is not on this node"), reply
    assert svc.store.read("5") is None  # no record, no group


def test_the_reply_field_names_the_uuids_where_nvml_lists_gpus_and_nothing_elsewhere(
    tmp_path: Path,
) -> None:
    found = {d.id: d.uuid for d in node_gpus()}
    assert service(tmp_path, node_gpus())._visible(("1:0",)) == f" visible={found['1:0']}"
    assert service(tmp_path, [])._visible(("phi0",)) == ""  # no NVML GPU: ids as planned
    assert service(tmp_path, node_gpus())._visible(()) == ""


def test_slurms_task_prolog_exports_cuda_the_uuids_and_the_other_runtimes_the_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job-42.json").write_text("{}")
    uuid = next(d.uuid for d in node_gpus() if d.id == "1:2")
    monkeypatch.setattr(
        "coshare.node.control.launcher.request",
        lambda socket, line: {"job": "42", "devices": "1:2", "visible": uuid},
    )  # the daemon's JOIN reply, as join_reply writes it on a GPU node
    found = task_prolog("/x.sock", "/g.sock", str(tmp_path), {"SLURM_JOB_ID": "42"})
    assert found is not None and found[1] == 0
    assert f"export CUDA_VISIBLE_DEVICES={uuid}" in found[0]
    assert "export GPU_DEVICE_ORDINAL=1:2" in found[0]
    assert "export COSHARE_DEVICES=1:2" in found[0]
