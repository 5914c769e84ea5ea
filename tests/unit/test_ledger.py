"""The ledger's rules (coshare.ledger.book), on their own; tests/contract/test_ledger_contract.py
runs the same situations through both adapters."""

from __future__ import annotations

import pytest
from coshare.config import Config, load_config
from coshare.errors import AnnotationError, ConfigError
from coshare.ledger import book as ledger
from coshare.ledger.book import (
    Queued,
    field_value,
    find_kind,
    gates_may_open,
    kind_index,
    kind_key,
    per_process,
    refuse_on_error,
    settle,
)
from coshare.model import Device, DeviceKind, Node
from coshare.ports import Rejected

NODE = Node("n1", 8000, 16384, (Device("0", 8192, 240),))


def test_device_kind_names_compare_ignoring_case_spaces_dashes_and_underscores() -> None:
    assert kind_key("V100 M16") == kind_key("v100-m16") == kind_key("V100_M16") == "v100m16"
    index = kind_index({"v100-m16": DeviceKind(16384, 163840)})
    assert find_kind(index, "V100M16") == ("v100-m16", DeviceKind(16384, 163840))
    assert find_kind(index, "a100") is None and find_kind(index, "") is None


def test_two_kinds_with_one_name_are_a_config_error_naming_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="'V100' and 'v-100' name the same kind"):
        Config(device_kinds={"V100": DeviceKind(1, 1), "v-100": DeviceKind(1, 1)})
    path = tmp_path / "c.yaml"
    path.write_text(
        "device_kinds: {Phi: {memory_mib: 1, threads: 1}, phi: {memory_mib: 2, threads: 2}}\n"
    )
    with pytest.raises(ConfigError, match=r"c\.yaml: device_kinds: 'Phi' and 'phi'"):
        load_config(path, environ={})


def test_per_process_shares_round_up() -> None:
    assert (per_process(6000, 4), per_process(1000, 3), per_process(7, 1)) == (1500, 334, 7)


def test_any_error_reading_one_job_refuses_it_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Whatever a parser raises for one key (here a bug stand-in), the job is refused with
    # that key named, its value bounded, and the others are planned.
    real = ledger.parse_job

    def fragile(job_id, annotations, **kw):  # type: ignore[no-untyped-def]
        if "CoshareProgram" in annotations:
            raise ZeroDivisionError("boom")
        return real(job_id, annotations, **kw)

    monkeypatch.setattr(ledger, "parse_job", fragile)
    bad = Queued(
        "1.0", {"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 60, "CoshareProgram": "x" * 500}
    )
    good = Queued("2.0", {"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 60})
    book = settle([bad, good], [NODE], now_s=0, replan_after_s=300)
    assert [j.id for j in book.pending] == ["2.0"]
    [refused] = book.rejected
    assert refused.reason.startswith("job 1.0: CoshareProgram='xxxx")
    assert len(refused.reason) < 300  # the value is shown bounded
    assert "cannot be read (ZeroDivisionError: boom)" in refused.reason
    assert "(allowed: a name of letters" in refused.reason


def test_an_error_no_single_key_explains_still_names_the_job() -> None:
    def broken() -> None:
        raise KeyError("x")

    assert refuse_on_error("7", broken) == Rejected("7", "job 7: cannot be read (KeyError: 'x')")


def test_field_value_names_the_job_and_field() -> None:
    with pytest.raises(AnnotationError, match=r"job 3\.0: RequestCpus='inf' cannot be read"):
        field_value("3.0", "RequestCpus", float("inf"), int, "a number of cores")


def test_a_placed_job_counts_the_larger_of_its_placed_and_declared_demand() -> None:
    queued = Queued(
        "1",
        {"device-memory": "2048", "device-threads": "60"},
        placed=ledger.Placed("n1", ("0",), 0.0, 1024, 120),
        gate_open=True,
    )
    [held] = settle([queued], [NODE], now_s=10, replan_after_s=300).planned
    assert (held.device_memory_mib, held.device_threads, held.state) == (2048, 120, "planned")


def test_nothing_more_opens_after_a_withdrawn_job_started() -> None:
    assert gates_may_open((), ()) is None
    assert "10.0 started at an expired placement" in str(gates_may_open({"10.0"}, ()))
    assert "placement of 2, 10 could not be withdrawn" in str(gates_may_open((), {"10", "2"}))
