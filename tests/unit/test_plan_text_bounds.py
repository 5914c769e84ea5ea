"""Every policy's plan of a hostile snapshot (longest names and programs the snapshot schema
admits, nodes without resctrl) passes the plan schema's own parser: the texts a policy writes
(spread notes, reasons, plan notes) stay within the schema's limit."""

from __future__ import annotations

import pytest
from coshare.ledger.ids import MAX_ID_CHARS, MAX_TEXT_CHARS
from coshare.model import MILLI, Job, Node, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy, policy_names
from coshare.profiles.programs import parse_profile
from coshare.schema import parse_plan, plan_to_dict

PROFILE = parse_profile(
    {
        "program": "MG",
        "run_time_s": {"1": 100.0, "2": 89.0, "4": 82.0, "8": 76.0},
        "ways": [2, 3, 20],
        "ipc": [0.8, 0.9, 1.0],
        "membw_gbps": [100.0, 96.0, 80.0],
    },
    "MG.json",
)


def _name(prefix: str, i: int) -> str:
    return (prefix + str(i)).ljust(MAX_ID_CHARS, "x")


def _cpu(prefix: str, cpu_milli: int, memory_mib: int, program: str, **more: int) -> Job:
    return Job(
        _name(prefix, 0),
        0,
        0,
        0,
        kind="cpu",
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        program=program,
        **more,
    )


def hostile() -> Snapshot:
    """Nodes with the longest names, half without resctrl; jobs with the longest ids and
    programs, spread over several nodes."""
    nodes = tuple(
        Node(_name("n", i), 8 * MILLI, 1 << 14, llc_ways=None if i % 2 else 20, membw_gbps=100.0)
        for i in range(8)
    )
    long_program = "p" * MAX_TEXT_CHARS
    pending = (
        _cpu("a", 2 * MILLI, 64, "MG", processes=16, nodes=1, nodes_max=8),
        _cpu("b", MILLI, 64, long_program),
        _cpu("c", 64 * MILLI, 64, long_program),
        _cpu("d", MILLI, 1 << 20, long_program),
        _cpu("e", MILLI, 64, long_program, processes=4, nodes=2, nodes_max=4),
    )
    running = (
        RunningJob(
            _name("r", 0), nodes[0].name, cpu_milli=7 * MILLI, memory_mib=64, program=long_program
        ),
    )
    return Snapshot(nodes=nodes, running=running, pending=pending)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_plan_of_a_hostile_snapshot_parses(name: str) -> None:
    options = PolicyOptions(sns_profiles={"MG": PROFILE}, threads="soft")
    plan = make_policy(name, options).plan(hostile())
    data = plan_to_dict(plan)
    parsed = parse_plan(data)
    assert parsed.assignments == plan.assignments
    for spread in plan.spreads:
        assert len(spread.note) <= MAX_TEXT_CHARS
