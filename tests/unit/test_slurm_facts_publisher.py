"""coshare-slurm-facts: what it writes into a node's Extra field and what it refuses (the
real cluster is in tests/integration/slurm/test_slurm_facts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.errors import FactsError, UnsafeValue
from coshare.ledger.facts import NodeFacts, format_facts

from slurm_addon.facts_publisher import main, node_name, publish, read_facts
from slurm_addon.scontrol import node_extra_argv

LINE = format_facts(NodeFacts(1_700_000_000.0, llc_ways=8, llc_ways_free=8))


def test_the_update_is_one_argument_list_of_checked_values() -> None:
    assert node_extra_argv("csl-n1", LINE) == ["update", "NodeName=csl-n1", f"Extra={LINE}"]
    with pytest.raises(UnsafeValue, match="node name"):
        node_extra_argv("n1 State=DOWN", LINE)
    for text in (LINE + " State=DOWN", "rack=12", LINE + "\nupdate NodeName=n2"):
        with pytest.raises(UnsafeValue, match="node facts"):
            node_extra_argv("n1", text)


def test_only_a_facts_line_is_ever_read_for_publishing(tmp_path: Path) -> None:
    path = tmp_path / "facts"
    with pytest.raises(FactsError, match="is the node daemon running"):
        read_facts(path)
    path.write_text(LINE + "\n")
    assert read_facts(path) == LINE
    path.write_text("coshare-facts;v=1\n")
    with pytest.raises(FactsError, match="has no time"):
        read_facts(path)


def test_the_node_name_comes_from_the_flag_slurmd_or_the_host() -> None:
    assert node_name("n7", {"SLURMD_NODENAME": "n1"}) == "n7"
    assert node_name(None, {"SLURMD_NODENAME": "n1"}) == "n1"
    assert node_name(None, {})  # the short host name
    with pytest.raises(FactsError, match="cannot be written"):
        node_name("n1;State=DOWN", {})


class Recorder:
    """Stands in for SlurmClient: records the updates (their argv is built by the real
    builder above); ``error`` is what scontrol would say."""

    def __init__(self, error: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.error = error

    def update_node_extra(self, node: str, facts: str) -> str | None:
        node_extra_argv(node, facts)
        self.calls.append((node, facts))
        return self.error


def test_unchanged_facts_are_not_written_again_and_refusals_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "facts"
    path.write_text(LINE + "\n")
    client = Recorder()
    last = publish(client, "n1", path)  # type: ignore[arg-type]
    assert last == LINE and publish(client, "n1", path, last) == LINE  # type: ignore[arg-type]
    assert client.calls == [("n1", LINE)]
    with pytest.raises(FactsError, match=r"Extra=\.\.\. failed: slurm_update error: Invalid"):
        publish(Recorder("slurm_update error: Invalid user id"), "n1", path)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "abc"])
def test_an_interval_that_is_not_seconds_in_range_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # nan made a busy loop of publishing, inf a traceback from Event.wait.
    with pytest.raises(SystemExit) as ended:
        main(["--node", "n1", f"--interval-s={value}"])
    assert ended.value.code == 2
    assert (
        f"argument --interval-s: {value!r} is not a number of seconds in 0..86400"
        in capsys.readouterr().err
    )


def test_an_interval_above_a_day_is_refused() -> None:
    import argparse

    from slurm_addon.facts_publisher import interval_s

    assert interval_s("0") == 0 and interval_s("86400") == 86400
    with pytest.raises(argparse.ArgumentTypeError, match="'86401' is not a number of seconds"):
        interval_s("86401")
