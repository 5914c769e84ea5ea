"""The trace parsers refuse what is not a finite number within its bound, naming the line and
the field; demands round up and capacities down (issue 11)."""

from __future__ import annotations

import pytest
from coshare.model import MILLI
from coshare.sim.traces import (
    TraceError,
    parse_alibaba_nodes,
    parse_alibaba_pods,
    parse_swf,
    parse_swf_machines,
)

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
RECORD = "{id} 0 0 10 {procs} -1 -1 1 -1 {req_kb} 1 1 1 1 1 1 -1 -1"


@pytest.mark.parametrize(
    ("row", "says"),
    [("p,inf,1,1,500,0,", "line 2: field 'cpu_milli' is 'inf'"),
     ("p,1,nan,1,500,0,", "field 'memory_mib' is 'nan'"),
     ("p,1,1,1,500,nan,", "field 'creation_time' is 'nan'"),
     ("p,1,1,1,500,0,1e400", "field 'deletion_time' is '1e400'"),
     ("p,1,1,1e30,500,0,", "field 'num_gpu' is '1e30' (allowed: a number 0..1024)"),
     (" p,1,1,1,500,0,", "the name ' p' has white space")],
)  # fmt: skip
def test_alibaba_pods_with_unusable_fields_are_refused(row: str, says: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_alibaba_pods(PODS + row + "\n", "pods")
    assert says in str(info.value)


def test_alibaba_demands_round_up_and_capacities_down() -> None:
    pod = parse_alibaba_pods(PODS + "p,1500.5,100.2,0,0,0,\n")[0].job
    assert (pod.cpu_milli, pod.memory_mib) == (1501, 101)
    node = parse_alibaba_nodes(NODES + "n,3999.5,100.9,1,V100\n")[0]
    assert (node.cpu_milli, node.memory_mib) == (3999, 100)


def test_swf_demands_round_up() -> None:
    job = parse_swf([RECORD.format(id=1, procs=2, req_kb=1025)]).jobs[0].job
    assert (job.processes, job.memory_mib) == (2, 2)


def test_a_duplicate_swf_job_number_names_both_lines() -> None:
    record = RECORD.format(id=7, procs=1, req_kb=1)
    lines = [record, "; comment", record]
    with pytest.raises(TraceError, match=r"t line 3: job 7 appears again \(first on line 1\)"):
        parse_swf(lines, "t")


@pytest.mark.parametrize(
    ("line", "says"),
    [("1 m 100000 4 1 1024", "nodes is '100000' (allowed: an integer 0..10000)"),
     ("1 m 2 1e3 1 1024", "cpus is '1e3'"), ("1 m\x1b 2 4 1 1024", "the name 'm\\x1b'"),
     ("1 m 2 4 1 ٣", "ram_kb is '٣'")],
)  # fmt: skip
def test_swf_machines_are_bounded(line: str, says: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_swf_machines(line, "m")
    assert says in str(info.value)


def test_swf_machines_give_whole_cores() -> None:
    nodes = parse_swf_machines("0 seth 2 4 1 1048576\n")
    assert [n.name for n in nodes] == ["seth001", "seth002"]
    assert nodes[0].cpu_milli == 4 * MILLI and nodes[0].memory_mib == 1024
