"""Harvest decisions on the node (pure): which cores a GPU job lends to a CPU-only job, which
it gets back, and what a job's end gives back (Wu & Hong section III-B1: partitioned, never
shared cores)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from coshare.errors import JobSpecError, NodeError
from coshare.node.control.protocol import ControlProtocolError, parse_control
from coshare.node.harvest import Holding, after_end, copy_bandwidths, give_back, lend
from coshare.node.jobs import JobRecord
from coshare.node.spec import JobSpec
from hypothesis import given
from hypothesis import strategies as st

GPU = Holding("gpu", tuple(range(12)))  # a GPU job of ppn 12, as in the paper
CPU = Holding("cpu", (12, 13))  # a CPU job with two cores of its own
BARE = Holding("bare")  # a CPU job placed wholly on harvested cores (not pinned)


def test_lend_takes_the_cores_out_of_the_gpu_job_and_gives_them_to_the_cpu_job() -> None:
    change = lend(GPU, CPU, (3, 4, 5))
    assert change.changed and not change.requeue
    assert change.lender.cpus == (0, 1, 2, 6, 7, 8, 9, 10, 11)
    assert change.borrower.cpus == (3, 4, 5, 12, 13)
    assert not set(change.lender.cpus) & set(change.borrower.cpus)
    assert change.lender.lent_to == {"cpu": (3, 4, 5)}
    assert change.borrower.borrowed_from == {"gpu": (3, 4, 5)}
    assert change.lender.own() == GPU.cpus and change.borrower.own() == CPU.cpus


def test_lend_is_idempotent_and_extends_a_loan() -> None:
    first = lend(GPU, BARE, (9, 10))
    again = lend(first.lender, first.borrower, (9, 10))
    assert not again.changed and again.lender == first.lender and again.borrower == first.borrower
    more = lend(first.lender, first.borrower, (9, 10, 11))
    assert more.changed and more.borrower.cpus == (9, 10, 11)
    assert more.lender.lent_to == {"bare": (9, 10, 11)} and more.lender.cpus == tuple(range(9))


def test_a_repeated_lend_repairs_a_borrower_record_a_crash_left_behind() -> None:
    first = lend(GPU, CPU, (1,))
    again = lend(first.lender, CPU, (1,))  # the borrower's record was not written
    assert again.changed and again.borrower == first.borrower


def test_a_repeated_give_back_finishes_one_a_crash_cut_short() -> None:
    lent = lend(GPU, CPU, (1, 2))
    done = give_back(lent.lender, lent.borrower)
    # The shrinking job's record (the borrower's) is written first; the lender's was not.
    again = give_back(lent.lender, done.borrower)
    assert again.changed and again.lender == done.lender and again.borrower == done.borrower


@pytest.mark.parametrize(
    ("cpus", "message"),
    [
        ((12,), r"job gpu does not hold cpus 12 \(it holds 0-11\)"),
        (tuple(range(12)), "would leave it no core"),
        ((), "lend at least one core"),
    ],
)
def test_lend_refuses_cores_the_gpu_job_does_not_hold_or_all_of_them(
    cpus: tuple[int, ...], message: str
) -> None:
    with pytest.raises(JobSpecError, match=message):
        lend(GPU, CPU, cpus)


def test_a_core_lent_to_one_job_is_never_lent_to_another() -> None:
    first = lend(GPU, CPU, (4, 5))
    with pytest.raises(JobSpecError, match=r"cpus 5 are lent already \(5 to cpu\)"):
        lend(first.lender, BARE, (5, 6), others=[first.borrower])


def test_loans_are_never_passed_on_nor_made_to_oneself() -> None:
    first = lend(GPU, BARE, (4,))
    with pytest.raises(JobSpecError, match="a loan is never passed on"):
        lend(first.borrower, CPU, (4,))
    with pytest.raises(JobSpecError, match="a job that lends does not borrow"):
        lend(CPU, first.lender, (12,))
    with pytest.raises(JobSpecError, match="cannot lend cores to itself"):
        lend(GPU, GPU, (1,))
    with pytest.raises(JobSpecError, match="not pinned"):
        lend(BARE, CPU, (1,))


def test_give_back_shrinks_the_cpu_job_to_its_own_cores() -> None:
    lent = lend(GPU, CPU, (6, 7, 8))
    back = give_back(lent.lender, lent.borrower)
    assert back.changed and not back.requeue
    assert back.lender == Holding("gpu", GPU.cpus, {}, {})
    assert back.borrower == Holding("cpu", CPU.cpus, {}, {})
    again = give_back(back.lender, back.borrower)
    assert not again.changed and not again.requeue


def test_give_back_of_some_cores_keeps_the_rest_lent() -> None:
    lent = lend(GPU, BARE, (6, 7, 8))
    back = give_back(lent.lender, lent.borrower, (8,))
    assert back.changed and back.borrower.cpus == (6, 7)
    assert back.lender.lent_to == {"bare": (6, 7)} and 8 in back.lender.cpus
    assert give_back(back.lender, back.borrower, (8,)).changed is False  # done already


def test_give_back_that_would_leave_the_cpu_job_no_core_is_reported_for_requeue() -> None:
    lent = lend(GPU, BARE, (10, 11))
    back = give_back(lent.lender, lent.borrower)
    assert back.requeue and not back.changed
    assert back.lender == lent.lender and back.borrower == lent.borrower  # never starved


def test_give_back_refuses_cores_never_held_or_lent_to_another_job() -> None:
    first = lend(GPU, CPU, (1,))
    second = lend(first.lender, BARE, (2,), others=[first.borrower])
    with pytest.raises(JobSpecError, match="never held cpus 12"):
        give_back(second.lender, first.borrower, (1, 12))
    with pytest.raises(JobSpecError, match="cpus 2 are lent to bare, not to cpu"):
        give_back(second.lender, first.borrower, (2,))


def test_the_end_of_a_borrower_gives_the_lender_its_cores_back() -> None:
    lent = lend(GPU, BARE, (10, 11))
    (lender,) = after_end(lent.borrower, [lent.lender, CPU])
    assert lender == Holding("gpu", GPU.cpus, {}, {})


def test_the_end_of_a_lender_leaves_the_borrower_its_cores() -> None:
    lent = lend(GPU, BARE, (10, 11))
    (borrower,) = after_end(lent.lender, [lent.borrower, CPU])
    assert borrower == Holding("bare", (10, 11), {}, {})


@given(st.lists(st.tuples(st.booleans(), st.sets(st.integers(0, 13), max_size=4)), max_size=12))
def test_lends_and_give_backs_never_put_a_core_in_two_cpusets(
    steps: list[tuple[bool, set[int]]],
) -> None:
    lender, borrower = GPU, CPU
    for is_lend, cpus in steps:
        try:
            change = lend(lender, borrower, cpus) if is_lend else give_back(lender, borrower, cpus)
        except JobSpecError:
            continue
        lender, borrower = change.lender, change.borrower
        assert not set(lender.cpus) & set(borrower.cpus)
        assert lender.cpus and borrower.cpus
        assert lender.own() == GPU.cpus and borrower.own() == CPU.cpus
        assert set(lender.cpus) | set(borrower.cpus) == set(GPU.cpus) | set(CPU.cpus)


def test_loans_survive_in_the_job_record() -> None:
    change = lend(GPU, BARE, (10, 11))
    record = JobRecord(JobSpec("gpu"), "v1", "/sys/fs/cgroup", "coshare").with_holding(
        change.lender
    )
    back = JobRecord.from_dict(record.to_dict())
    assert back.holding() == change.lender and back.spec.cpus == tuple(range(10))
    old = record.to_dict()
    del old["lent_to"], old["borrowed_from"]  # a record written before LEND existed
    assert JobRecord.from_dict(old).lent_to == {}
    bad = record.to_dict() | {"lent_to": {"../x": [1]}}
    with pytest.raises(JobSpecError, match="job id"):
        JobRecord.from_dict(bad)
    with pytest.raises(JobSpecError, match="malformed"):
        JobRecord.from_dict(record.to_dict() | {"borrowed_from": {"gpu": [-1]}})


def test_lend_and_reclaim_requests_parse_and_bad_ones_are_refused() -> None:
    request = parse_control(b"LEND job=7 to=8 cpus=3-5\n")
    assert (request.verb, request.job, request.other, request.cpus) == ("LEND", "7", "8", (3, 4, 5))
    reclaim = parse_control(b"RECLAIM job=7 from=8")
    assert (reclaim.other, reclaim.cpus) == ("8", None)
    for line, message in [
        (b"LEND job=7 cpus=1", "LEND needs to=<job id>"),
        (b"LEND job=7 to=8", "LEND needs cpus=<list>"),
        (b"LEND job=7 to=8 cpus=", "names no cpu"),
        (b"LEND job=7 to=8 cpus=a", "cpu list 'a' is not usable"),
        (b"RECLAIM job=7 from=../x", "job id"),
        (b"RECLAIM job=7 to=8", "RECLAIM takes no field 'to'"),
    ]:
        with pytest.raises(ControlProtocolError, match=message):
            parse_control(line)


def test_a_lend_naming_a_million_cpus_is_refused_before_it_is_expanded() -> None:
    # 16 ranges of 65,536 cpus: 2^20 cpus from any peer of the socket, parsed before its
    # permissions are known; refused while the ranges are counted, before any is expanded.
    ranges = ",".join(f"{k * 65536}-{k * 65536 + 65535}" for k in range(16))
    with pytest.raises(ControlProtocolError) as info:
        parse_control(f"LEND job=7 to=8 cpus={ranges}\n".encode())
    assert "names more than 8192 cpus (allowed: at most as many as a Linux kernel has)" in str(
        info.value
    )


def test_copy_bandwidth_is_the_pcie_throughput_of_gpus_a_job_holds_alone() -> None:
    per_gpu = {"0": 250.0, "1": 120.5, "2": 40.0}
    found = copy_bandwidths({"a": ["0", "1"], "b": ["2"], "c": ["2"], "d": [], "e": ["7"]}, per_gpu)
    # b and c share GPU 2 (a per-GPU counter cannot be split: no figure is guessed); d holds
    # no GPU; NVML did not measure e's GPU.
    assert found == {"a": 370.5}


def test_the_nvml_backend_reads_tx_plus_rx_in_mb_per_s(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location(
        "pynvml", Path(__file__).parents[1] / "node" / "fake_nvml" / "pynvml.py"
    )
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    from coshare.node.nvml import NvmlMemory

    monkeypatch.setenv("FAKE_NVML_PCIE_KBPS", "300000,12500")
    assert NvmlMemory().pcie_mbps() == {"0": 312.5}
    monkeypatch.delenv("FAKE_NVML_PCIE_KBPS")
    with pytest.raises(
        NodeError,
        match=r"NVML cannot read the PCIe throughput of GPU 0 .*"
        r"Not Supported",
    ):
        NvmlMemory().pcie_mbps()
