"""The placement text coshare writes into AdminComment, and refusals."""

from __future__ import annotations

import pytest

from slurm_addon.allocation import (
    Allocation,
    parse_allocation_line,
    parse_stderr_path,
    parse_tres,
)
from slurm_addon.placement import (
    MAX_REFUSAL_CHARS,
    Placement,
    PlacementError,
    format_placement,
    format_refusal,
    is_refusal,
    is_safe_token,
    kill_reason,
    parse_placement,
    with_kill_reason,
)

P = Placement("csl-n1", ("0", "1"), 1700000000, 2048, 120)


def test_round_trip() -> None:
    text = format_placement(P)
    assert text == (
        "coshare-placement;v=1;node=csl-n1;devices=0,1;at=1700000000;mem_mib=2048;threads=120"
    )
    assert parse_placement(text) == P
    assert " " not in text and '"' not in text


def test_cpu_job_has_no_devices() -> None:
    cpu = Placement("n2", (), 5, 0, 0)
    assert parse_placement(format_placement(cpu)) == cpu


def test_other_admin_comments_are_not_placements() -> None:
    assert parse_placement("") is None
    assert parse_placement("set by the admin") is None
    assert parse_placement(format_refusal("bad")) is None


@pytest.mark.parametrize(
    "text",
    [
        "coshare-placement;v=2;node=n;devices=0;at=1;mem_mib=1;threads=1",
        "coshare-placement;v=1;node=n;devices=0;at=x;mem_mib=1;threads=1",
        "coshare-placement;v=1;devices=0;at=1;mem_mib=1;threads=1",
        "coshare-placement;v=1;node=a b;devices=0;at=1;mem_mib=1;threads=1",
        "coshare-placement;v=1;oops",
    ],
)
def test_damaged_placements_raise(text: str) -> None:
    with pytest.raises(PlacementError):
        parse_placement(text)


@pytest.mark.parametrize("node", ["n 1", "n;1", "", "n\n1", 'n"1'])
def test_unsafe_names_are_never_written(node: str) -> None:
    with pytest.raises(PlacementError):
        format_placement(Placement(node, ("0",), 1, 1, 1))


def test_same_spot_ignores_time() -> None:
    assert P.same_spot(Placement("csl-n1", ("0", "1"), 1, 2048, 120))
    assert not P.same_spot(Placement("csl-n1", ("0",), 1, 2048, 120))
    assert not P.same_spot(Placement("csl-n1", ("0", "1"), 1, 2049, 120))


def test_refusal_is_one_bounded_line() -> None:
    text = format_refusal("job 3: key='a\nb'  is bad " + "x" * 2000)
    assert is_refusal(text) and "\n" not in text and len(text) == MAX_REFUSAL_CHARS


def test_a_kill_reason_rides_on_the_placement_and_readers_ignore_it() -> None:
    placed = format_placement(Placement("csl-n1", ("0",), 5, 2048, 60))
    killed = with_kill_reason(placed, "coshare killed job 12: over; 100 MiB\n(x)")
    assert killed == placed + ";killed=coshare killed job 12: over, 100 MiB (x)"
    assert parse_placement(killed) == parse_placement(placed)
    assert kill_reason(killed) == "coshare killed job 12: over, 100 MiB (x)"
    assert with_kill_reason(killed, "again") == placed + ";killed=again"  # one reason
    assert kill_reason(placed) is None and kill_reason("") is None
    assert with_kill_reason("", "why") == "coshare-killed: why"  # no placement left to keep
    assert kill_reason("coshare-killed: why") == "why"
    assert len(with_kill_reason(placed, "x" * 2000)) < len(placed) + 420


def test_allocations_and_error_files_are_read_from_slurms_output() -> None:
    assert parse_tres("cpu=2,mem=100M,node=1,billing=2") == Allocation(2, 100)
    assert parse_tres("cpu=1,mem=1.5G,node=1") == Allocation(1, 1536)
    assert parse_tres("cpu=4,mem=512K") == Allocation(4, 1)
    assert parse_tres("node=1,billing=1") == Allocation(None, None)
    assert parse_tres("cpu=x,mem=lots") == Allocation(None, None)
    line = "cpu=2,mem=100M,node=1,billing=2|coshare-placement;v=1;node=n1\n"
    assert parse_allocation_line(line) == (Allocation(2, 100), "coshare-placement;v=1;node=n1")
    assert parse_allocation_line("cpu=1|(null)") == (Allocation(1, None), "")
    show = "JobId=3 JobName=j.sh\n   StdErr=/var/tmp/out dir/3.err\n   StdIn=/dev/null\n"
    assert parse_stderr_path(show) == "/var/tmp/out dir/3.err"
    assert parse_stderr_path("JobId=3\n   StdErr=relative\n") is None
    assert parse_stderr_path("JobId=3\n") is None


def test_a_token_ending_in_a_newline_is_not_safe() -> None:
    # "$" matches before a trailing newline; the check is a whole-string match.
    assert is_safe_token("csl-n1") and not is_safe_token("csl-n1\n")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("at", "\u0661\u0662"),
        ("at", " 12"),
        ("at", "1_000"),
        ("mem_mib", "9" * 20),
        ("mem_mib", "2097152"),
        ("threads", "-1"),
    ],
)
def test_placement_numbers_are_ascii_digits_within_the_bounds(field: str, value: str) -> None:
    # int() took "١٢", " 12" and "1_000"; no size was bounded.
    fields = {
        "node": "n1",
        "devices": "0",
        "at": "5",
        "mem_mib": "10",
        "threads": "2",
        field: value,
    }
    text = "coshare-placement;v=1;" + ";".join(f"{k}={v}" for k, v in fields.items())
    with pytest.raises(PlacementError, match=f"placement field {field}="):
        parse_placement(text)


def test_tres_cpus_are_ascii_digits() -> None:
    assert parse_tres("cpu=\u00b2,mem=100M").cpus is None  # int("²") raised after isdigit()


def test_a_harvest_placement_round_trips_and_only_a_single_node_cpu_job_carries_one() -> None:
    on_loan = Placement("n1", (), 7, 0, 0, harvest_from="12")
    text = format_placement(on_loan)
    assert text.endswith(";harvest=12")
    assert parse_placement(text) == on_loan
    assert not on_loan.same_spot(Placement("n1", (), 7, 0, 0, harvest_from="13"))
    with pytest.raises(PlacementError, match="single-node CPU-only"):
        format_placement(Placement("n1", ("0",), 7, 0, 0, harvest_from="12"))
    for bad in ("harvest=1 2", "harvest=", "devices=0;harvest=12"):
        base = "coshare-placement;v=1;node=n1;devices=;at=1;mem_mib=0;threads=0"
        text = (
            base.replace("devices=;", "") + ";" + bad
            if bad.startswith("devices")
            else f"{base};{bad}"
        )
        with pytest.raises(PlacementError):
            parse_placement(text)
