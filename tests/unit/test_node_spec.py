"""Job inputs on the node: ids, CPU lists, core choice (pure)."""

from __future__ import annotations

import pytest
from coshare.errors import JobSpecError
from coshare.node.spec import (
    JobSpec,
    check_cpus,
    check_job_id,
    choose_cpus,
    cores_needed,
    format_cpu_list,
    group_name,
    job_of_group,
    parse_cpu_list,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("job", ["12.0", "1234", "1234_5", "1234+0", "a-b.c"])
def test_scheduler_job_ids_are_accepted_and_round_trip(job: str) -> None:
    assert job_of_group(group_name(job)) == job


@pytest.mark.parametrize("job", ["", ".", "..", "../x", "a/b", "-1", "x" * 200, "12 0", "é"])
def test_unsafe_job_ids_are_refused(job: str) -> None:
    with pytest.raises(JobSpecError, match="not usable"):
        check_job_id(job)


def test_group_names_that_are_not_jobs_are_ignored() -> None:
    assert job_of_group("cgroup.procs") is None
    assert job_of_group("job-") is None


@settings(max_examples=300)
@given(st.sets(st.integers(0, 300)))
def test_cpu_lists_round_trip(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == tuple(sorted(cpus))


def test_cpu_list_format_collapses_ranges() -> None:
    assert format_cpu_list([8, 0, 1, 2, 3]) == "0-3,8"
    assert parse_cpu_list("0-3,8\n") == (0, 1, 2, 3, 8)
    assert parse_cpu_list("") == ()


@pytest.mark.parametrize("text", ["a", "3-1", "1-", "-1", "1,,2", "0-99999999"])
def test_bad_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(JobSpecError, match="cpu list"):
        parse_cpu_list(text)


@settings(max_examples=300)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=6),
    st.integers(1, 16),
)
def test_chosen_cpus_never_overlap(requests: list[int], ncpus: int) -> None:
    taken: dict[str, tuple[int, ...]] = {}
    for i, count in enumerate(requests):
        try:
            taken[str(i)] = choose_cpus(range(ncpus), taken, count)
        except JobSpecError:
            assert sum(len(c) for c in taken.values()) + count > ncpus
            continue
        assert len(taken[str(i)]) == count
    all_cpus = [c for cpus in taken.values() for c in cpus]
    assert len(all_cpus) == len(set(all_cpus))


@settings(max_examples=300)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=8),
    st.integers(1, 8),
    st.integers(1, 3),
)
def test_overcommitted_cpus_are_held_by_at_most_that_many_jobs_least_held_first(
    requests: list[int], ncpus: int, per_cpu: int
) -> None:
    taken: dict[str, tuple[int, ...]] = {}
    for i, count in enumerate(requests):
        held = sum(len(c) for c in taken.values())
        try:
            chosen = choose_cpus(range(ncpus), taken, count, per_cpu)
        except JobSpecError:
            assert held + count > ncpus * per_cpu or count > ncpus
            continue
        assert len(set(chosen)) == count
        if held + count <= ncpus:  # while enough are free, a job's CPUs are its own
            assert not set(chosen) & {c for cpus in taken.values() for c in cpus}
        taken[str(i)] = chosen
    loads = [sum(c in cpus for cpus in taken.values()) for c in range(ncpus)]
    assert max(loads) <= per_cpu


def test_not_enough_cores_names_who_holds_them() -> None:
    with pytest.raises(JobSpecError, match=r"only 1 of cpus 0-1 are free \(held by 7.0: 0\)"):
        choose_cpus([0, 1], {"7.0": (0,)}, 2)


def test_explicit_cpus_must_be_free_and_inside() -> None:
    assert check_cpus([1], [0, 1], {"a": (0,)}) == (1,)
    with pytest.raises(JobSpecError, match="held by job a"):
        check_cpus([0], [0, 1], {"a": (0,)})
    with pytest.raises(JobSpecError, match="outside"):
        check_cpus([5], [0, 1], {})


def test_fractional_cores_round_up() -> None:
    assert cores_needed(0.5) == 1
    assert cores_needed(2.0) == 2
    assert cores_needed(2.001) == 3
    with pytest.raises(JobSpecError):
        cores_needed(0)


def test_spec_round_trips_and_checks_limits() -> None:
    spec = JobSpec("3.0", (0, 1), 512, ("0",), 1024, 60)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(JobSpecError, match="memory_mib 0"):
        JobSpec("3.0", memory_mib=0)
    with pytest.raises(JobSpecError, match="twice"):
        JobSpec("3.0", devices=("0", "0"))
    with pytest.raises(JobSpecError, match="malformed"):
        JobSpec.from_dict({"job": "3.0", "cpus": "0"})


@pytest.mark.parametrize("cores", [1e300, 2.0**21, float("inf"), float("nan"), -1.0])
def test_cores_beyond_the_bound_are_refused(cores: float) -> None:
    # 1e300 was accepted: a core count of 301 digits reached choose_cpus.
    with pytest.raises(JobSpecError, match=r"not usable \(allowed: a number > 0 and <= 1048576\)"):
        cores_needed(cores)
    assert cores_needed(2.0**20) == 2**20


@pytest.mark.parametrize(
    ("field", "value"),
    [("memory_mib", 2**31), ("device_memory_mib", 2**21), ("device_threads", 2**25)],
)
def test_spec_sizes_beyond_the_bounds_are_refused(field: str, value: int) -> None:
    with pytest.raises(JobSpecError, match=rf"{field} {value} is not usable \(allowed: 1\.\."):
        JobSpec("7.0", **{field: value})  # type: ignore[arg-type]


def test_messages_echo_input_bounded() -> None:
    for check in (
        lambda: check_job_id("x" * 100_000),
        lambda: parse_cpu_list("a" * 100_000),
        lambda: JobSpec.from_dict({"job": 1, "pad": "p" * 100_000}),
        lambda: JobSpec("7.0", memory_mib=10**5000),
    ):
        with pytest.raises(JobSpecError) as caught:
            check()
        assert len(str(caught.value)) < 400


@pytest.mark.parametrize("text", ["\u0661", "0-\u0662", "\u00b2", "0-1048576", "9" * 30])
def test_cpu_lists_are_ascii_digits_within_the_bound(text: str) -> None:
    # "١" passed isdigit() and was read as cpu 1; "²" passed isdigit() and int() raised.
    with pytest.raises(JobSpecError, match="cpu list"):
        parse_cpu_list(text)
