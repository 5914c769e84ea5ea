"""Trial co-runs a node's daemon probes on its own (``policy.membw.probe_via: facts``):
requests read from the scheduler, each probed at most once through the daemon's TRIAL (the
partners frozen only while the probe runs), the answers published in the node's facts; and
HTCondor's source of requests (condor_addon.node_trials), pure parts and a recorded client.
Against a temp dir with the kernel's cgroup v1 layout (test_node_facts_sampler's fixture);
the probe is injected through the daemon's own hook."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import SchedulerUnavailable
from coshare.ledger.facts import parse_facts
from coshare.model import TrialResult
from coshare.node.bandwidth import Measurement, ProbeResult
from coshare.node.control.service import JobControl
from coshare.node.sampler import facts_path
from coshare.node.trial_requests import (
    ANSWERS_FILE,
    NodeTrials,
    TrialAnswers,
    TrialRequest,
    open_node_trials,
    reply_result,
)

from condor_addon.node_trials import (
    PROJECTION,
    CondorTrialRequests,
    jobs_constraint,
    requests_of,
    split_node_id,
)
from condor_addon.view import node_job_id
from tests.unit.test_node_facts_sampler import Clock, add_job, job_dir, node, sampler  # noqa: F401

T0 = 1_700_000_000.0


def state(config: NodeConfig, job: str) -> str:
    return (job_dir(Path(config.cgroup_root), "freezer", job) / "freezer.state").read_text().strip()


@dataclass
class Source:
    """A scheduler's requests, as a test sets them; ``fail`` makes the next read fail."""

    found: list[TrialRequest] = field(default_factory=list)
    asked: list[tuple[str, ...]] = field(default_factory=list)
    fail: bool = False

    def requests(self, jobs: Sequence[str]) -> Sequence[TrialRequest]:
        self.asked.append(tuple(jobs))
        if self.fail:
            self.fail = False
            raise SchedulerUnavailable("cannot query the schedd after 2 attempts: refused")
        return list(self.found)


def daemon(config: NodeConfig, source: Source, probed: list[str]) -> tuple[JobControl, NodeTrials]:
    def probe(cpus: tuple[int, ...]) -> ProbeResult:
        probed.append(f"cores {cpus}: partner {state(config, '1')}, job {state(config, '2')}")
        return ProbeResult(Measurement(cpus, 3.0, 0.3, T0, 64, "numpy"), 5.0, "cpus 0")

    control = JobControl(config, clock=Clock(T0), probe=probe)
    answers = TrialAnswers(Path(config.state_dir) / ANSWERS_FILE)
    return control, NodeTrials(source, control.trial, answers)


def test_a_request_is_probed_once_and_its_answer_published_in_the_facts(
    node: NodeConfig,  # noqa: F811
) -> None:
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    source = Source([TrialRequest("2", 1_700_000_061, ("1",))])
    probed: list[str] = []
    _, trials = daemon(node, source, probed)
    lines = trials.round(["1", "2"])
    assert probed == ["cores (0,): partner FROZEN, job THAWED"]  # the old job frozen only
    assert state(node, "1") == "THAWED"
    assert lines == [
        "job 2: trial request 1700000061 beside 1: OK job=2 share=0.4000 "
        "available=0.6000 gbps=3.000 cpus=0"
    ]
    assert trials.round(["1", "2"]) == [] and len(probed) == 1  # at most once per request
    # The sampler writes the answer into the facts the publisher carries to the planner.
    taken = sampler(node, Clock(T0), Clock(0.0))
    taken = type(taken)(
        node,
        taken.store,
        taken.cgroups,
        taken.resctrl,
        Clock(T0),
        Clock(0.0),
        proc=taken.proc,
        trials=trials.published,
    )
    taken.round()
    facts = parse_facts(facts_path(node).read_text().strip())
    assert facts.trials == (TrialResult("2", 1_700_000_061, 0.4),)
    # A new request of the same job (a later at) is probed again; a gone job's is forgotten.
    source.found = [TrialRequest("2", 1_700_000_500, ("1",))]
    assert len(trials.round(["1", "2"])) == 1 and len(probed) == 2
    assert trials.published(["1", "2"]) == (TrialResult("2", 1_700_000_500, 0.4),)
    trials.round(["1"])
    assert trials.published(["1", "2"]) == ()


