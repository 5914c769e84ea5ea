"""GPU discovery from NVML (coshare.node.gpus), against a faithful fake of the NVML calls:
whole GPUs, MIG instances as devices of their own size, and what is not planned."""

from __future__ import annotations

import importlib
import json

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.node.gpus import discover

from tests.unit.fake_nvml_mig import FakeNvml, Gpu, Instance, a100_80gb, h100_80gb

#: A100-80GB MIG profiles as NVIDIA's MIG user guide lists them (SMs and memory per NVML).
G1_10 = Instance(1, 9856, 14)
G3_40 = Instance(3, 40192, 42)
G2_20 = Instance(2, 19968, 28)


def test_whole_gpus_are_listed_with_index_uuid_memory_and_sms() -> None:
    found = discover(FakeNvml([h100_80gb(), Gpu("Tesla V100", 16160, 80, mig_capable=False)]))
    assert [(d.id, d.kind, d.memory_mib, d.sms, d.status) for d in found] == [
        ("0", "gpu", 81559, 132, "ok"),
        ("1", "gpu", 16160, 80, "ok"),  # no MIG on Volta: NVML says Not Supported
    ]
    assert found[0].uuid.startswith("GPU-") and found[0].planned


def test_mig_instances_are_devices_of_their_own_size_and_the_parent_is_never_one() -> None:
    # slot 2 is empty (no instance created there): NVML answers Not Found
    found = discover(FakeNvml([a100_80gb([G3_40, G2_20, None, G1_10, None, None, None])]))
    parent, *instances = found
    assert (parent.id, parent.kind, parent.planned) == ("0", "mig-parent", False)
    assert [(d.id, d.profile, d.memory_mib, d.sms, d.parent) for d in instances] == [
        ("0:0", "3g.40gb", 40192, 42, "0"),
        ("0:1", "2g.20gb", 19968, 28, "0"),
        ("0:3", "1g.10gb", 9856, 14, "0"),
    ]
    assert all(d.uuid.startswith("MIG-") and d.planned for d in instances)


def test_a_profile_or_sm_count_coshare_does_not_know_is_unsupported_and_the_rest_listed() -> None:
    odd = Instance(5, 30000, 70)  # no MIG profile has 5 slices
    found = discover(FakeNvml([a100_80gb([odd, G1_10]), Gpu("Future GPU", 98304, 5000)]))
    by_id = {d.id: d for d in found}
    assert by_id["0:0"].status == "unsupported" and not by_id["0:0"].planned
    assert by_id["0:0"].reason.startswith(
        "MIG profile 5g.30gb: 5 GPU-instance slices is no MIG profile coshare knows"
    )
    assert by_id["0:1"].planned
    assert by_id["1"].status == "unsupported"
    assert by_id["1"].reason == "SM count 5000 (allowed: 1..1024)"


def test_a_gpu_nvml_cannot_describe_is_unsupported_with_nvml_s_reason() -> None:
    found = discover(FakeNvml([Gpu("x", 1, 1, fail_name=True), h100_80gb()]))
    assert (found[0].status, found[0].reason) == (
        "unsupported",
        "NVML cannot describe it: Not Supported",
    )
    assert found[1].planned


def test_node_gpus_lists_them_for_people_and_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([a100_80gb([G3_40, None, None, None, None, None, None]), h100_80gb()])
    monkeypatch.setattr("coshare.node.nvml.start_nvml", lambda: fake)
    env = {"COSHARE_CONFIG": "/dev/null"}
    shown = CliRunner().invoke(cli, ["node", "gpus", "--output", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    listed = json.loads(shown.stdout)["gpus"]
    assert [(g["id"], g["kind"], g["profile"]) for g in listed] == [
        ("0", "mig-parent", None),
        ("0:0", "mig", "3g.40gb"),
        ("1", "gpu", None),
    ]
    table = CliRunner().invoke(cli, ["node", "gpus"], env=env)
    assert table.exit_code == 0 and "2 of 3 planned as devices" in table.stdout


def test_node_gpus_without_nvml_says_unsupported_and_where_it_looked() -> None:
    try:
        importlib.import_module("pynvml").nvmlInit()
    except Exception:  # no driver here: what an admin sees on a node without GPUs
        ran = CliRunner().invoke(cli, ["node", "gpus"], env={"COSHARE_CONFIG": "/dev/null"})
        assert ran.exit_code == 1
        assert "unsupported: NVML cannot start (libnvidia-ml.so.1" in ran.stderr
        return
    pytest.skip("NVML starts on this machine: the no-GPU path is not shown here")


def test_plans_never_place_on_a_mig_parent_nor_oversubscribe_an_instance() -> None:
    from coshare.cycle.run import checked_plan
    from coshare.cycle.verify import check_plan
    from coshare.model import Assignment, Device, Job, Node, Plan, Snapshot
    from coshare.policies import make_policy

    # A scheduler's discovery that lists the A100 and its two instances (3g.40gb, 2g.20gb).
    node = Node(
        "g1",
        32_000,
        262_144,
        (Device("0", 81920, 108), Device("0:0", 40192, 42), Device("0:1", 19968, 28)),
    )
    jobs = tuple(Job(f"{k}", 30_000, 10, submit_time_s=float(k)) for k in range(3))
    snap = Snapshot((node,), (), jobs, now_s=10.0)
    for name in ("knapsack", "sharepack", "exclusive", "random", "bestfit", "fgd"):
        plan = checked_plan(make_policy(name), snap).plan
        assert [a.devices for a in plan.assignments] == [("0:0",)], (name, plan)
        assert any("GPU 0 is in MIG mode" in n for n in plan.notes), name
        assert check_plan(snap, plan) == []
    on_parent = Plan("x", (Assignment("0", "g1", ("0",)),), ())
    assert "job 0 is placed on g1/0, a GPU in MIG mode (its instances are the devices)" in (
        check_plan(Snapshot((node,), (), jobs[:1], now_s=10.0), on_parent)
    )
