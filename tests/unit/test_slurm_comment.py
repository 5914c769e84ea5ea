"""Annotations in a Slurm job's comment: the grammar of slurm_addon.comment."""

from __future__ import annotations

import pytest
from coshare.errors import AnnotationError
from coshare.ledger.annotations import parse_job

from slurm_addon.comment import is_annotated, read_annotations


def test_marker_form_reads_every_key_after_it() -> None:
    found = read_annotations("7", "my run; coshare: device-memory=2G device-threads=120")
    assert found == {"device-memory": "2G", "device-threads": "120"}
    job = parse_job("7", found)
    assert (job.device_memory_mib, job.device_threads) == (2048, 120)


def test_prefixed_keys_need_no_marker_and_free_text_is_ignored() -> None:
    found = read_annotations("7", "run 4 note=x coshare_device_memory=512,CoshareDeviceThreads=60")
    assert found == {"coshare_device_memory": "512", "CoshareDeviceThreads": "60"}


def test_marker_glued_to_first_key() -> None:
    assert read_annotations("7", "coshare:device-memory=1G;device-threads=8") == {
        "device-memory": "1G",
        "device-threads": "8",
    }


def test_word_without_value_after_marker_names_job_and_token() -> None:
    with pytest.raises(AnnotationError) as info:
        read_annotations("12", "coshare: device-memory device-threads=60")
    message = str(info.value)
    assert "job 12" in message and "device-memory" in message and "has no value" in message
    assert "key=value" in message


def test_duplicate_key_in_other_spelling_is_refused() -> None:
    with pytest.raises(AnnotationError, match="given twice"):
        read_annotations("3", "coshare: device-memory=1G DeviceMemory=2G device-threads=1")


def test_mention_without_keys_is_refused_with_an_example() -> None:
    with pytest.raises(AnnotationError) as info:
        read_annotations("4", "see the coshare docs")
    assert "declares no key=value" in str(info.value)
    assert "coshare: device-memory=2G device-threads=120" in str(info.value)


@pytest.mark.parametrize(
    ("comment", "annotated"),
    [("coshare: device-memory=1", True), ("CoShare", True), ("", False), ("gpu job", False)],
)
def test_is_annotated_is_the_job_submit_plugins_rule(comment: str, annotated: bool) -> None:
    assert is_annotated(comment) is annotated


def test_a_comment_with_thousands_of_keys_is_refused_not_read_on() -> None:
    # 4,000 keys took 24 s (every key compared with every other) and were all kept; a
    # megabyte of comment could stall the whole cycle.
    comment = "coshare: " + " ".join(f"k{i}=1" for i in range(4000))
    with pytest.raises(
        AnnotationError,
        match="declares too many keys"
        r" \(allowed: at most 32 key=value annotations\)",
    ):
        read_annotations("7", comment)


def test_problems_of_one_comment_are_bounded() -> None:
    with pytest.raises(AnnotationError) as caught:
        read_annotations("7", "coshare: " + " ".join(["novalue"] * 100_000))
    assert len(caught.value.problems) == 8 and len(str(caught.value)) < 2000
