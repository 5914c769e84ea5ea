"""The trace parsers refuse what is not a finite number within its bound, naming the line and
the field; demands round up and capacities down."""

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
    [
        ("p,inf,1,1,500,0,", "line 2: field 'cpu_milli' is 'inf'"),
        ("p,1,nan,1,500,0,", "field 'memory_mib' is 'nan'"),
        ("p,1,1,1,500,nan,", "field 'creation_time' is 'nan'"),
        ("p,1,1,1,500,0,1e400", "field 'deletion_time' is '1e400'"),
        ("p,1,1,1e30,500,0,", "field 'num_gpu' is '1e30' (allowed: a number 0..1024)"),
        (" p,1,1,1,500,0,", "the name ' p' has white space"),
    ],
)
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
    [
        ("1 m 100000 4 1 1024", "nodes is '100000' (allowed: an integer 0..10000)"),
        ("1 m 2 1e3 1 1024", "cpus is '1e3'"),
        ("1 m\x1b 2 4 1 1024", "the name 'm\\x1b'"),
        ("1 m 2 4 1 ٣", "ram_kb is '٣'"),
    ],
)
def test_swf_machines_are_bounded(line: str, says: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_swf_machines(line, "m")
    assert says in str(info.value)


def test_swf_machines_give_whole_cores() -> None:
    nodes = parse_swf_machines("0 seth 2 4 1 1048576\n")
    assert [n.name for n in nodes] == ["seth001", "seth002"]
    assert nodes[0].cpu_milli == 4 * MILLI and nodes[0].memory_mib == 1024


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        (
            2,
            "-1e300",
            "submit time (field 2) is '-1e300' (allowed: -1 (unknown), 0 or 0.001..1e+12)",
        ),
        (4, "1e-300", "run time (field 4) is '1e-300' (allowed: -1 (unknown), 0 or 0.001..1e+12)"),
        (5, "-3", "allocated processors (field 5) is '-3' (allowed: -1 (unknown) or 0.."),
        (10, "-0.5", "requested memory (field 10) is '-0.5' (allowed: -1 (unknown) or 0.."),
    ],
)
def test_swf_values_below_their_range_are_refused(field: int, value: str, says: str) -> None:
    fields = RECORD.format(id=1, procs=2, req_kb=1024).split()
    fields[field - 1] = value
    with pytest.raises(TraceError) as info:
        parse_swf([" ".join(fields)], "log")
    assert str(info.value).startswith(f"log line 1: {says}")


def test_the_swf_keys_of_the_standard_are_kept_however_many_others_come_first() -> None:
    header = [f"; Custom{k}: {k}" for k in range(100)] + ["; MaxNodes: 12", "; MaxProcs: 48"]
    trace = parse_swf([*header, RECORD.format(id=1, procs=2, req_kb=1024)], "log")
    keys = dict(trace.header)
    assert keys["MaxNodes"] == "12" and keys["MaxProcs"] == "48"
    assert sum(k.startswith("Custom") for k in keys) == 64  # the others stay bounded


def test_swf_job_numbers_counting_down_are_one_run_and_duplicates_are_still_found() -> None:
    from coshare.sim.traces import _SeenNumbers

    seen = _SeenNumbers()
    for line, ident in enumerate(range(1000, 0, -1), start=1):
        assert seen.line_of(ident) is None
        seen.add(ident, line)
    assert len(seen.starts) == 1  # one run, not a thousand inserts at the front
    assert seen.line_of(1000) == 1 and seen.line_of(1) == 1000 and seen.line_of(500) == 501
    lines = [RECORD.format(id=i, procs=1, req_kb=1024) for i in (3, 2, 1, 2)]
    with pytest.raises(TraceError, match="line 4: job 2 appears again \\(first on line 2\\)"):
        parse_swf(lines, "log")