def test_a_probe_cut_off_by_a_dying_daemon_is_answered_interrupted_not_run_again(
    node: NodeConfig,  # noqa: F811
) -> None:
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    answers = TrialAnswers(Path(node.state_dir) / ANSWERS_FILE)
    answers.save({"2": (1_700_000_061, "started")})  # the mark a killed daemon left
    source = Source([TrialRequest("2", 1_700_000_061, ("1",))])
    probed: list[str] = []
    _, trials = daemon(node, source, probed)
    assert trials.round(["1", "2"]) == [
        "job 2: the trial probe of request 1700000061 was cut off (the daemon stopped); "
        "answered interrupted"
    ]
    assert probed == []
    assert trials.published(["1", "2"]) == (TrialResult("2", 1_700_000_061, None, "interrupted"),)


def test_requests_that_are_not_this_nodes_to_probe_are_left_alone(
    node: NodeConfig,  # noqa: F811
) -> None:
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    source = Source(
        [
            TrialRequest("9", 1, ("1",)),  # not a job of this node
            TrialRequest("2", 2, ("8",)),  # its partner ended (or is elsewhere)
            TrialRequest("2", 3, ("2",)),
        ]
    )  # itself as its partner
    probed: list[str] = []
    _, trials = daemon(node, source, probed)
    assert trials.round(["1", "2"]) == [] and probed == []
    # One job alone needs no trial: the scheduler is not even asked.
    assert trials.round(["1"]) == [] and source.asked == [("1", "2")]
    # A scheduler that cannot be read costs the round its requests, nothing else.
    source.fail, source.found = True, [TrialRequest("2", 4, ("1",))]
    assert trials.round(["1", "2"]) == [] and probed == []
    assert len(trials.round(["1", "2"])) == 1 and len(probed) == 1


def test_the_daemons_own_trial_is_the_sockets_trial_and_refuses_bad_ids(
    node: NodeConfig,  # noqa: F811
) -> None:
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    probed: list[str] = []
    control, _ = daemon(node, Source(), probed)
    assert control.trial("2", ["1"]).startswith("OK job=2 share=0.4000")
    assert control.trial("2", ["9"]) == "ERR unknown_job job 9 has no group on this node"
    assert control.trial("2 x", ["1"]).startswith("ERR bad_request")
    assert control.trial("2", ["1;rm"]).startswith("ERR bad_request")
    assert len(probed) == 1 and state(node, "1") == "THAWED"


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        ("OK job=2 share=0.4300 available=0.5700 gbps=3.1 cpus=0", "0.4300"),
        ("OK job=2 share=1.5", "internal"),
        ("OK job=2 share=nan", "internal"),
        ("OK job=2", "internal"),
        ("ERR unknown_job job 9 has no group on this node", "unknown_job"),
        ("ERR Weird stuff", "internal"),
        ("", "internal"),
    ],
)
def test_a_reply_becomes_a_share_or_an_error_code(reply: str, result: str) -> None:
    assert reply_result(reply) == result


def test_no_trial_requests_unless_configured(node: NodeConfig) -> None:  # noqa: F811
    assert open_node_trials(node, lambda job, partners: "") is None


# -- HTCondor's source ------------------------------------------------------------------------

SCHEDD = "coshare-pool@127.0.0.1"


def gid(cluster: int, qdate: int = 1_700_000_000, schedd: str = SCHEDD) -> str:
    return f"{schedd}#{cluster}.0#{qdate}"


def ad(
    cluster: int, trial: str | None = None, status: int = 2, **extra: object
) -> dict[str, object]:
    out: dict[str, object] = {
        "ClusterId": cluster,
        "ProcId": 0,
        "GlobalJobId": gid(cluster),
        "JobStatus": status,
        **extra,
    }
    if trial is not None:
        out["CoshareTrial"] = trial
    return out


