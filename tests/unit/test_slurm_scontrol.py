"""Pure builders of scontrol commands, and readers of scontrol's recorded error output."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_addon.scontrol import (
    UnsafeValue,
    chunks,
    controller_down,
    errors_by_job,
    job_list,
    update_argv,
    update_line,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm/22.05"


def test_update_line_is_one_command_of_validated_tokens() -> None:
    line = update_line("42", "csl-n1", "coshare-placement;v=1;node=csl-n1;devices=0")
    assert line == (
        "update JobId=42 ReqNodeList=csl-n1 AdminComment=coshare-placement;v=1;node=csl-n1;"
        "devices=0\n"
    )


@pytest.mark.parametrize(
    ("job", "node", "text"),
    [
        ("4 2", "n1", "x"),
        ("42", "n1\nupdate JobId=1", "x"),
        ("42", "n1", "a b"),
        ("42", "n1", 'say "hi"'),
        ("42", "n1", "x\nshutdown"),
        ("1,2", "n1", "x"),
    ],
)
def test_anything_that_could_escape_a_line_is_refused(job: str, node: str, text: str) -> None:
    with pytest.raises(UnsafeValue):
        update_line(job, node, text)


def test_refusals_go_as_argument_lists_with_any_text() -> None:
    assert update_argv("5", 'x "y"\nz') == ["update", "JobId=5", 'AdminComment=x "y"\nz']
    with pytest.raises(UnsafeValue):
        update_argv("5;6", "x")


def test_job_lists_and_chunks() -> None:
    assert job_list(["1", "22", "333"]) == "1,22,333"
    with pytest.raises(UnsafeValue):
        job_list(["1", "2_3"])
    assert list(chunks(["a", "b", "c"], 2)) == [["a", "b"], ["c"]]


def test_errors_by_job_on_recorded_batch_output() -> None:
    errors = errors_by_job((FIXTURES / "scontrol-batch-errors.txt").read_text())
    assert set(errors) == {"99999", "3"}
    assert "Invalid node name" in errors["3"]


def test_errors_by_job_on_recorded_release_output() -> None:
    errors = errors_by_job((FIXTURES / "scontrol-release-errors.txt").read_text())
    assert errors == {
        "1": "Job has already finished for job 1",
        "99998": "Invalid job id specified for job 99998",
    }


def test_controller_down_phrases() -> None:
    assert controller_down("Unexpected message received for job 210")
    assert controller_down("slurm_load_jobs error: Unable to contact slurm controller")
    assert not controller_down((FIXTURES / "scontrol-release-errors.txt").read_text())


@pytest.mark.parametrize(
    ("job", "node", "text"),
    [("42\n", "n1", "x"), ("42", "n1\n", "x"), ("42", "n1", "x\n"), ("42", "n1", "x\r")],
)
def test_a_value_ending_in_a_newline_never_splits_a_line(job: str, node: str, text: str) -> None:
    # "$" matches before a trailing newline; the checks are whole-string matches.
    with pytest.raises(UnsafeValue):
        update_line(job, node, text)


def test_job_ids_ending_in_a_newline_are_refused_everywhere() -> None:
    with pytest.raises(UnsafeValue):
        update_argv("5\n", "x")
    with pytest.raises(UnsafeValue):
        job_list(["1", "2\n"])
