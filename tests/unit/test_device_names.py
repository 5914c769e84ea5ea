"""The scheduler's GPU names matched to NVML's devices (coshare.ledger.device_names), against the
faithful NVML fake and output recorded in the shapes the schedulers' documentation gives:
``condor_gpu_discovery``'s ``DetectedGPUs`` (``-short-uuid``, the default; ``-uuid``;
``-by-index``) and ``slurmd -G``'s ``Gres`` lines (``AutoDetect=nvml``, MIG ``UniqueId``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.ledger.device_names import Named, condor_gpu_names, match_names, slurm_gres_names
from coshare.node.gpus import GpuDevice, discover

from tests.unit.fake_nvml_mig import FakeNvml, Gpu, Instance, a100_80gb, h100_80gb

UUID_A = "GPU-6a96bd13-7e8a-0b3f-4f1e-2d1c5e6f7a8b"
UUID_B = "GPU-c4a646d7-aa14-1dd1-f1b0-57288cda864d"
G3_40 = Instance(3, 40192, 42)
G1_10 = Instance(1, 9856, 14)


def two_h100() -> list[GpuDevice]:
    a, b = h100_80gb(), h100_80gb()
    a.uuid, b.uuid = UUID_A, UUID_B
    return discover(FakeNvml([a, b]))


def test_htcondor_short_uuids_match_by_uuid_and_say_where_the_order_disagrees() -> None:
    # CUDA's order put NVML's GPU 1 first: HTCondor's position 0 is NVML's 1
    named = condor_gpu_names('"GPU-c4a646d7, GPU-6a96bd13"')
    assert named == [Named("GPU-c4a646d7", "0"), Named("GPU-6a96bd13", "1")]
    matched = match_names(named, two_h100())
    assert matched.plan_ids() == {"GPU-c4a646d7": "1", "GPU-6a96bd13": "0"}
    assert matched.notes == (
        f"GPU 'GPU-c4a646d7' is the scheduler's device 0 but NVML's 1 ({UUID_B}): matched by UUID",
        f"GPU 'GPU-6a96bd13' is the scheduler's device 1 but NVML's 0 ({UUID_A}): matched by UUID",
    )


def test_htcondor_whole_uuids_and_indexes_match_without_notes_when_they_agree() -> None:
    gpus = two_h100()
    whole = match_names(condor_gpu_names(f"{UUID_A}, {UUID_B}"), gpus)
    assert whole.plan_ids() == {UUID_A: "0", UUID_B: "1"} and whole.notes == ()
    by_index = match_names(condor_gpu_names('"CUDA0, CUDA1"'), gpus)
    assert by_index.plan_ids() == {"CUDA0": "0", "CUDA1": "1"} and by_index.notes == ()
    assert condor_gpu_names("0") == []  # DetectedGPUs = 0: no GPU
    # a slot's AssignedGPUs is part of the node's list: its places are no positions
    assigned = condor_gpu_names('"GPU-c4a646d7"', positions=False)
    assert match_names(assigned, gpus).notes == ()


def test_mig_instances_match_by_their_uuid_and_the_parent_is_never_a_device() -> None:
    gpus = discover(FakeNvml([a100_80gb([G3_40, None, None, G1_10, None, None, None])]))
    parent, first, second = gpus
    names = condor_gpu_names(f"{first.uuid}, {second.uuid}, {parent.uuid[:12]}")
    matched = match_names(names, gpus)
    assert matched.plan_ids() == {first.uuid: "0:0", second.uuid: "0:3"}
    assert matched.notes == (
        f"GPU {parent.uuid[:12]!r} is NVML's GPU 0, in MIG mode: its instances are the "
        "devices, never the GPU whole",
    )


def test_names_that_match_nothing_or_too_much_are_said_and_left_out() -> None:
    a, b = h100_80gb(), h100_80gb()
    a.uuid = "GPU-12345678-0000-0000-0000-000000000001"
    b.uuid = "GPU-12345678-0000-0000-0000-000000000002"
    gpus = discover(FakeNvml([a, b]))
    matched = match_names(
        [Named("GPU-12345678"), Named("GPU-deadbeef"), Named("CUDA7"), Named("gpu zero")], gpus
    )
    assert matched.devices == {}
    assert matched.notes == (
        "GPU 'GPU-12345678': names more than one NVML device (0, 1): give the whole UUID",
        "GPU 'GPU-deadbeef': no device NVML lists has this UUID",
        "GPU 'CUDA7': NVML lists no device 7",
        "GPU 'gpu zero': is neither a UUID (GPU-..., MIG-...) nor an index (0, CUDA0, 0:1)",
    )


def test_two_names_for_one_device_leave_the_second_out() -> None:
    matched = match_names([Named("0"), Named(UUID_A)], two_h100())
    assert matched.plan_ids() == {"0": "0"}
    assert matched.notes == (
        f"GPU {UUID_A!r} names NVML's device 0, which '0' names already: left out",
    )


def test_an_unsupported_device_is_matched_and_said_not_planned() -> None:
    odd = Gpu("NVIDIA Odd", 81920, 0)  # NVML reports no SMs: unsupported
    matched = match_names([Named("0")], discover(FakeNvml([odd])))
    assert matched.plan_ids() == {"0": "0"}
    assert matched.notes == ("GPU '0' is NVML's 0, not planned: SM count 0 (allowed: 1..1024)",)


#: ``slurmd -G`` on a node with AutoDetect=nvml: one whole A100, one A100 in MIG mode with a
#: 3g.40gb and a 1g.10gb instance (gres.conf(5): a MIG line's File lists the GPU and its
#: nvidia-caps, and ends in UniqueId).
SLURMD_G = """\
slurmd: gpu/nvml: _get_system_gpu_list_nvml: 2 GPU system device(s) detected
slurmd: Gres Name=gpu Type=a100 Count=1 Index=0 ID=7696487 File=/dev/nvidia0 Cores=0-31 \
CoreCnt=64 Links=-1,0 Flags=HAS_FILE,HAS_TYPE,ENV_NVML
slurmd: Gres Name=gpu Type=a100_3g.40gb Count=1 Index=291 ID=7696487 \
File=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap291,/dev/nvidia-caps/nvidia-cap292 Cores=32-63 \
CoreCnt=64 Links=-1 Flags=HAS_FILE,HAS_TYPE,ENV_NVML UniqueId={first}
slurmd: Gres Name=gpu Type=a100_1g.10gb Count=1 Index=300 ID=7696487 \
File=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap300,/dev/nvidia-caps/nvidia-cap301 Cores=32-63 \
CoreCnt=64 Links=-1 Flags=HAS_FILE,HAS_TYPE,ENV_NVML UniqueId={second}
slurmd: Gres Name=shard Count=8 Index=0 ID=1684107891 File=/dev/nvidia0 Links=(null)
"""


def test_slurm_gres_lines_match_whole_gpus_by_place_and_mig_instances_by_unique_id() -> None:
    gpus = discover(FakeNvml([a100_80gb(), a100_80gb([G3_40, None, G1_10, None, None])]))
    first, second = (g for g in gpus if g.kind == "mig")
    named = slurm_gres_names(SLURMD_G.format(first=first.uuid, second=second.uuid))
    assert named == [Named("0", "0"), Named(first.uuid), Named(second.uuid)]
    matched = match_names(named, gpus)
    assert matched.plan_ids() == {"0": "0", first.uuid: "1:0", second.uuid: "1:2"}
    assert matched.notes == ()
    # a hand-written gres.conf line for four GPUs: four places
    line = "slurmd: Gres Name=gpu Type=v100 Count=4 Index=0 ID=7696487 File=/dev/nvidia[0-3]"
    assert [n.name for n in slurm_gres_names(line)] == ["0", "1", "2", "3"]


def test_node_gpus_shows_each_devices_scheduler_name(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = h100_80gb(), h100_80gb()
    a.uuid, b.uuid = UUID_A, UUID_B
    monkeypatch.setattr("coshare.node.nvml.start_nvml", lambda: FakeNvml([a, b]))
    env = {"COSHARE_CONFIG": "/dev/null"}
    args = ["node", "gpus", "--condor-names", "GPU-c4a646d7, GPU-6a96bd13"]
    shown = CliRunner().invoke(cli, [*args, "--output", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["names"] == {"GPU-c4a646d7": "1", "GPU-6a96bd13": "0"}
    assert len(data["notes"]) == 2 and "matched by UUID" in data["notes"][0]
    table = CliRunner().invoke(cli, args, env=env)
    assert table.exit_code == 0 and "GPU-c4a646d7" in table.stdout
    gres = "slurmd: Gres Name=gpu Type=h100 Count=2 Index=0 ID=7696487 File=/dev/nvidia[0-1]\n"
    slurm = CliRunner().invoke(
        cli, ["node", "gpus", "--slurm-gres", "-", "--output", "json"], input=gres, env=env
    )
    assert json.loads(slurm.stdout)["names"] == {"0": "0", "1": "1"}
