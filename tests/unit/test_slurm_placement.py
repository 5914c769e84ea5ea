"""The placement text coshare writes into AdminComment, and refusals."""

from __future__ import annotations

import pytest

from slurm_addon.placement import (
    MAX_REFUSAL_CHARS,
    Placement,
    PlacementError,
    format_placement,
    format_refusal,
    is_refusal,
    parse_placement,
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
