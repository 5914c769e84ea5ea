"""ClassAd text coshare writes: every value quoted, nothing a job or node name can inject.
Evaluated with the real ClassAd library (classad2 works without a pool)."""

from __future__ import annotations

import re
from pathlib import Path

import classad2
import pytest
from coshare.ledger.annotations import KEYS
from hypothesis import given
from hypothesis import strategies as st

from condor_addon import expressions as X
from condor_addon.names import DEVICE_ID_CHARS

WRAPPER = Path(__file__).resolve().parents[2] / "deploy/condor/coshare-job-wrapper"

ROOT = Path(__file__).resolve().parents[2]
SCHEDD_CONF = ROOT / "deploy" / "condor" / "config.d" / "10-coshare-schedd.conf"


def gate() -> str:
    """The Requirements the schedd's transform gives an annotated job."""
    match = re.search(r"SET Requirements (.*)", SCHEDD_CONF.read_text())
    assert match is not None
    return match.group(1)


@given(st.text())
def test_literal_round_trips_any_text(text: str) -> None:
    assert classad2.ExprTree(X.literal(text)).eval() == text.replace("\x00", "")


@pytest.mark.parametrize(
    "name", ['node4 " || true || "', 'a\\" || true || "', "plain", "x\\", '"', "n\n1"]
)
def test_a_hostile_node_name_opens_only_its_own_gate(name: str) -> None:
    job = classad2.ClassAd()
    job["CoshareUserRequirements"] = classad2.ExprTree("true")
    job["Requirements"] = classad2.ExprTree(gate())
    job["CosharePlacedNode"] = classad2.ExprTree(X.node_value(name))
    here, other = classad2.ClassAd(), classad2.ClassAd()
    here["CoshareNodeName"] = name
    other["CoshareNodeName"] = "node1"
    assert here.matches(job)
    assert not other.matches(job)


def test_gate_stays_closed_until_placed_and_keeps_the_users_requirements() -> None:
    job = classad2.ClassAd()
    job["CoshareUserRequirements"] = classad2.ExprTree("TARGET.Memory >= 100")
    job["Requirements"] = classad2.ExprTree(gate())
    machine = classad2.ClassAd()
    machine["CoshareNodeName"] = "node1"
    machine["Memory"] = 4096
    assert not machine.matches(job)  # no CosharePlacedNode yet
    job["CosharePlacedNode"] = classad2.ExprTree(X.node_value("node1"))
    assert machine.matches(job)
    machine["Memory"] = 50
    assert not machine.matches(job)  # the user's own Requirements still apply


def test_devices_and_time_values() -> None:
    assert classad2.ExprTree(X.devices_value(("0", "1"))).eval() == "0,1"
    assert X.time_value(1700000000.9) == "1700000000"


def test_job_clauses_accept_only_job_ids() -> None:
    assert X.job_clause("12.3") == "(ClusterId == 12 && ProcId == 3)"
    for bad in ("12", "1.2 || true", "a.b", "1.2.3", ""):
        with pytest.raises(ValueError, match="not an HTCondor job id"):
            X.job_clause(bad)
    constraint = X.idle_managed(["1.0", "2.5"])
    assert constraint == (
        "JobStatus == 1 && CoshareManaged =?= true && "
        "((ClusterId == 1 && ProcId == 0) || (ClusterId == 2 && ProcId == 5))"
    )
    classad2.ExprTree(constraint)  # parses
    assert X.idle_managed([]).endswith("(false)")


def test_hold_reason_drops_the_job_prefix_and_double_quotes() -> None:
    assert X.hold_reason("job 3.0: CoshareDeviceMemory='x' is bad", "3.0") == (
        "coshare: CoshareDeviceMemory='x' is bad"
    )
    assert X.hold_reason("job 3.0: CoshareDeviceMemory='1\\\" || true' bad", "3.0") == (
        "coshare: CoshareDeviceMemory='1' || true' bad"
    )


def test_transform_recognizes_exactly_the_annotation_keys() -> None:
    text = SCHEDD_CONF.read_text()
    lines = text.splitlines()
    requirement = next(line for line in lines if line.strip().startswith("REQUIREMENTS"))
    named = re.findall(r"(Coshare\w+) isnt undefined", requirement)
    assert sorted(named) == sorted(spec.attribute for spec in KEYS)


def test_a_job_id_ending_in_a_newline_is_refused() -> None:
    # "$" matches before a trailing newline; the check is a whole-string match.
    with pytest.raises(ValueError):
        X.job_clause("1.0\n")


@pytest.mark.parametrize("name", ["n$$(Name)", "n$$([1 + 1])", "$$"])
def test_the_writer_refuses_a_node_name_the_schedd_would_rewrite(name: str) -> None:
    # The schedd replaces $$(...) in every attribute of a job when it starts it.
    for write in (lambda: X.node_value(name), lambda: X.nodes_value(["n1", name])):
        with pytest.raises(ValueError, match=r"cannot write the node name .* holds \$\$"):
            write()
    assert classad2.ExprTree(X.node_value("n$(id)")).eval() == "n$(id)"


@pytest.mark.parametrize("device", ["gpu 0", "0/1", 'a"b', "", "x" * 257])
def test_the_writer_refuses_a_device_id_the_job_wrapper_refuses(device: str) -> None:
    for write in (
        lambda: X.devices_value(["0", device]),
        lambda: X.node_devices_value([["0"], [device]]),
    ):
        with pytest.raises(ValueError, match="cannot write the device id"):
            write()
    assert classad2.ExprTree(X.devices_value(["GPU-1a", "0:1"])).eval() == "GPU-1a,0:1"


def test_device_ids_are_what_the_job_wrapper_passes_on() -> None:
    # The wrapper's ``plain`` keeps a list of ids of these characters (and commas) only.
    match = re.search(r"plain\(\) \{\n.*?\[([^\]]*)\]\*", WRAPPER.read_text(), re.S)
    assert match is not None
    assert match.group(1) == DEVICE_ID_CHARS.replace(":-", ":,-")
