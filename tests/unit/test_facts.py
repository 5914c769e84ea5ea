"""Node facts (coshare.ledger.facts): the one line both schedulers carry, read once for both."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest
from coshare.cli.main import schema_text
from coshare.errors import FactsError, SnapshotError
from coshare.ledger.facts import (
    MAX_LOADS,
    JobCopy,
    JobCpus,
    JobLoad,
    JobWait,
    MembwFacts,
    NodeFacts,
    age_problem,
    attach,
    format_facts,
    parse_facts,
    usable_facts,
    with_facts,
)
from coshare.model import Node, RunningJob, Snapshot, TrialResult
from coshare.schema import decode_json, parse_snapshot, snapshot_to_dict
from hypothesis import given
from hypothesis import strategies as st

NOW = 1_700_000_000.0
FULL = NodeFacts(
    at_s=NOW - 5,
    membw=MembwFacts(avail_gbps=9.8, baseline_gbps=19.6, cores=2, at_s=NOW - 30),
    llc_ways=20,
    llc_ways_free=12,
    loads=(JobLoad("1234", 0.52, 0.5, 1.0, 3600), JobLoad("node1_1.0_17", 3.9, 4.0, 4.0, 600)),
)


def text_of(**items: str) -> str:
    """A facts line with these items after the prefix and version."""
    return ";".join(["coshare-facts", "v=1", *(f"{k}={v}" for k, v in items.items())])


def test_a_line_reads_back_as_what_was_written() -> None:
    line = format_facts(FULL)
    assert line.startswith("coshare-facts;v=1;at=1699999995.000;membw_gbps=9.800;")
    assert " " not in line and '"' not in line
    back = parse_facts(line)
    assert back == FULL
    assert back.membw is not None and back.membw.fraction == pytest.approx(0.5)


def test_only_the_time_is_required_and_unknown_items_are_ignored() -> None:
    assert parse_facts(text_of(at="12.5")) == NodeFacts(12.5)
    assert parse_facts(text_of(at="1", gpu_pcie_mbps="300")) == NodeFacts(1.0)  # a newer node


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "does not start with 'coshare-facts'"),
        ("some site's own Extra text", "holds the character ' '"),
        ('coshare-facts;v=1;at=1;x="', "holds the character '\"'"),
        ("coshare-facts;v=1;at=1\nload=1:1:1:1:1", "holds the character '\\n'"),
        ("coshare-facts;v=2;at=1", "is version '2'; this coshare reads version 1"),
        ("coshare-facts;at=1", "is version '(none)'"),
        (text_of(), "has no time (at=)"),
        ("coshare-facts;v=1;at=1;at=2", "item 'at' is given twice"),
        ("coshare-facts;v=1;at", "item 'at' is not key=value"),
        (text_of(at="nan"), "at='nan' is not a number"),
        (text_of(at="inf"), "at='inf' is not a number"),
        (text_of(at="1e400"), "at='1e400' is not a number in 0..1e+12"),
        (text_of(at="-5"), "at='-5' is not a number in 0..1e+12"),
        (text_of(at="1", membw_gbps="3"), "has a membw probe without membw_baseline_gbps"),
        (
            text_of(at="1", membw_gbps="3", membw_baseline_gbps="0", membw_cores="1", membw_at="1"),
            "membw_baseline_gbps is 0",
        ),
        (
            text_of(
                at="1", membw_gbps="-3", membw_baseline_gbps="4", membw_cores="1", membw_at="1"
            ),
            "membw_gbps='-3' is not a number in 0..1e+06",
        ),
        (text_of(at="1", llc_ways_free="3"), "has llc_ways_free without llc_ways"),
        (
            text_of(at="1", llc_ways="8", llc_ways_free="9"),
            "llc_ways_free='9' is not an integer in 0..8",
        ),
        (text_of(at="1", llc_ways="1025"), "llc_ways='1025' is not an integer in 1..1024"),
        (text_of(at="1", load="12:1:1:1"), "load entry '12:1:1:1' is not job:mean:last:max"),
        (text_of(at="1", load="-x:1:1:1:1"), "load entry '-x:1:1:1:1' is not job:mean"),
        (text_of(at="1", load="12:1:1:1:1,12:2:2:2:2"), "load lists job 12 twice"),
        (text_of(at="1", load="12:1:nan:1:1"), "load of job 12: last='nan' is not a number"),
        (
            text_of(at="1", load="12:1:1:2e6:1"),
            "load of job 12: max='2e6' is not a number in 0..1.04858e+06",
        ),
        (text_of(at="1", copy_mbps="12"), "copy_mbps entry '12' is not job:MB/s"),
        (text_of(at="1", copy_mbps="12:1,12:2"), "copy_mbps lists job 12 twice"),
        (text_of(at="1", copy_mbps="12:nan"), "copy_mbps of job 12='nan' is not a number"),
        (
            text_of(at="1", copy_mbps="12:-1"),
            "copy_mbps of job 12='-1' is not a number in 0..1e+09",
        ),
        (
            text_of(at="1", copy_mbps="12:2e9"),
            "copy_mbps of job 12='2e9' is not a number in 0..1e+09",
        ),
    ],
)
def test_unusable_lines_are_refused_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(FactsError) as refused:
        parse_facts(text)
    assert message in str(refused.value)


def test_absurd_sizes_are_refused_before_they_are_read() -> None:
    with pytest.raises(FactsError, match="at most 131072"):
        parse_facts(text_of(at="1", pad="x" * 200_000))
    many = ",".join(f"{i}:1:1:1:1" for i in range(MAX_LOADS + 1))
    with pytest.raises(FactsError, match=f"load lists {MAX_LOADS + 1} jobs"):
        parse_facts(text_of(at="1", load=many))


def test_a_job_id_the_line_cannot_carry_is_never_written() -> None:
    with pytest.raises(FactsError, match="cannot be carried"):
        format_facts(NodeFacts(1.0, loads=(JobLoad("a:b", 1, 1, 1, 1),)))


@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_with_a_facts_error(text: str) -> None:
    try:
        parse_facts(text)
    except FactsError as exc:
        assert len(str(exc)) < 300  # bounded, whatever came through the scheduler


@given(
    st.builds(
        NodeFacts,
        at_s=st.floats(0, 1e12, allow_nan=False).map(lambda x: round(x, 3)),
        membw=st.none()
        | st.builds(
            MembwFacts,
            st.integers(0, 10**6).map(lambda x: x / 1000),
            st.integers(1, 10**6).map(lambda x: x / 1000),
            st.integers(1, 4096),
            st.integers(0, 10**9).map(float),
        ),
        loads=st.lists(
            st.builds(
                JobLoad,
                st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,20}", fullmatch=True),
                *[st.integers(0, 10**6).map(lambda x: x / 1000)] * 3,
                st.integers(0, 10**6).map(float),
            ),
            unique_by=lambda x: x.job,
            max_size=5,
        ).map(tuple),
        copies=st.lists(
            st.builds(
                JobCopy,
                st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,20}", fullmatch=True),
                st.integers(0, 10**9).map(lambda x: x / 1000),
            ),
            unique_by=lambda x: x.job,
            max_size=5,
        ).map(tuple),
        waits=st.lists(
            st.builds(
                JobWait,
                st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,20}", fullmatch=True),
                *[st.integers(0, 10**6).map(lambda x: x / 1000)] * 2,
            ),
            unique_by=lambda x: x.job,
            max_size=5,
        ).map(tuple),
    )
)
def test_every_facts_value_round_trips(facts: NodeFacts) -> None:
    assert parse_facts(format_facts(facts)) == facts


def test_age_limits_both_ways() -> None:
    assert age_problem(NOW - 599, NOW, 600) is None
    assert age_problem(NOW - 601, NOW, 600) == "601 s old"
    assert age_problem(NOW + 700, NOW, 600) == (
        "dated 700 s in the future (is the node's clock right?)"
    )


def snapshot() -> Snapshot:
    nodes = (Node("n1", 4000, 8192), Node("n2", 4000, 8192, llc_ways=11), Node("n3", 4000, 8192))
    running = (
        RunningJob("1234", "n1"),
        RunningJob("7.0", "n1", state="planned"),
        RunningJob("8.0", "n1"),
        RunningJob("1234", "n3"),
    )
    return Snapshot(nodes, running)


def test_usable_facts_go_into_the_snapshot_and_loads_onto_running_jobs() -> None:
    out = attach(snapshot(), {"n1": FULL, "n2": NodeFacts(NOW, llc_ways=20, llc_ways_free=3)})
    n1, n2, n3 = out.nodes
    assert (n1.facts_at_s, n1.membw_avail_gbps, n1.membw_baseline_gbps) == (NOW - 5, 9.8, 19.6)
    assert (n1.llc_ways, n1.llc_ways_free) == (20, 12)
    assert (n2.llc_ways, n2.llc_ways_free) == (11, 3)  # a configured llc_ways stays
    assert n3 == snapshot().nodes[2]
    job, planned, unmeasured, elsewhere = out.running
    assert (
        job.cpu_load_cores,
        job.cpu_load_last_cores,
        job.cpu_load_max_cores,
        job.cpu_load_window_s,
    ) == (0.52, 0.5, 1.0, 3600)
    assert planned.cpu_load_cores is None  # not started: nothing of it was measured
    assert unmeasured.cpu_load_cores is None
    assert elsewhere.cpu_load_cores is None  # another node's job of the same id


def test_a_measured_copy_bandwidth_replaces_the_declared_one_and_none_keeps_it() -> None:
    declared = replace(
        snapshot(), running=tuple(replace(r, copy_bw_mbps=100.0) for r in snapshot().running)
    )
    line = format_facts(NodeFacts(NOW, copies=(JobCopy("1234", 512.5),)))
    assert line.endswith(";copy_mbps=1234:512.500")
    out = attach(declared, {"n1": parse_facts(line), "n3": NodeFacts(NOW)})
    job, planned, other, elsewhere = out.running
    assert job.copy_bw_mbps == 512.5  # NVML's PCIe throughput beats the declaration
    assert planned.copy_bw_mbps == other.copy_bw_mbps == 100.0  # not measured: declared
    assert elsewhere.copy_bw_mbps == 100.0  # a node without NVML publishes none
    with pytest.raises(FactsError, match="cannot be carried"):
        format_facts(NodeFacts(1.0, copies=(JobCopy("a:b", 1.0),)))


def test_a_job_is_found_by_its_id_on_the_node() -> None:
    out = attach(
        snapshot(), {"n1": FULL}, local_ids=lambda r: "node1_1.0_17" if r.id == "8.0" else r.id
    )
    assert out.running[2].cpu_load_cores == 3.9


def test_stale_unreadable_and_old_probes_are_left_out_in_one_note_each() -> None:
    stale = format_facts(NodeFacts(NOW - 3600))
    texts = {f"s{i}": stale for i in range(8)}
    texts["bad"] = "coshare-facts;v=1;at=x"
    texts["old-probe"] = format_facts(NodeFacts(NOW, MembwFacts(1, 2, 1, NOW - 900)))
    texts["none"] = ""
    usable, notes = usable_facts(texts, now_s=NOW, max_age_s=600)
    assert set(usable) == {"old-probe"} and usable["old-probe"].membw is None
    assert notes == (
        "node facts unreadable on 1 node(s), planned without them (bad: at='x' is not a number "
        "in 0..1e+12)",
        "node facts older than cycle.node_facts_max_age_s = 600 s on 8 node(s), planned "
        "without them (s0: 3600 s old; s1: 3600 s old; s2: 3600 s old; s3: 3600 s old; s4: "
        "3600 s old; and 3 more nodes)",
        "membw probe older than cycle.node_facts_max_age_s = 600 s on 1 node(s), planned "
        "without them (old-probe: 900 s old)",
    )


def test_with_facts_reads_only_the_nodes_planned() -> None:
    texts = {"n1": format_facts(FULL), "gone": "garbage"}
    out, notes = with_facts(snapshot(), texts, now_s=NOW, max_age_s=600)
    assert notes == ()
    assert out.nodes[0].membw_avail_gbps == 9.8


def test_the_snapshot_contract_carries_the_facts_both_ways() -> None:
    out = attach(snapshot(), {"n1": FULL})
    data = snapshot_to_dict(out)
    node = data["nodes"][0]  # type: ignore[index]
    assert node["facts_at_s"] == NOW - 5 and node["llc_ways_free"] == 12
    assert data["running"][0]["cpu_load_max_cores"] == 1.0  # type: ignore[index]
    assert parse_snapshot(json.loads(json.dumps(data))) == out


@pytest.mark.parametrize(
    ("node", "running", "message"),
    [
        ({"llc_ways": 4, "llc_ways_free": 5}, {}, "llc_ways_free 5 exceeds llc_ways 4"),
        ({"llc_ways_free": 2}, {}, "llc_ways_free 2 exceeds llc_ways None"),
        ({"membw_baseline_gbps": 0}, {}, "field 'membw_baseline_gbps' is 0 (allowed: a number > 0"),
        ({"facts_at_s": "yesterday"}, {}, "field 'facts_at_s' is \"yesterday\""),
        ({}, {"cpu_load_cores": -1}, "field 'cpu_load_cores' is -1 (allowed: a number >= 0"),
        (
            {},
            {"cpu_load_window_s": 1e13},
            "'cpu_load_window_s' is 10000000000000.0 (allowed: a number >= 0 and <= 1000000000000)",
        ),
        ({}, {"cpu_wait_cores": -0.5}, "field 'cpu_wait_cores' is -0.5 (allowed: a number >= 0"),
        (
            {},
            {"cpu_wait_last_cores": 2e6},
            "field 'cpu_wait_last_cores' is 2000000.0 (allowed: a number >= 0 and <= 1048576)",
        ),
    ],
)
def test_bad_facts_fields_in_a_snapshot_are_refused_naming_them(
    node: dict[str, object], running: dict[str, object], message: str
) -> None:
    doc = {
        "nodes": [{"name": "n1", "cores": 4, "memory_mib": 1, **node}],
        "running": [{"id": "1", "node": "n1", **running}],
    }
    with pytest.raises(SnapshotError) as refused:
        decode_json(json.dumps(doc), "s.json", parse_snapshot)
    assert message in str(refused.value)


def test_the_cores_a_job_holds_are_carried_and_attached() -> None:
    from coshare.ledger.facts import JobCpus, NodeFacts, attach, format_facts, parse_facts
    from coshare.model import Node, RunningJob, Snapshot

    facts = NodeFacts(100.0, cpus=(JobCpus("7", 1), JobCpus("8", 3)))
    text = format_facts(facts)
    assert text.endswith(";cpus=7:1,8:3") and parse_facts(text) == facts
    for bad in ("cpus=7:0", "cpus=7:1,7:2", "cpus=7", "cpus=7:x"):
        with pytest.raises(FactsError, match="cpus"):
            parse_facts(f"coshare-facts;v=1;at=1;{bad}")
    snap = Snapshot((Node("n1", 4000, 1024),), (RunningJob("7", "n1"), RunningJob("9", "n1")), ())
    attached = attach(snap, {"n1": facts})
    assert [r.cpu_cores_held for r in attached.running] == [1, None]


def test_run_queue_waits_are_carried_bounded_and_attached() -> None:
    facts = NodeFacts(
        100.0, cpus=(JobCpus("7", 1),), waits=(JobWait("7", 0.25, 1.5), JobWait("8", 0.0, 0.0))
    )
    text = format_facts(facts)
    assert text.endswith(";cpus=7:1;wait=7:0.250:1.500,8:0.000:0.000")
    assert parse_facts(text) == facts
    # A line without it (an older node) reads as before: no waits.
    assert parse_facts("coshare-facts;v=1;at=1;cpus=7:1").waits == ()
    for bad, says in (
        ("wait=7:nan:1", "wait of job 7: mean='nan' is not a number"),
        ("wait=7:0.1:inf", "wait of job 7: last='inf'"),
        ("wait=7:-1:0", "wait of job 7: mean='-1'"),
        ("wait=7:0:2000000", "wait of job 7: last='2000000' is not a number in 0..1.04858e+06"),
        ("wait=7:0.5", "wait entry '7:0.5' is not job:mean:last"),
        ("wait=7:0.5:1:2", "wait of job 7: last='1:2'"),
        ("wait=7:0:0,7:1:1", "wait lists job 7 twice"),
        ("wait=x y:0:0", "holds the character ' '"),
    ):
        with pytest.raises(FactsError) as refused:
            parse_facts(f"coshare-facts;v=1;at=1;{bad}")
        assert says in str(refused.value), str(refused.value)
    with pytest.raises(FactsError, match="cannot be carried"):
        format_facts(NodeFacts(1.0, waits=(JobWait("a:b", 0.0, 0.0),)))
    snap = Snapshot(
        (Node("n1", 4000, 1024),),
        (RunningJob("7", "n1"), RunningJob("9", "n1"), RunningJob("8", "n1", state="planned")),
        (),
    )
    attached = attach(snap, {"n1": facts})
    assert [(r.cpu_wait_cores, r.cpu_wait_last_cores) for r in attached.running] == [
        (0.25, 1.5),
        (None, None),
        (None, None),
    ]  # a planned job has no tasks yet
    assert parse_snapshot(snapshot_to_dict(attached)) == attached
    jsonschema.validate(snapshot_to_dict(attached), json.loads(schema_text("snapshot")))


def test_trial_answers_are_carried_and_attached_to_their_node() -> None:
    facts = replace(
        FULL,
        trials=(
            TrialResult("node1_1.0_17", 1_699_999_950, 0.43),
            TrialResult("1234", 1_699_999_960, None, "unknown_job"),
        ),
    )
    text = format_facts(facts)
    assert text.endswith(";trial=node1_1.0_17:1699999950:0.4300,1234:1699999960:unknown_job")
    assert parse_facts(text) == facts
    # An older planner's reader ignores the key: the rest of the line reads as before.
    assert parse_facts(text.replace(";trial=", ";zz_future=")).trials == ()
    usable, notes = usable_facts({"n1": text}, now_s=NOW, max_age_s=600)
    assert notes == ()
    snap = attach(Snapshot((Node("n1", 4000, 1024), Node("n2", 4000, 1024)), (), ()), usable)
    assert snap.nodes[0].trial_results == facts.trials and snap.nodes[1].trial_results == ()


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            "7:1699999950:1.5",
            "trial entry of job 7: share '1.5' is not a number in 0..1 (nor an error code)",
        ),
        (
            "7:1699999950:-0.1",
            "trial entry of job 7: share '-0.1' is not a number in 0..1 (nor an error code)",
        ),
        (
            "7:1699999950:nan",
            "trial entry of job 7: share 'nan' is not a number in 0..1 (nor an error code)",
        ),
        (
            "7:1699999950:Bad",
            "trial entry of job 7: share 'Bad' is not a number in 0..1 (nor an error code)",
        ),
        ("7:soon:0.5", "trial entry of job 7: at 'soon' is not epoch seconds"),
        ("7:-5:0.5", "trial entry of job 7: at '-5' is not epoch seconds"),
        ("7:1699999950", "trial entry '7:1699999950' is not job:at:result"),
        ("7:1:0.5:x", "trial entry '7:1:0.5:x' is not job:at:result"),
        (":1:0.5", "trial entry ':1:0.5' is not job:at:result"),
    ],
)
def test_a_bad_trial_entry_is_ignored_with_a_note_and_the_rest_is_used(
    entry: str, problem: str
) -> None:
    good = "8:1699999950:0.2000"
    text = format_facts(FULL) + f";trial={entry},{good}"
    usable, notes = usable_facts({"n1": text, "n2": format_facts(FULL)}, now_s=NOW, max_age_s=600)
    assert set(usable) == {"n1", "n2"}
    assert usable["n1"].trials == (TrialResult("8", 1_699_999_950, 0.2),)
    assert usable["n1"].loads == FULL.loads  # the node's other facts are kept
    assert notes == (
        "node facts: 1 trial entries unusable, ignored (the trials they answer "
        f"wait for a usable one: n1: {problem})",
    )


def test_a_job_answered_twice_has_neither_answer() -> None:
    text = format_facts(FULL) + ";trial=7:1:0.1,7:2:0.2,8:3:0.3"
    facts = parse_facts(text)
    assert facts.trials == (TrialResult("8", 3, 0.3),)
    assert facts.trial_problems == ("trial lists job 7 twice; both entries ignored",)


def test_a_trial_answer_the_line_cannot_carry_is_never_written() -> None:
    for bad in (
        TrialResult("a b", 1, 0.5),
        TrialResult("7", 1, 1.5),
        TrialResult("7", 1, None, "Not a code"),
        TrialResult("7", -1, 0.5),
    ):
        with pytest.raises(FactsError):
            format_facts(replace(FULL, trials=(bad,)))
