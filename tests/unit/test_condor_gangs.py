"""HTCondor's parallel universe as coshare's gangs, without a pool: the
translation of a parallel job's ad, the ledger's view of a gang's placement (whole, half
written, gone), the writes that place it, the gate it opens (evaluated by the real ClassAd
library) and the job wrapper on each of its nodes (run for real on starter-like ad files)."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import classad2
import pytest
from coshare.errors import CommandFailed
from coshare.ledger.book import Book
from coshare.model import Assignment, Device, Job, Node, Plan, RunningJob
from coshare.system.programs import run

from condor_addon import expressions as X
from condor_addon.attributes import JOB_PROJECTION, PARALLEL_UNIVERSE, SLOT_PROJECTION
from condor_addon.client import values_of
from condor_addon.edits import plan_edits
from condor_addon.view import ClusterView, QueueJob, current, parse_queue, parse_slots, read_job

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "condor"
WRAPPER = str(DEPLOY / "coshare-job-wrapper")
QUOTED = 'node4 " || true || "'

#: 3-core nodes: a parallel job's 2-core slot cannot be doubled on one (doubling_problem).
NODES = tuple(
    Node(n, 3000, 4096, (Device("0", 8192, 240), Device("1", 8192, 240)))
    for n in ("node1", "node2", "node3")
)
CLUSTER = ClusterView(NODES)

#: A parallel job's ad as the schedd holds it after ``universe = parallel``,
#: ``machine_count = 2``, ``request_cpus = 2``, ``request_memory = 256`` (the attributes
#: condor_submit 23.9 writes for them, those coshare reads).
PARALLEL_AD = """ClusterId = 7
ProcId = 0
JobStatus = 1
JobUniverse = 11
MinHosts = 2
MaxHosts = 2
RequestCpus = 2
RequestMemory = 256
QDate = 1700000000
JobPrio = 0
CoshareManaged = true
CoshareDeviceMemory = 2048
CoshareDeviceThreads = 60
"""


def job_ad(extra: str = "") -> QueueJob:
    ad = classad2.parseOne(PARALLEL_AD + extra)
    job = read_job(values_of(ad, JOB_PROJECTION))
    assert job is not None
    return job


def test_a_parallel_job_is_a_gang_of_machine_count_nodes_with_its_slot_per_node() -> None:
    job = job_ad()
    assert (job.universe, job.is_parallel) == (PARALLEL_UNIVERSE, True)
    queue = parse_queue([job], CLUSTER, now_s=1700000010, replan_after_s=300)
    [gang] = queue.book.pending
    assert (gang.nodes, gang.nodes_max, gang.processes) == (2, None, 2)
    # RequestCpus/RequestMemory are each machine's slot: per process, one process a machine
    assert (gang.cpu_milli, gang.memory_mib) == (2000, 256)
    assert queue.book.rejected == ()


def test_processes_of_a_parallel_job_share_each_machines_slot() -> None:
    queue = parse_queue([job_ad("CoshareProcesses = 8\n")], CLUSTER, now_s=0, replan_after_s=300)
    [gang] = queue.book.pending
    assert (gang.nodes, gang.processes, gang.cpu_milli, gang.memory_mib) == (2, 8, 500, 64)


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("MaxHosts = 3\n", "MaxHosts", "range of machines"),
        ("MinHosts = 0\n", "MinHosts", "whole number"),
        ("MinHosts = 1e300\n", "MinHosts", ""),
        ("CoshareNodes = 2\n", "CoshareNodes", "repeats machine_count"),
        ("CoshareNodesMax = 4\n", "CoshareNodesMax", "repeats machine_count"),
        ("CoshareProcesses = 5\n", "CoshareProcesses", "multiple of machine_count (2)"),
    ],
)
def test_a_parallel_job_that_cannot_be_placed_as_asked_is_refused_naming_the_field(
    extra: str, field: str, words: str
) -> None:
    queue = parse_queue(
        [job_ad(extra), replace(job_ad(), id="8.0")], CLUSTER, now_s=0, replan_after_s=300
    )
    [refused] = queue.book.rejected
    assert refused.job == "7.0" and field in refused.reason and words in refused.reason
    assert [j.id for j in queue.book.pending] == ["8.0"]  # the other job is planned


def test_gang_keys_on_a_vanilla_job_are_refused_with_how_to_submit_it() -> None:
    job = replace(job_ad(), universe=5, annotations={**job_ad().annotations, "CoshareNodes": 3})
    [refused] = parse_queue([job], CLUSTER, now_s=0, replan_after_s=300).book.rejected
    assert "CoshareNodes" in refused.reason and "universe = parallel" in refused.reason


def test_a_parallel_job_whose_slot_fits_twice_on_a_node_is_refused_unless_allowed() -> None:
    # 1 core, 256 MiB: two of its slots fit on every node, so the dedicated scheduler could
    # start two of its processes on one; 2 cores: only on node2 (6 cores).
    big = Node("node2", 6000, 4096, NODES[1].devices)
    roomy = ClusterView((NODES[0], big, NODES[2]))
    small = replace(job_ad(), request_cpus=1)
    other = replace(job_ad(), id="8.0")  # 2 cores: fits twice on node2 too
    book = parse_queue([small, other], roomy, now_s=0, replan_after_s=300).book
    assert {r.job for r in book.rejected} == {"7.0", "8.0"} and not book.pending
    reason = next(r.reason for r in book.rejected if r.job == "7.0")
    assert reason.startswith("job 7.0: RequestCpus") and "node1 (3 cores, 4096 MiB)" in reason
    assert "node2 (6 cores, 4096 MiB)" in next(r.reason for r in book.rejected if r.job == "8.0")
    assert "> 3" in reason and "> 2048 MiB" in reason and "parallel_may_double" in reason
    # on 3-core nodes the 2-core job cannot be doubled; the 1-core one still can
    book = parse_queue([small, other], CLUSTER, now_s=0, replan_after_s=300).book
    assert [r.job for r in book.rejected] == ["7.0"] and [j.id for j in book.pending] == ["8.0"]
    # a slot of more than half of every node's memory cannot be doubled either
    heavy = replace(small, id="9.0", request_memory=2049)
    book = parse_queue([heavy], roomy, now_s=0, replan_after_s=300).book
    assert [j.id for j in book.pending] == ["9.0"] and not book.rejected
    # allowed by the admin (condor.parallel_may_double): planned
    book = parse_queue(
        [small, other], roomy, now_s=0, replan_after_s=300, parallel_may_double=True
    ).book
    assert sorted(j.id for j in book.pending) == ["7.0", "8.0"] and not book.rejected


def test_a_placed_parallel_job_is_not_refused_for_doubling_later() -> None:
    # placed while it was allowed (or before the pool grew): its open gate is kept
    job = replace(placed('{"node1", "node3"}', '{"1", "0"}'), request_cpus=1)
    book = parse_queue([job], CLUSTER, now_s=1700000010, replan_after_s=300).book
    assert not book.rejected and not book.pending and {r.id for r in book.planned} == {"7.0"}


def placed(
    nodes: str, devices: str, at: int = 1700000000, gate: str | None = '"node1"'
) -> QueueJob:
    extra = f"CosharePlacedAt = {at}\nCosharePlacedNodes = {nodes}\n"
    extra += f"CosharePlacedNodeDevices = {devices}\n"
    if gate is not None:
        extra += f"CosharePlacedNode = {gate}\n"
    return job_ad(extra)


def test_a_placed_gang_holds_its_share_on_every_node_it_was_placed_on() -> None:
    job = placed('{"node1", "node3"}', '{"1", "0"}')
    book = parse_queue([job], CLUSTER, now_s=1700000010, replan_after_s=300).book
    assert book.pending == () and book.to_close == {}
    held = sorted(
        (r.node, r.devices, r.cpu_milli, r.memory_mib, r.device_memory_mib) for r in book.planned
    )
    assert held == [("node1", ("1",), 2000, 256, 2048), ("node3", ("0",), 2000, 256, 2048)]


@pytest.mark.parametrize(
    ("nodes", "devices", "gate"),
    [
        ('{"node1", "node3"}', '{"1"}', '"node1"'),  # device list shorter: half written
        ('{"node1"}', '{"1"}', '"node1"'),  # one node of two
        ('{"node1", "node1"}', '{"0", "1"}', '"node1"'),  # one node twice
        ('{"node1", "node9"}', '{"0", "1"}', '"node1"'),  # a node that is gone
        ('{"node1", "node3"}', '{"0,1", "0"}', '"node1"'),  # two devices where it needs one
        ('{"node1", "node3"}', '{"0", "7"}', '"node1"'),  # a device the node lacks
        ('{"node2", "node3"}', '{"0", "1"}', '"node1"'),  # a gate that is not the list's first
        ("undefined", "undefined", '"node1"'),  # the gate without any list
    ],
)
def test_an_open_gate_without_a_whole_gang_placement_is_closed_and_planned_again(
    nodes: str, devices: str, gate: str
) -> None:
    book = parse_queue(
        [placed(nodes, devices, gate=gate)], CLUSTER, now_s=1700000010, replan_after_s=300
    ).book
    assert [j.id for j in book.pending] == ["7.0"] and book.planned == ()
    assert book.to_close == {"7.0": "placed where its node or devices cannot take it now"}


def test_lists_written_by_a_cycle_killed_before_the_gate_are_no_placement() -> None:
    book = parse_queue(
        [placed('{"node1", "node3"}', '{"1", "0"}', gate=None)],
        CLUSTER,
        now_s=1700000010,
        replan_after_s=300,
    ).book
    assert [j.id for j in book.pending] == ["7.0"] and book.to_close == {} and not book.planned


def test_an_unstarted_gang_placement_expires_like_any_other() -> None:
    book = parse_queue(
        [placed('{"node1", "node3"}', '{"1", "0"}')], CLUSTER, now_s=1700000400, replan_after_s=300
    ).book
    assert book.to_close == {"7.0": "placed but not started within cycle.replan_after_s"}


def gang_job() -> Job:
    return Job("7.0", 2048, 60, cpu_milli=2000, memory_mib=256, processes=2, nodes=2)


def gang_plan(*spots: tuple[str, tuple[str, ...]]) -> Plan:
    return Plan("knapsack", tuple(Assignment("7.0", n, d, processes=1) for n, d in spots))


def test_a_gang_is_written_whole_before_its_one_gate_opens() -> None:
    job = job_ad()
    edits = plan_edits(
        gang_plan(("node2", ("1",)), ("node3", ("0",))),
        Book(pending=(gang_job(),)),
        (),
        {job.id: current(job, job)},
    )
    [write] = edits.decisions.writes
    assert [(p.node, p.devices, p.processes) for p in write.parts] == [
        ("node2", ("1",), 1),
        ("node3", ("0",), 1),
    ]
    assert edits.placed == ("7.0",) and edits.devices == ()
    assert edits.gang_nodes == ((("node2", "node3"), ("7.0",)),)
    assert edits.gang_devices == (((("1",), ("0",)), ("7.0",)),)
    assert edits.nodes == (("node2", ("7.0",)),)  # the gate: its first node


def test_a_gang_placed_the_same_way_is_left_as_it_is_in_any_order() -> None:
    job = placed('{"node3", "node1"}', '{"0", "1"}', gate='"node3"')
    same = plan_edits(
        gang_plan(("node1", ("1",)), ("node3", ("0",))),
        Book(pending=(gang_job(),)),
        (),
        {job.id: current(job, job)},
    )
    assert same.decisions.unchanged == ("7.0",) and same.decisions.writes == ()
    moved = plan_edits(
        gang_plan(("node1", ("0",)), ("node3", ("0",))),
        Book(pending=(gang_job(),), to_close={"7.0": "expired"}),
        (),
        {job.id: current(job, job)},
    )
    [close] = moved.decisions.close
    assert "planned again on node1/0 + node3/0" in close.detail
    assert [[(p.node, p.devices) for p in w.parts] for w in moved.decisions.writes] == [
        [("node1", ("0",)), ("node3", ("0",))]
    ]


def test_a_running_gangs_slots_count_the_devices_it_was_given_on_each_node() -> None:
    common = {
        "SlotType": "Dynamic",
        "State": "Claimed",
        "Cpus": 2,
        "Memory": 256,
        "CoshareManaged": True,
        "CosharePlacedNode": "node1",
        "CosharePlacedNodes": ["node1", "node2"],
        "CosharePlacedNodeDevices": ["1", "0"],
        "CoshareDeviceMemory": 2048,
        "CoshareDeviceThreads": 60,
        "GlobalJobId": "s#7.0#1",
    }
    slots: list[dict[str, object]] = []
    for n in ("node1", "node2"):
        base = {
            "Name": f"slot1@{n}",
            "CoshareNodeName": n,
            "SlotType": "Partitionable",
            "State": "Unclaimed",
            "TotalSlotCpus": 4,
            "TotalSlotMemory": 4096,
            "CoshareNodeDeviceIds": ["0", "1"],
            "CoshareNodeDeviceMemory": [8192, 8192],
            "CoshareNodeDeviceThreads": [240, 240],
        }
        slots += [base, {**common, "Name": f"slot1_1@{n}", "CoshareNodeName": n}]
    view = parse_slots([{k: s.get(k) for k in SLOT_PROJECTION if k in s} for s in slots], {})
    assert sorted((r.node, r.devices) for r in view.running) == [
        ("node1", ("1",)),
        ("node2", ("0",)),
    ]


def test_a_running_gang_the_collector_does_not_show_yet_counts_from_its_placement() -> None:
    job = replace(placed('{"node1", "node3"}', '{"1", "0"}'), status=2, global_id="s#7.0#1")
    shown = replace(CLUSTER, running=(RunningJob("s#7.0#1", "node1", ("1",)),))
    queue = parse_queue([job], shown, now_s=1700000010, replan_after_s=300)
    # node1's slot is in the collector already; node3's part counts from the queue
    assert [(r.node, r.devices, r.cpu_milli, r.memory_mib) for r in queue.running] == [
        ("node3", ("0",), 2000, 256)
    ]
    hidden = parse_queue([job], CLUSTER, now_s=1700000010, replan_after_s=300)
    assert sorted(r.node for r in hidden.running) == ["node1", "node3"]


def test_two_processes_of_a_gang_on_one_node_are_noted_for_the_admin() -> None:
    # seen on the pool: the dedicated scheduler took two slots of node2 for one 2-node job
    job = replace(placed('{"node1", "node2"}', '{"0", "0"}'), status=2, global_id="s#7.0#1")
    doubled = replace(
        CLUSTER,
        running=(RunningJob("s#7.0#1", "node2", ("0",)), RunningJob("s#7.0#1", "node2", ("0",))),
    )
    queue = parse_queue([job], doubled, now_s=1700000010, replan_after_s=300)
    assert queue.warnings == (
        "job 7.0: the dedicated scheduler started 2 of its processes on "
        "node2, where coshare planned 1",
    )
    # node1's part is still counted from the placement until its slot shows
    assert [r.node for r in queue.running] == ["node1"]
    fine = replace(CLUSTER, running=(RunningJob("s#7.0#1", "node2", ("0",)),))
    assert parse_queue([job], fine, now_s=1700000010, replan_after_s=300).warnings == ()


# -- the gate, evaluated by the ClassAd library ----------------------------------------------

SCHEDD_CONF = DEPLOY / "config.d" / "10-coshare-schedd.conf"
EXECUTE_CONF = DEPLOY / "config.d" / "20-coshare-execute.conf"


def setting(path: Path, pattern: str) -> str:
    match = re.search(pattern, path.read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def gang_gate(nodes: list[str] | None, first: str | None) -> classad2.ClassAd:
    job = classad2.ClassAd()
    job["CoshareManaged"] = True
    job["CoshareUserRequirements"] = classad2.ExprTree("true")
    job["Requirements"] = classad2.ExprTree(setting(SCHEDD_CONF, r"SET Requirements (.*)"))
    if nodes is not None:
        job["CosharePlacedNodes"] = classad2.ExprTree(X.nodes_value(nodes))
        job["CosharePlacedNodeDevices"] = classad2.ExprTree(
            X.node_devices_value([("0",)] * len(nodes))
        )
    if first is not None:
        job["CosharePlacedNode"] = classad2.ExprTree(X.node_value(first))
    return job


def machine(name: str, start: bool = False) -> classad2.ClassAd:
    """A node's slot ad; with ``start``, its Requirements are the execute nodes' START (without
    the pool's own part), as the startd evaluates it against a job."""
    ad = classad2.ClassAd()
    ad["CoshareNodeName"] = name
    if start:
        ad["Requirements"] = classad2.ExprTree(
            setting(EXECUTE_CONF, r"^START = \(\$\(START\)\) && (.*)$")
        )
    return ad


def starts(job: classad2.ClassAd, name: str) -> bool:
    return bool(machine(name, start=True).symmetricMatch(job))


@pytest.mark.parametrize("names", [["node1", "node3"], [QUOTED, "node1"], ['a\\" || true', "b"]])
def test_a_gangs_gate_opens_on_its_planned_nodes_only_and_only_once_written_whole(
    names: list[str],
) -> None:
    nodes = {n: machine(n) for n in [*names, "node2", "other"]}
    for n, ad in nodes.items():
        assert not ad.matches(gang_gate(names, None)), n  # lists written, gate still closed
        assert ad.matches(gang_gate(names, names[0])) is (n in names), n
    single = gang_gate(None, "node2")  # a single-node job's gate is as before
    assert [n for n, ad in nodes.items() if ad.matches(single)] == ["node2"]


def test_the_execute_nodes_start_only_a_gangs_planned_nodes() -> None:
    job = gang_gate(["node1", QUOTED], "node1")
    assert starts(job, QUOTED) and starts(job, "node1")
    assert not starts(job, "node2")
    assert not starts(gang_gate(["node1", QUOTED], None), "node1")  # gate closed
    assert starts(gang_gate(None, "node2"), "node2") and not starts(gang_gate(None, "node2"), "n")


def test_gang_values_are_quoted_lists() -> None:
    assert classad2.ExprTree(X.nodes_value([QUOTED, "n2"])).eval() == [QUOTED, "n2"]
    assert classad2.ExprTree(X.node_devices_value([("0", "1"), ()])).eval() == ["0,1", ""]


# -- the job wrapper on each node of a gang ----------------------------------------------------

SHOW = ["/bin/sh", "-c", 'echo "$COSHARE_NODE;$COSHARE_DEVICES;$CUDA_VISIBLE_DEVICES"']


def installed_wrapper(tmp: Path) -> str:
    """The wrapper next to a stand-in coshare-launch that runs the job's command as it is
    (without coshare-launch the wrapper refuses every job coshare placed)."""
    shutil.copy(WRAPPER, tmp / "coshare-job-wrapper")
    (tmp / "coshare-launch").write_text(
        "import os, sys; cmd = sys.argv[sys.argv.index('--') + 1:]; os.execv(cmd[0], cmd)\n"
    )
    return str(tmp / "coshare-job-wrapper")


def wrapper_env(tmp: Path, job: str, node: str) -> dict[str, str]:
    (tmp / "job.ad").write_text("CoshareManaged = true\n" + job)
    (tmp / "machine.ad").write_text(f"CoshareNodeName = {node}\n")
    return {
        "_CONDOR_JOB_AD": str(tmp / "job.ad"),
        "_CONDOR_MACHINE_AD": str(tmp / "machine.ad"),
        "_CONDOR_WRAPPER_ERROR_FILE": str(tmp / "error"),
        "PATH": "/usr/bin:/bin",
    }


def written(value: str) -> str:
    """A ClassAd value as HTCondor writes it into the starter's ad file (old format)."""
    ad = classad2.ClassAd()
    ad["X"] = classad2.ExprTree(value)
    line = ad.printOld().strip()
    assert line.startswith("X = ") and "\n" not in line
    return line[len("X = ") :]


GANG = [QUOTED, "node1", 'n","2']


@pytest.mark.parametrize(("node", "devices"), [(QUOTED, "1"), ("node1", "0,1"), ('n","2', "3")])
def test_the_wrapper_gives_each_node_of_a_gang_its_own_devices(
    tmp_path: Path, node: str, devices: str
) -> None:
    per_node = written(X.node_devices_value([("1",), ("0", "1"), ("3",)]))
    job = (
        f"CosharePlacedNode = {X.node_value(GANG[0])}\n"
        f"CosharePlacedNodes = {written(X.nodes_value(GANG))}\n"
        f"CosharePlacedNodeDevices = {per_node}\n"
        'CosharePlacedDevices = "9"\n'
    )
    env = wrapper_env(tmp_path, job, written(X.node_value(node)))
    out = run([installed_wrapper(tmp_path), *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out == f"{node};{devices};{devices}"


def test_the_wrapper_refuses_a_gang_on_a_node_not_in_its_list(tmp_path: Path) -> None:
    job = (
        f'CosharePlacedNode = "node1"\nCosharePlacedNodes = {written(X.nodes_value(GANG))}\n'
        f"CosharePlacedNodeDevices = {written(X.node_devices_value([('1',)] * 3))}\n"
    )
    for node in ('"node2"', '"node"', '"node1 "'):
        env = wrapper_env(tmp_path, job, node)
        with pytest.raises(CommandFailed):
            run([WRAPPER, *SHOW], timeout_s=10, env=env)
        assert f"started on {node}" in (tmp_path / "error").read_text()


def test_the_wrapper_refuses_a_gang_whose_gate_is_closed(tmp_path: Path) -> None:
    job = (
        f"CosharePlacedNodes = {written(X.nodes_value(['node1']))}\n"
        f"CosharePlacedNodeDevices = {written(X.node_devices_value([('1',)]))}\n"
    )
    with pytest.raises(CommandFailed):
        run([WRAPPER, *SHOW], timeout_s=10, env=wrapper_env(tmp_path, job, '"node1"'))
