"""The ``sns`` simulator workload: the paper's profiles from the data file,
the job mixes of sections 6.2 and 6.3, and the profile-driven execution model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.model import MILLI, Job
from coshare.policies import PolicyOptions, make_policy
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.jobs import host_only
from coshare.sim.sns import (
    RATIO_RANGE,
    Cluster,
    SnsModel,
    ratio_mix,
    run_sequence,
    scaling_ratio,
    sequence,
)
from coshare.sim.sns_report import load_data

PROFILES, CLUSTER, DATA = load_data()


def test_the_data_file_has_the_twelve_programs_and_a_source_for_every_value() -> None:
    assert sorted(PROFILES) == sorted(
        ["MG", "CG", "EP", "BFS", "LU", "TS", "BW", "WC", "NW", "HC", "GAN", "RNN"]
    )
    classes = {p: PROFILES[p].program_class for p in PROFILES}
    # section 6.1: MG, CG, LU, TS, BW scaling; BFS compact; EP, WC, NW, HC neutral; GAN and
    # RNN cannot leave one node (section 6.4 counts 3 compact)
    assert sorted(p for p, c in classes.items() if c == "scaling") == ["BW", "CG", "LU", "MG", "TS"]
    assert sorted(p for p, c in classes.items() if c == "neutral") == ["EP", "HC", "NW", "WC"]
    assert sorted(p for p, c in classes.items() if c == "compact") == ["BFS", "GAN", "RNN"]
    for raw in DATA["profiles"]:
        assert set(raw["sources"]) >= {"run_time_s", "ways", "ipc", "membw_gbps"}, raw["program"]
    # the numbers the paper's text gives
    assert {p: PROFILES[p].ways_for(0.9) for p in ("MG", "CG", "BFS", "EP", "HC")} == {
        "MG": 3,
        "CG": 10,
        "BFS": 18,
        "EP": 2,
        "HC": 2,
    }
    assert PROFILES["CG"].best_scale == 2
    assert PROFILES["CG"].speedup(2) == pytest.approx(1.13, abs=1e-4)
    assert PROFILES["MG"].membw_at(20) == 112.0 and PROFILES["CG"].membw_at(20) == 42.9
    assert (CLUSTER.cores, CLUSTER.llc_ways, CLUSTER.membw_gbps) == (28, 20, 118.26)


def test_sequences_are_the_papers_shape_and_deterministic() -> None:
    first = sequence(PROFILES, 0, 3)
    assert first == sequence(PROFILES, 0, 3) and first != sequence(PROFILES, 1, 3)
    assert len(first) == 20
    assert {s.job.processes for s in first} <= {16, 28}
    assert RATIO_RANGE[0] <= scaling_ratio(first, PROFILES) <= RATIO_RANGE[1]
    assert all(50.0 <= s.duration_s <= 1200.0 for s in first)
    assert all(s.job.nodes_max == 1 for s in first if s.job.program in ("GAN", "RNN"))
    mix = ratio_mix(PROFILES, 0.4, 0)
    assert sum(1 for s in mix if s.job.program == "BW") == 12 and len(mix) == 30


def _one(program: str, processes: int, run_s: float, job_id: str = "a") -> object:
    job = Job(
        job_id,
        kind="cpu",
        device_count=0,
        processes=processes,
        program=program,
        nodes=1,
        nodes_max=8,
        cpu_milli=MILLI,
        memory_mib=1,
    )
    return host_only(job, run_s)


def test_a_job_alone_runs_its_profiles_time_at_its_scale() -> None:
    mg = _one("MG", 16, 100.0)
    ce = run_sequence([mg], make_policy("exclusive"), PROFILES, CLUSTER)  # type: ignore[list-item]
    assert ce.run_s == pytest.approx(100.0) and ce.scales == (1,)
    sns = make_policy("sns", PolicyOptions(sns_profiles=PROFILES))
    run = run_sequence([mg], sns, PROFILES, CLUSTER)  # type: ignore[list-item]
    assert run.scales == (8,)
    assert run.run_s == pytest.approx(100.0 / PROFILES["MG"].speedup(8))


def test_sharing_a_node_slows_by_ways_and_bandwidth_and_never_speeds_up() -> None:
    model = SnsModel(PROFILES, Cluster())
    jobs = [_one("MG", 14, 100.0, "a"), _one("LU", 14, 100.0, "b"), _one("EP", 14, 100.0, "c")]
    # cs puts two 14-process jobs on one node: no ways allocated, bandwidth 98 + 70 > 118
    result = simulate(
        Cluster().nodes(1),
        jobs[:2],
        make_policy("cs"),  # type: ignore[arg-type]
        options=SimOptions(verify=True),
        model=model,
    )
    slow = {r.id: r.slowdown for r in result.jobs}
    assert slow["a"] is not None and slow["a"] > 1.1 and slow["b"] is not None and slow["b"] > 1.1
    ways = SnsModel(PROFILES, Cluster())
    light = simulate(
        Cluster().nodes(1),
        [jobs[0], jobs[2]],
        make_policy("cs"),  # type: ignore[list-item]
        options=SimOptions(verify=True),
        model=ways,
    )
    assert all(r.slowdown is not None and r.slowdown >= 1.0 for r in light.jobs)


def test_allocated_jobs_share_the_spare_ways_equally() -> None:
    from coshare.model import Assignment

    model = SnsModel(PROFILES, Cluster())
    jobs = [_one("MG", 8, 100.0, "a"), _one("EP", 8, 100.0, "b")]
    model.bind(jobs, [], lambda t, tok: None)  # type: ignore[arg-type]
    model.on_part(0, Assignment("a", "n", llc_ways=3), 8)
    model.on_part(1, Assignment("b", "n", llc_ways=2), 8)
    model.start(0, (), 0.0)
    model.start(1, (), 0.0)
    assert model.ways_of("n") == {0: 3 + 7.5, 1: 2 + 7.5}


def test_every_policy_runs_a_sequence_soundly() -> None:
    jobs = list(sequence(PROFILES, 0, 0))
    for name in ("exclusive", "cs", "sns"):
        policy = make_policy(name, PolicyOptions(sns_profiles=PROFILES))
        result = simulate(
            CLUSTER.nodes(8),
            jobs,
            policy,
            options=SimOptions(verify=True),
            model=SnsModel(PROFILES, CLUSTER),
        )
        assert result.not_run == (), name


def test_the_command_prints_the_papers_figures_beside_coshares() -> None:
    out = CliRunner().invoke(
        cli, ["simulate", "--workload", "sns", "--seeds", "1", "--output", "json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output[out.output.index("{") :])
    assert data["paper"]["sns_gain"] == 0.198 and len(data["seeds"]["0"]) == 36
    assert set(data["policies"]) == {"exclusive", "cs", "sns"}
    assert data["policies"]["exclusive"][0]["mean"] == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "5"], "--jobs does not apply"),
        (["--sweep", "sns_ways_weight=1,2"], "needs scaling_share"),
        (["--sweep", "threads=soft"], "'threads' names no parameter"),
        (["--sweep", "scaling_share=1.5"], "scaling_share: '1.5' is not allowed"),
    ],
)
def test_bad_sns_requests_are_refused(args: list[str], message: str) -> None:
    out = CliRunner().invoke(cli, ["simulate", "--workload", "sns", *args])
    assert out.exit_code == 2 and message in out.output


def test_scaling_share_is_no_parameter_of_the_other_workloads() -> None:
    out = CliRunner().invoke(cli, ["simulate", "--sweep", "scaling_share=0.5"])
    assert out.exit_code == 2 and "'scaling_share' names no parameter" in out.output
