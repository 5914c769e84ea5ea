"""squeue/sinfo JSON parsers on outputs recorded from a real Slurm 22.05 cluster
(tests/fixtures/slurm/record). Job ids of the mixed recording: squeue-mixed.ids."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slurm_addon.errors import SlurmControllerDown, SlurmOutputError
from slurm_addon.jobs import (
    FIELDS,
    JOB_STATES,
    expand_nodes,
    fields_format,
    number,
    parse_job,
    parse_squeue_fields,
    parse_squeue_json,
)
from slurm_addon.nodes import parse_gres, parse_gres_indexes, parse_sinfo_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm/22.05"


def recorded_ids() -> dict[str, str]:
    text = (FIXTURES / "squeue-mixed.ids").read_text()
    return dict(pair.split("=") for pair in text.split())


@pytest.fixture(scope="module")
def jobs() -> dict[str, object]:
    by_id = {j.id: j for j in parse_squeue_json((FIXTURES / "squeue-mixed.json").read_text())}
    return {name: by_id[job_id] for name, job_id in recorded_ids().items()}


def test_every_recorded_job_is_read(jobs: dict[str, object]) -> None:
    assert len(jobs) == 11


def test_phases_and_holds(jobs: dict) -> None:
    assert jobs["done"].phase == "ended"
    assert jobs["good"].phase == "pending" and jobs["good"].held
    assert jobs["good"].reason == "JobHeldUser"  # what the job_submit plugin's hold looks like
    assert jobs["running"].phase == "active" and not jobs["running"].held
    assert jobs["running"].nodes == ("csl-n1",)


def test_comments_and_placements(jobs: dict) -> None:
    assert jobs["good"].comment == "coshare: device-memory=2G device-threads=120"
    assert jobs["placed"].admin_comment.startswith("coshare-placement;v=1;node=csl-n2")
    assert jobs["placed"].required_nodes == "csl-n2"
    assert jobs["plain"].comment == "" and jobs["plain"].admin_comment == ""


def test_host_resources(jobs: dict) -> None:
    assert (jobs["placed"].cpus, jobs["placed"].memory_mib) == (2, 1024)  # --mem=1G
    assert (jobs["good"].cpus, jobs["good"].memory_mib) == (1, 256)  # DefMemPerCPU
    assert jobs["plain"].memory_mib == 100
    assert jobs["multi"].node_count == 2


def test_gres_allocation_of_an_unannotated_job(jobs: dict) -> None:
    assert jobs["gpu"].gres_detail == ("gpu:fakephi:1(IDX:0)",)
    assert parse_gres_indexes(jobs["gpu"].gres_detail[0], "gpu") == ("0",)


def test_waiting_reasons(jobs: dict) -> None:
    assert jobs["array"].array
    assert jobs["dep"].dependency == f"afterok:{recorded_ids()['good']}(unfulfilled)"
    assert jobs["begin"].eligible_time_s > jobs["begin"].submit_time_s + 3000


def test_nodes_with_drain_and_down() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((FIXTURES / "sinfo-drain-down.json").read_text())}
    assert sorted(nodes) == ["csl-n1", "csl-n2", "csl-n3", "csl-n4"]
    assert nodes["csl-n1"].usable and nodes["csl-n2"].usable
    assert not nodes["csl-n3"].usable and nodes["csl-n3"].flags == ("DRAIN",)
    assert not nodes["csl-n4"].usable and nodes["csl-n4"].reason == "broken"
    assert nodes["csl-n1"].devices("gpu") == [("0", "fakephi"), ("1", "fakephi")]
    assert (nodes["csl-n1"].cpus, nodes["csl-n1"].memory_mib) == (8, 16384)


def test_controller_down_output_is_an_unavailable_controller() -> None:
    # 22.05 prints this with exit status 0 when slurmctld is stopped.
    with pytest.raises(SlurmControllerDown, match="slurm_load_jobs"):
        parse_squeue_json((FIXTURES / "squeue-controller-down.json").read_text())


def test_unreadable_output_is_an_output_error() -> None:
    with pytest.raises(SlurmOutputError, match="not JSON"):
        parse_squeue_json("squeue: error: something\n")
    with pytest.raises(SlurmOutputError, match="no 'nodes'"):
        parse_sinfo_json("{}")


@pytest.mark.parametrize(
    "output", ['{"jobs": [' * 100_000 + "]}" * 100_000, '{"jobs": [], "x": ' + "9" * 5000 + "}"]
)
def test_output_python_cannot_decode_is_an_output_error_not_a_traceback(output: str) -> None:
    # json.loads raised RecursionError and ValueError (int-string limit), which no caller
    # caught: one message of the boundary instead.
    with pytest.raises(SlurmOutputError, match="not readable"):
        parse_squeue_json(output)
    with pytest.raises(SlurmOutputError, match="not readable"):
        parse_sinfo_json(output.replace("jobs", "nodes"))


def test_one_bad_record_does_not_hide_the_others() -> None:
    data = json.loads((FIXTURES / "squeue-mixed.json").read_text())
    data["jobs"].append({"job_state": "PENDING"})  # no job id
    data["jobs"].append("garbage")
    # inf (JSON 1e999): read, with the field named (the view refuses it, or holds its node)
    data["jobs"].append({"job_id": 77, "job_state": "PENDING", "cpus": 1e999})
    notes: list[str] = []
    jobs = parse_squeue_json(json.dumps(data).replace("Infinity", "1e999"), notes)
    assert len(jobs) == 12 and len(notes) == 2
    assert jobs[-1].problem == "cpus=inf is not a finite number (allowed: a number 0..1048576)"


def test_unknown_state_is_kept_as_holding() -> None:
    notes: list[str] = []
    job = parse_job({"job_id": 9, "job_state": "WARPING", "nodes": "n1"}, notes)
    assert job.phase == "unknown" and job.nodes == ("n1",)
    assert notes == ["job 9 has unknown state 'WARPING'; treating it as holding its nodes"]
    assert "RUNNING" in JOB_STATES


def test_numbers_of_later_releases_are_read() -> None:
    assert number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "number": 7}, 3) == 3
    assert number(None, 5) == 5 and number(True, 5) == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:phi:2(S:0-1),gpumem:16G", [("gpu", "phi", 2), ("gpumem", "", 16)]),
        ("gpu:a:2(S:0,1),gpu:b:1", [("gpu", "a", 2), ("gpu", "b", 1)]),
        ("gpu:4", [("gpu", "", 4)]),
        ("(null)", []),
    ],
)
def test_gres_strings(text: str, expected: list[tuple[str, str, int]]) -> None:
    assert [(g.name, g.type, g.count) for g in parse_gres(text)] == expected


def test_gres_indexes_ranges_and_other_names() -> None:
    assert parse_gres_indexes("gpu:a:3(IDX:0-1,3)", "gpu") == ("0", "1", "3")
    assert parse_gres_indexes("gpu(IDX:N/A)", "gpu") == ()
    assert parse_gres_indexes("mps:100(IDX:0)", "gpu") == ()


def test_hostlists() -> None:
    assert expand_nodes("csl-n[1-2],gpu07") == ("csl-n1", "csl-n2", "gpu07")
    assert expand_nodes("") == ()
    with pytest.raises(ValueError):
        expand_nodes("n[1-")


def fields_recording() -> tuple[str, str, dict[str, str]]:
    """The recorded quick re-read: its output, its marker and the ids of its jobs."""
    text = (FIXTURES / "squeue-fields.txt").read_text()
    marker = (FIXTURES / "squeue-fields.marker").read_text().strip()
    ids = dict(p.split("=") for p in (FIXTURES / "squeue-fields.ids").read_text().split())
    return text, marker, ids


def test_quick_reread_fields_on_recorded_output() -> None:
    text, marker, ids = fields_recording()
    wanted = [*ids.values(), "99999"]
    jobs = parse_squeue_fields(text, wanted, marker)
    assert set(jobs) == set(ids.values())  # unknown ids are simply absent
    assert jobs[ids["done"]].phase == "ended"
    assert jobs[ids["victim"]].held and jobs[ids["victim"]].admin_comment == ""
    placed = jobs[ids["placed"]]
    assert placed.required_nodes == "csl-n2" and placed.admin_comment.startswith("coshare-pl")
    assert jobs[ids["running"]].phase == "active" and not jobs[ids["running"]].held
    assert jobs[ids["plain"]].comment == "" and jobs[ids["plain"]].required_nodes == ""
    # A comment with the separator and a line break is read whole.
    assert jobs[ids["odd"]].comment == "coshare: device-memory=1G\nnext line|z"


def test_a_comment_forging_another_jobs_line_changes_nothing_about_that_job() -> None:
    # Recorded on the real cluster: the forger's comment holds a whole line for the victim
    # in the '|' format (and the victim's real record follows). The victim was once
    # read as duplicated and skipped every cycle; now it reads as it is.
    text, marker, ids = fields_recording()
    victim, forger = ids["victim"], ids["forger"]
    assert f"\n{victim}|PENDING|None|1|csl-n1|coshare-placement" in text
    jobs = parse_squeue_fields(text, [victim, forger], marker)
    assert jobs[victim].held and jobs[victim].priority == 0
    assert (jobs[victim].admin_comment, jobs[victim].required_nodes) == ("", "")
    assert jobs[victim].comment == "coshare: device-memory=2G device-threads=120"
    assert jobs[forger].comment.endswith("mem_mib=1;threads=1|forged")


def test_quick_reread_needs_the_callers_marker() -> None:
    text, marker, ids = fields_recording()
    assert parse_squeue_fields(text, list(ids.values()), "csotherrandommarker") == {}
    assert fields_format(marker).split(",")[0] == f"JobID:0{marker}"
    assert fields_format(marker).endswith(f"Comment:0{marker}end")
    for bad in ("", "1abc", "a,b", "a:b"):
        with pytest.raises(ValueError, match="marker"):
            fields_format(bad)


def test_record_script_uses_the_clients_format() -> None:
    script = (FIXTURES.parent / "record").read_text()
    assert f"for field in {' '.join(FIELDS[:-1])}; do" in script
    assert f'format+="{FIELDS[-1]}:0${{marker}}end"' in script


# -- at the adapter's boundary: every number and name of a record is bounded --------------


def sinfo_with(node: str, **fields: object) -> str:
    """The recorded sinfo output with node ``node``'s record changed (JSON may hold NaN and
    Infinity: ``json.loads`` accepts both)."""
    data = json.loads((FIXTURES / "sinfo-drain-down.json").read_text())
    for record in data["nodes"]:
        if record["name"] == node:
            record.update(fields)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            {"cpus": 1e30},
            "node csl-n2: cpus=1e+30 is outside what coshare accepts (allowed: a "
            "number 0..1048576); node left out of this cycle",
        ),
        ({"cpus": float("nan")}, "node csl-n2: cpus=nan is not a number"),
        ({"real_memory": float("inf")}, "node csl-n2: real_memory=inf is not a finite number"),
        ({"real_memory": 2**40}, "node csl-n2: real_memory=1099511627776 is outside"),
        ({"cpus": {"set": True, "number": 2**21}}, "node csl-n2: cpus=2097152 is outside"),
        (
            {"gres": "gpu:fakephi:2\x1b[2J"},
            "node csl-n2: gres='gpu:fakephi:2\\x1b[2J' holds the character '\\x1b'",
        ),
    ],
)
def test_a_hostile_node_record_is_left_out_naming_node_and_field(
    fields: dict[str, object], says: str
) -> None:
    notes: list[str] = []
    nodes = parse_sinfo_json(sinfo_with("csl-n2", **fields), notes)
    assert [n.name for n in nodes] == ["csl-n1", "csl-n3", "csl-n4"]
    [note] = notes
    assert note.startswith(says) and note.endswith("node left out of this cycle")


@pytest.mark.parametrize("name", [" csl-n2", "csl-n2\n", "csl\u202en2", "", 7, "n" * 300])
def test_a_node_whose_name_is_not_an_id_is_skipped_with_a_note(name: object) -> None:
    notes: list[str] = []
    nodes = parse_sinfo_json(sinfo_with("csl-n2", name=name), notes)
    assert [n.name for n in nodes] == ["csl-n1", "csl-n3", "csl-n4"]
    [note] = notes
    assert note.startswith("sinfo --json: node record 1 skipped: name=") and len(note) < 400


def test_capacities_round_down() -> None:
    [n2] = [
        n
        for n in parse_sinfo_json(sinfo_with("csl-n2", cpus=7.9, real_memory=16383.5))
        if n.name == "csl-n2"
    ]
    assert (n2.cpus, n2.memory_mib) == (7, 16383)


def test_a_gres_count_beyond_the_bound_builds_no_list() -> None:
    [n2] = [
        n
        for n in parse_sinfo_json(sinfo_with("csl-n2", gres="gpu:fakephi:99999999999"))
        if n.name == "csl-n2"
    ]
    assert n2.gres[0].count == 99999999999  # read as written, counted only when asked
    with pytest.raises(
        ValueError,
        match=r"gres='gpu:99999999999' is outside what coshare "
        r"accepts \(allowed: at most 1024 devices\)",
    ):
        n2.devices("gpu")
    assert n2.devices("mps") == []
    # Whole matches only: 13 digits, or anything after the entry, is no GRES entry.
    notes: list[str] = []
    assert parse_gres("gpu:2x,gpu:1234567890123,gpu:1", notes) == parse_gres("gpu:1")
    assert notes == [
        "cannot read GRES 'gpu:2x'; ignored",
        "cannot read GRES 'gpu:1234567890123'; ignored",
    ]


@pytest.mark.parametrize(
    "detail",
    [
        "gpu:fakephi:1(IDX:0-999999999)",
        "gpu:fakephi:1(IDX:١)",
        "gpu:fakephi:1(IDX:0-1024)",
        "gpu:fakephi:1(IDX:3-1)",
        "gpu:fakephi:1(IDX:0,x)",
    ],
)
def test_gres_indexes_beyond_the_bound_or_in_other_scripts_are_refused(detail: str) -> None:
    with pytest.raises(ValueError, match=r"gres_detail=.* has an unreadable index"):
        parse_gres_indexes(detail, "gpu")
    assert parse_gres_indexes("gpu:fakephi:2(IDX:0-1,1023)", "gpu") == ("0", "1", "1023")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cpus": float("nan")}, "cpus=nan is not a number (allowed: a number 0..1048576)"),
        ({"priority": float("inf")}, "priority=inf is not a finite number"),
        ({"memory_per_node": -1}, "memory_per_node=-1 is outside what coshare accepts"),
        ({"submit_time": 1e300}, "submit_time=1e+300 is outside"),
        ({"cpus": "8"}, "cpus='8' is not a number"),
    ],
)
def test_a_job_number_that_is_not_finite_or_out_of_bounds_is_named(
    fields: dict[str, object], says: str
) -> None:
    record = {"job_id": 9, "job_state": "PENDING", "nodes": "", **fields}
    job = parse_job(record)  # int(float("nan")) raised here before, naming no field
    assert job.problem == says or job.problem.startswith(says)


@pytest.mark.parametrize("nodes", ["csl-n1,bad\u202e", "csl-n1,x\x7f"])
def test_node_names_read_from_a_job_are_ids(nodes: str) -> None:
    with pytest.raises(ValueError, match=r"nodes=.* holds the character"):
        parse_job({"job_id": 9, "job_state": "RUNNING", "nodes": nodes})


def test_the_quick_reread_reads_ascii_priorities_only() -> None:
    marker = "cs0"
    line = marker.join(["9", "PENDING", "None", "\u00b2", "", "(null)", "c"]) + marker + "end\n"
    assert parse_squeue_fields(line, ["9"], marker)["9"].priority == 0  # int("²") raised


def test_a_node_in_two_partitions_is_left_out_whole_and_noted_once() -> None:
    data = json.loads(sinfo_with("csl-n2", cpus=math.nan))
    bad = next(r for r in data["nodes"] if r["name"] == "csl-n2")
    data["nodes"].append({**bad, "partitions": ["other"]})
    data["nodes"].append({**bad, "partitions": ["third"], "cpus": 8})  # readable this time
    notes: list[str] = []
    nodes = parse_sinfo_json(json.dumps(data), notes)
    assert [n.name for n in nodes] == ["csl-n1", "csl-n3", "csl-n4"]
    assert notes == [
        "node csl-n2: cpus=nan is not a number (allowed: a number 0..1048576); "
        "node left out of this cycle"
    ]