def test_a_nodes_job_ids_name_their_schedd_and_queue_ids() -> None:
    local = node_job_id(gid(12))
    assert local == "coshare-pool_127.0.0.1_12.0_1700000000"
    assert split_node_id(local) == ("coshare-pool_127.0.0.1", 12, 0)
    assert split_node_id("4711") is None  # a Slurm job, or one HTCondor did not start
    assert split_node_id("x_12.0_17; rm") is None
    assert (
        jobs_constraint([(13, 0), (12, 1), (13, 0)])
        == "CoshareManaged =?= true && ((ClusterId == 12 && ProcId == 1) || "
        "(ClusterId == 13 && ProcId == 0))"
    )
    assert jobs_constraint([]) == "false"


def test_measuring_records_of_this_nodes_running_jobs_are_the_requests() -> None:
    jobs = [node_job_id(gid(c)) for c in (12, 13, 14, 15)]
    ads = [
        ad(12),
        ad(13, "measuring:1700000061:-:12.0+99.0:node_asked"),  # 99.0 not here: left out
        ad(14, "kept:1700000061:0.1:12.0:within_limit"),
        ad(15, "measuring:1700000061:-:12.0:node_asked", status=7),  # suspended: not probed
        ad(16, "measuring:1700000061:-:12.0:node_asked"),  # another node's job: never
        ad(17, "measuring:oops"),
        ad(18, "measuring:1700000061:-:12.0:-"),
    ]  # its planner probes over its socket
    found, notes = requests_of(ads, [*jobs, node_job_id(gid(17)), node_job_id(gid(18))])
    assert found == [TrialRequest(jobs[1], 1_700_000_061, (jobs[0],))]
    assert notes == [
        "job 17.0: trial record (text): 'measuring:oops' is not "
        "state:at:share:partners:why; not probed"
    ]


@dataclass
class Client:
    """The two read-only queries the source makes, recorded."""

    schedds: list[str]
    ads: dict[str, list[dict[str, object]]]
    queries: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def schedd_names(self) -> list[str]:
        return self.schedds

    def schedd_job_ads(
        self, name: str, constraint: str, projection: Sequence[str]
    ) -> list[dict[str, object]]:
        self.queries.append((name, constraint, tuple(projection)))
        if name not in self.ads:
            raise SchedulerUnavailable(f"cannot query the schedd {name}")
        return self.ads[name]


def test_only_the_schedds_of_this_nodes_jobs_are_asked_for_those_jobs_only() -> None:
    other = "other@host"
    asked = ad(13, "measuring:1700000061:-:12.0:node_asked")
    client = Client([SCHEDD, other, "idle@host"], {SCHEDD: [ad(12), asked]})
    jobs = [node_job_id(gid(12)), node_job_id(gid(13)), node_job_id(gid(5, schedd=other)), "4711"]
    source = CondorTrialRequests(client)  # type: ignore[arg-type]
    assert source.requests(jobs) == [TrialRequest(jobs[1], 1_700_000_061, (jobs[0],))]
    assert client.queries == [
        (
            SCHEDD,
            "CoshareManaged =?= true && ((ClusterId == 12 && ProcId == 0) || "
            "(ClusterId == 13 && ProcId == 0))",
            PROJECTION,
        ),
        (other, "CoshareManaged =?= true && ((ClusterId == 5 && ProcId == 0))", PROJECTION),
    ]  # other@host could not be read: its jobs have no requests this round, the rest do
    assert source.requests(["4711"]) == [] and len(client.queries) == 2


def test_only_integers_parsed_from_a_full_match_reach_a_constraint() -> None:
    # A schedd name of quotes and operators: the node's id of its job holds none of them,
    # and only the cluster and proc, as integers, go into the constraint.
    name = 'x" || true || "'
    client = Client([name], {name: []})
    bad = node_job_id(f"{name}#12.0#17")
    assert (bad, split_node_id(bad)) == ("x_____true______12.0_17", ("x_____true_____", 12, 0))
    assert CondorTrialRequests(client).requests([bad]) == []  # type: ignore[arg-type]
    assert client.queries == [
        (name, "CoshareManaged =?= true && ((ClusterId == 12 && ProcId == 0))", PROJECTION)
    ]
