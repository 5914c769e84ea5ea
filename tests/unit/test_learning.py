"""Profiles learned from normal runs (Spread-n-Share section 4.2): the trial rule, the
learned entries on disk and their precedence under an admin's profile, the cycle's reading
of the nodes' job-end spool, the ``sns`` policy's learning runs (alone, at the trial scale)
and ``coshare profile show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.model import MILLI, Job, Node, RunningJob, Snapshot
from coshare.policies.sns import SnsPolicy
from coshare.profiles.job_end import NodeEnd, end_to_json
from coshare.profiles.learn_cycle import INCOMPLETE_WAIT_S, learn_from_spool
from coshare.profiles.learned_store import learned_dir, load_learned, write_learned
from coshare.profiles.learning import (
    Learned,
    Run,
    as_profile,
    for_policy,
    next_scale,
    observe,
    policy_inputs,
)
from coshare.profiles.store import write_profile

from tests.unit.docs_guides import ROOT, follows
from tests.unit.test_policy_sns import MG

RUN = 0


def run(scale: int, seconds: float, alone: bool = True, program: str = "X", **kw: Any) -> Run:
    global RUN
    RUN += 1
    return Run(str(RUN), program, scale, seconds, alone, **kw)


def learned(*runs: Run) -> Learned | None:
    entry: Learned | None = None
    for r in runs:
        entry = observe(entry, r)
    return entry


# -- the rule ---------------------------------------------------------------------------------


def test_an_unknown_program_tries_scale_1_then_2_4_8_and_keeps_the_best() -> None:
    assert next_scale(None) == 1
    entry = learned(run(1, 100.0))
    assert next_scale(entry) == 2 and entry is not None and as_profile(entry) is None
    entry = learned(run(1, 100.0), run(2, 80.0), run(4, 76.0))
    assert next_scale(entry) == 8
    entry = learned(run(1, 100.0), run(2, 80.0), run(4, 76.0), run(8, 75.0))
    assert entry is not None and next_scale(entry) is None
    profile = as_profile(entry)
    assert profile is not None
    assert dict(profile.run_time_s) == {1: 100.0, 2: 80.0, 4: 76.0, 8: 75.0}
    assert (profile.program_class, profile.best_scale) == ("scaling", 8)
    assert not profile.has_curves  # a normal run gives no IPC-LLC curve


def test_the_trials_stop_once_spreading_is_more_than_5_percent_slower_than_the_best() -> None:
    entry = learned(run(1, 100.0), run(2, 90.0), run(4, 94.0))  # within 5% of 90: go on
    assert next_scale(entry) == 8
    entry = learned(run(1, 100.0), run(2, 90.0), run(4, 94.6))  # 5.1% slower: stop
    assert next_scale(entry) is None
    entry = learned(run(1, 100.0), run(2, 90.0), run(4, 94.0), run(8, 130.0))
    assert next_scale(entry) is None
    entry = learned(run(1, 100.0), run(2, 120.0))  # compact: saturates at once
    assert entry is not None and next_scale(entry) is None
    profile = as_profile(entry)
    assert profile is not None and dict(profile.run_time_s) == {1: 100.0, 2: 120.0}
    assert (profile.program_class, profile.best_scale) == ("compact", 1)


def test_a_run_that_shared_a_node_is_counted_but_its_time_is_not_learned() -> None:
    entry = learned(run(1, 100.0), run(2, 30.0, alone=False))
    assert entry is not None
    assert entry.shared_runs == 1 and entry.runs == 2
    assert entry.run_time(2) is None and next_scale(entry) == 2


def test_a_job_is_counted_once_and_later_runs_alone_refine_the_mean() -> None:
    first = run(1, 100.0, cpu_s=400.0)
    entry = learned(first, first, run(1, 110.0, cpu_s=500.0))
    assert entry is not None
    at = entry.scales[1]
    assert at.runs == 2 and at.run_time_s == pytest.approx(105.0)
    assert at.cpu_s == pytest.approx(450.0)


def test_ipc_and_bandwidth_are_kept_where_measured_and_why_not_elsewhere() -> None:
    entry = learned(
        run(1, 100.0, unsupported={"ipc": "unsupported: per-job IPC"}),
        run(2, 90.0, membw_gbps=10.0),
        run(2, 90.0, membw_gbps=20.0),
    )
    assert entry is not None
    assert entry.ipc is None and entry.unsupported["ipc"] == "unsupported: per-job IPC"
    assert entry.membw_gbps == pytest.approx(15.0) and entry.membw_runs == 2


def test_an_admins_profile_wins_over_a_learned_one() -> None:
    done = learned(*(run(k, 100.0 / k, program="MG") for k in (1, 2, 4, 8)))
    trying = learned(run(1, 50.0, program="NEW"))
    assert done is not None and trying is not None
    known = for_policy({"MG": MG}, {"MG": done, "NEW": trying})
    assert known["MG"].source == "admin" and known["MG"].profile is MG
    assert known["MG"].learned is done
    assert known["NEW"].source == "learning" and known["NEW"].trying == 2
    profiles, explore = policy_inputs(known, learn=True)
    assert profiles == {"MG": MG} and explore == {"NEW": 2}
    assert policy_inputs(known, learn=False) == ({"MG": MG}, {})
    known = for_policy({}, {"MG": done})
    assert known["MG"].source == "learned" and known["MG"].profile is not None


# -- the entries on disk ----------------------------------------------------------------------


def test_a_learned_entry_round_trips_and_a_bad_file_is_left_out_naming_its_field(
    tmp_path: Path,
) -> None:
    entry = learned(
        run(1, 100.0, cpu_s=10.0, program="MG"), run(2, 80.0, alone=False, program="MG")
    )
    assert entry is not None
    path = write_learned(tmp_path, entry)
    assert path == learned_dir(tmp_path) / "MG.json"
    (learned_dir(tmp_path) / "CG.json").write_text(
        json.dumps({"program": "CG", "source": "learned", "scales": {"3": {}}})
    )
    found, problems = load_learned(tmp_path)
    assert found == {"MG": entry}
    assert len(problems) == 1 and "CG.json" in problems[0] and "scales.3" in problems[0]


# -- the job-end spool ------------------------------------------------------------------------


def end(job: str, node: str, nodes: int = 2, **over: Any) -> NodeEnd:
    values: dict[str, Any] = {
        "job": job,
        "node": node,
        "program": "LU",
        "scale": 2,
        "nodes": nodes,
        "started_at": 1000.0,
        "ended_at": 1040.0,
        "alone": True,
        "cpu_s": 70.0,
        "unsupported": {"ipc": "unsupported: per-job IPC"},
    }
    values.update(over)
    return NodeEnd(**values)


def put(spool: Path, record: NodeEnd) -> Path:
    spool.mkdir(exist_ok=True)
    path = spool / record.file_name
    path.write_text(json.dumps(end_to_json(record)))
    return path


def test_a_job_is_learned_once_all_its_nodes_wrote_and_its_records_go(tmp_path: Path) -> None:
    store, spool = tmp_path / "profiles", tmp_path / "spool"
    first = put(spool, end("7", "n1"))
    done = learn_from_spool(store, spool, 1050.0)
    assert done.counted == [] and first.exists()  # waits for n2
    second = put(spool, end("7", "n2", ended_at=1045.0, cpu_s=30.0))
    done = learn_from_spool(store, spool, 1050.0)
    assert done.counted == ["job 7: LU at scale 2, 45.0 s, alone"]
    assert not first.exists() and not second.exists()
    entries, _ = load_learned(store)
    at = entries["LU"].scales[2]
    assert (at.runs, at.run_time_s, at.cpu_s) == (1, 45.0, 100.0)
    # the same job again (a record rewritten by a retried Epilog) is not counted twice
    put(spool, end("7", "n1"))
    put(spool, end("7", "n2"))
    learn_from_spool(store, spool, 1060.0)
    assert load_learned(store)[0]["LU"].scales[2].runs == 1


def test_a_bad_record_is_set_aside_naming_its_field_and_the_rest_is_learned(
    tmp_path: Path,
) -> None:
    store, spool = tmp_path / "profiles", tmp_path / "spool"
    put(spool, end("8", "n1", nodes=1))
    bad = put(spool, end("9", "n1", nodes=1))
    data = json.loads(bad.read_text())
    data["cpu_s"] = float("inf")
    bad.write_text(json.dumps(data))
    (spool / "10@n1.json").write_text("{not json")
    done = learn_from_spool(store, spool, 2000.0)
    assert done.counted == ["job 8: LU at scale 2, 40.0 s, alone"]
    assert len(done.notes) == 2
    assert any("9@n1.json: cpu_s: want a number" in n for n in done.notes)
    assert sorted(p.name for p in (spool / "bad").iterdir()) == ["10@n1.json", "9@n1.json"]


def test_a_job_whose_other_nodes_never_wrote_is_dropped_with_a_note(tmp_path: Path) -> None:
    store, spool = tmp_path / "profiles", tmp_path / "spool"
    path = put(spool, end("11", "n1", nodes=3))
    done = learn_from_spool(store, spool, 1040.0 + INCOMPLETE_WAIT_S + 1)
    assert done.counted == [] and not path.exists()
    assert done.notes == [
        f"job 11: 1 of 3 nodes wrote a job-end record in {INCOMPLETE_WAIT_S:g} s; not counted"
    ]
    assert load_learned(store)[0] == {}


# -- the policy's learning runs ---------------------------------------------------------------


def cpu_job(job_id: str, program: str, processes: int = 2, nodes_max: int = 4) -> Job:
    return Job(
        job_id,
        kind="cpu",
        device_count=0,
        processes=processes,
        program=program,
        nodes=1,
        nodes_max=nodes_max,
        memory_mib=100,
    )


def four_nodes() -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", 4 * MILLI, 1 << 14, llc_ways=20, membw_gbps=100.0) for i in range(4))


def test_a_learning_run_goes_alone_at_its_trial_scale_and_keeps_its_nodes() -> None:
    busy = RunningJob("r", "n0", cpu_milli=1 * MILLI, memory_mib=100)
    others = tuple(cpu_job(str(i), "OTHER", processes=3, nodes_max=1) for i in (2, 3, 4))
    snapshot = Snapshot(four_nodes(), (busy,), (cpu_job("1", "NEW"), *others))
    plan = SnsPolicy({"MG": MG}, explore={"NEW": 2}).plan(snapshot)
    by_job: dict[str, list[str]] = {}
    for a in plan.assignments:
        by_job.setdefault(a.job, []).append(a.node)
    assert sorted(by_job["1"]) == ["n1", "n2"]  # scale 2 of 2 processes on nodes of 4 cores
    spread = next(s for s in plan.spreads if s.job == "1")
    assert spread.scale == 2 and "NEW is being learned: runs alone at scale 2" in spread.note
    # n1 and n2 have 3 idle cores each by count, but they are the learning run's alone
    assert sorted(by_job["2"] + by_job["3"]) == ["n0", "n3"]
    assert "4" not in by_job and plan.unplaced[0].job == "4"
    # while it runs, its nodes take nobody else
    running = tuple(RunningJob("1", n, cpu_milli=MILLI, program="NEW") for n in ("n1", "n2"))
    later = Snapshot(four_nodes(), running, (cpu_job("3", "OTHER", processes=1, nodes_max=1),))
    plan = SnsPolicy({}, explore={"NEW": 2}).plan(later)
    assert [a.node for a in plan.assignments] in (["n0"], ["n3"])


def test_without_learning_an_unknown_program_shares_compact_as_before() -> None:
    busy = RunningJob("r", "n0", cpu_milli=1 * MILLI, memory_mib=100)
    plan = SnsPolicy({}).plan(Snapshot(four_nodes(), (busy,), (cpu_job("1", "NEW"),)))
    assert [a.node for a in plan.assignments] == ["n0"]
    assert plan.spreads[0].note == "no profile for NEW: runs compact at scale 1"


def test_a_trial_scale_the_job_cannot_take_runs_it_as_unknown() -> None:
    job = cpu_job("1", "NEW", nodes_max=1)  # one node only: scale 2 is not allowed
    plan = SnsPolicy({}, explore={"NEW": 2}).plan(Snapshot(four_nodes(), (), (job,)))
    assert plan.spreads[0].scale == 1
    assert plan.spreads[0].note == "no profile for NEW: runs compact at scale 1"


# -- coshare profile show ---------------------------------------------------------------------


def test_profile_show_says_where_each_profile_comes_from(tmp_path: Path) -> None:
    write_profile(tmp_path, MG)
    mg = learned(run(1, 100.0, program="MG"))
    lu = learned(*(run(k, 100.0 / k, program="LU") for k in (1, 2, 4, 8)))
    new = learned(run(1, 100.0, program="NEW", unsupported={"ipc": "unsupported: x (/p)"}))
    for entry in (mg, lu, new):
        assert entry is not None
        write_learned(tmp_path, entry)
    result = CliRunner().invoke(cli, ["profile", "show", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("LU: learned (scaling, best scale 8; 4 run(s): scale 1 100.0 s x1")
    assert lines[1].startswith("MG: admin (scaling, best scale 8); learned entry not used")
    assert lines[2] == "NEW: learning (next run alone at scale 2; 1 run(s): scale 1 100.0 s x1)"
    assert lines[3] == f"{tmp_path}: 1 admin, 1 learned, 1 learning"
    # the guide shows this store's listing (sns-learning.md, "coshare profile show")
    page = (ROOT / "docs" / "sns-learning.md").read_text()
    shown = page.split("--store /etc/coshare/profiles` prints:\n\n```\n", 1)[1].split("```")[0]
    printed = result.output.replace(str(tmp_path), "/etc/coshare/profiles")
    assert follows(shown, printed) is None, follows(shown, printed)
    result = CliRunner().invoke(cli, ["profile", "show", "NEW", "--store", str(tmp_path)])
    assert "  ipc: unsupported: x (/p)" in result.output.splitlines()


# -- the simulator ----------------------------------------------------------------------------


def test_the_simulator_learns_a_scaling_program_scale_by_scale_from_its_runs_alone() -> None:
    from coshare.sim.jobs import host_only
    from coshare.sim.sns_learn import LearningPolicy, run_learning
    from coshare.sim.sns_report import load_data

    profiles, cluster, _ = load_data()
    truth = profiles["MG"]
    policy = LearningPolicy(profiles, {})
    scales = []
    for i in range(5):  # one MG job of 16 processes per sequence, 600 s under CE
        job = Job(f"{i}-MG", kind="cpu", device_count=0, processes=16, program="MG", nodes_max=8)
        result = run_learning([host_only(job, 600.0)], policy, profiles, cluster, 8, 1.0)
        scales.append(result.scales[0])
    assert scales == [1, 2, 4, 8, truth.best_scale]  # trials, then the best it learned
    entry = policy.store["MG"]
    for k in (1, 2, 4, 8):
        assert entry.run_time(k) == pytest.approx(600.0 / truth.speedup(k), abs=1.5)
    learned_profile = as_profile(entry)
    assert learned_profile is not None
    assert learned_profile.program_class == truth.program_class
    assert learned_profile.ways_for(0.9) == truth.ways_for(0.9)  # the sampler's curves


def test_learning_needs_a_profile_store_to_keep_its_entries_in() -> None:
    from coshare.config import SnsConfig
    from coshare.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy.sns.learn: .*set policy.sns.profiles_dir"):
        SnsConfig(learn=True)
    assert SnsConfig(learn=True, profiles_dir="/p").learn
