"""The node daemon's TRIAL request (poncos section 7 steps 6-8): the partners are
frozen while the probe runs on their cores and thawed whatever happens; a daemon killed with
a job frozen thaws it when it starts again. Against a temp dir with the kernel's cgroup v1
layout (the fixture of test_node_facts_sampler); the probe is injected through the
daemon's own hook, so what is asserted is the freezing around it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import ProbeError
from coshare.node.bandwidth import Measurement, ProbeResult
from coshare.node.control.protocol import ControlProtocolError, parse_control
from coshare.node.control.service import JobControl, set_frozen
from coshare.node.jobs import JobStore

from tests.unit.test_node_facts_sampler import Clock, add_job, job_dir, node  # noqa: F401

T0 = 1_700_000_000.0


def state(config: NodeConfig, job: str) -> str:
    return (job_dir(Path(config.cgroup_root), "freezer", job) / "freezer.state").read_text().strip()


def test_trial_freezes_the_partners_only_while_it_probes_their_cores(node: NodeConfig) -> None:  # noqa: F811
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    seen: list[tuple[tuple[int, ...], str, str]] = []

    def probe(cpus: tuple[int, ...]) -> ProbeResult:
        seen.append((cpus, state(node, "1"), state(node, "2")))
        return ProbeResult(Measurement(cpus, 3.0, 0.3, T0, 64, "numpy"), 5.0, "cpus 0")

    jobs = JobControl(node, clock=Clock(T0), probe=probe)
    reply = jobs.handle(b"TRIAL job=2 partners=1", os.getpid(), 0, None)
    assert reply == "OK job=2 share=0.4000 available=0.6000 gbps=3.000 cpus=0"
    assert seen == [((0,), "FROZEN", "THAWED")]  # the old job frozen, the new one running
    assert state(node, "1") == "THAWED"
    assert JobStore(Path(node.state_dir)).frozen_since("1") is None


def test_a_failed_probe_thaws_the_partners_and_says_why(node: NodeConfig) -> None:  # noqa: F811
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)

    def probe(cpus: tuple[int, ...]) -> ProbeResult:
        assert state(node, "1") == "FROZEN"
        raise ProbeError("no membw baseline for this node")

    reply = JobControl(node, clock=Clock(T0), probe=probe).handle(
        b"TRIAL job=2 partners=1", os.getpid(), 0, None
    )
    assert reply.startswith("ERR ") and "no membw baseline" in reply
    assert state(node, "1") == "THAWED"


def test_a_job_an_operator_froze_stays_frozen_after_a_trial(node: NodeConfig) -> None:  # noqa: F811
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    jobs = JobControl(
        node,
        clock=Clock(T0),
        probe=lambda cpus: ProbeResult(Measurement(cpus, 5.0, 0.3, T0, 64, "numpy"), 5.0, "cpus 0"),
    )
    assert jobs.handle(b"FREEZE job=1", os.getpid(), 0, None).endswith("changed=1")
    assert jobs.handle(b"TRIAL job=2 partners=1", os.getpid(), 0, None).startswith(
        "OK job=2 share=0.0000"
    )
    assert state(node, "1") == "FROZEN"  # the operator's freeze, thawed by its own timeout


def test_trial_is_for_operators_and_known_jobs(node: NodeConfig) -> None:  # noqa: F811
    add_job(node, "1", (0,), 0)
    add_job(node, "2", (1,), 0)
    jobs = JobControl(node, clock=Clock(T0), probe=lambda cpus: pytest.fail("probed"))
    assert jobs.handle(b"TRIAL job=2 partners=1", os.getpid(), 1000, None).startswith(
        "ERR not_allowed job 2: TRIAL is for operators"
    )
    assert (
        jobs.handle(b"TRIAL job=2 partners=9", os.getpid(), 0, None)
        == "ERR unknown_job job 9 has no group on this node"
    )
    assert state(node, "1") == "THAWED"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"TRIAL job=2", "TRIAL needs partners"),
        (b"TRIAL job=2 partners=2", "names a job twice or the job itself"),
        (b"TRIAL job=2 partners=1,1", "names a job twice"),
        (b"TRIAL job=2 partners=1;x", "partners"),
        (b"TRIAL job=2 partners=" + b",".join(str(i).encode() for i in range(3, 70)), "at most 64"),
    ],
)
def test_bad_trial_requests_are_refused_naming_the_field(line: bytes, words: str) -> None:
    with pytest.raises(ControlProtocolError) as caught:
        parse_control(line)
    assert words in caught.value.text


def test_a_daemon_killed_during_a_trial_thaws_the_job_when_it_starts_again(
    node: NodeConfig,  # noqa: F811
) -> None:
    add_job(node, "1", (0,), 0)
    first = JobControl(node, clock=Clock(T0))
    # The killed daemon got as far as the freeze (marked first, then frozen) and no further.
    set_frozen(
        first.store,
        first.cgroups,
        JobStore(Path(node.state_dir)).read("1").group(node.kill_timeout_s),
        True,
        T0,
    )  # type: ignore[union-attr]
    assert state(node, "1") == "FROZEN"
    restarted = JobControl(node, clock=Clock(T0 + 1))
    assert restarted.thaw_all() == ["1"]
    assert state(node, "1") == "THAWED"
    assert restarted.thaw_all() == []
