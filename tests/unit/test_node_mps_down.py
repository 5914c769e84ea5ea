"""An MPS control daemon that goes down: the node falls back to the NVML watchdog and says so
in its facts (``gpu_limits=watchdog``) and its metrics (``coshare_node_mps_up 0``)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import FactsError
from coshare.ledger.facts import NodeFacts, format_facts, parse_facts
from coshare.node.metrics import NodeMetrics
from coshare.node.mps import gpu_limit_in_force
from coshare.node.sampler import facts_path

from tests.unit.test_node_facts_sampler import Clock, node, sampler

__all__ = ["node"]  # the fixture, shared with the sampler's tests


class FakeMpsControl:
    """What ``nvidia-cuda-mps-control -d`` leaves in its pipe directory while it runs: the
    ``control`` FIFO (CUDA MPS documentation); stopping it (or a crash followed by the
    directory's cleanup) removes it."""

    def __init__(self, pipe_dir: Path) -> None:
        self.pipe = pipe_dir / "control"
        pipe_dir.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        os.mkfifo(self.pipe)

    def stop(self) -> None:
        self.pipe.unlink()


@pytest.fixture
def mps_node(node: NodeConfig, tmp_path: Path) -> NodeConfig:
    return replace(node, gpu_limits="mps", mps_pipe_dir=str(tmp_path / "mps"))


def test_facts_say_which_gpu_limit_is_in_force_as_the_daemon_goes_down_and_up(
    mps_node: NodeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    control = FakeMpsControl(Path(str(mps_node.mps_pipe_dir)))
    control.start()
    measure = sampler(mps_node, Clock(1_700_000_000.0), Clock(100.0))
    assert measure.round().gpu_limits == "mps"
    control.stop()
    assert measure.round().gpu_limits == "watchdog"
    published = parse_facts(facts_path(mps_node).read_text().strip())
    assert published.gpu_limits == "watchdog"
    assert "gpu_limits=watchdog" in facts_path(mps_node).read_text()
    assert "the NVML watchdog is the backstop" in caplog.text
    control.start()
    assert measure.round().gpu_limits == "mps"


def test_a_node_without_mps_limits_publishes_no_gpu_limit(node: NodeConfig) -> None:
    facts = sampler(node, Clock(1_700_000_000.0), Clock(100.0)).round()
    assert facts.gpu_limits is None
    assert "gpu_limits" not in facts_path(node).read_text()


def test_the_metric_reads_the_daemon_at_each_scrape(mps_node: NodeConfig) -> None:
    control = FakeMpsControl(Path(str(mps_node.mps_pipe_dir)))
    metrics = NodeMetrics(
        gpu_limit=lambda: gpu_limit_in_force(mps_node.gpu_limits, mps_node.mps_pipe_dir)[0]
    )
    value = metrics.registry.get_sample_value
    assert value("coshare_node_mps_up") == 0
    control.start()
    assert value("coshare_node_mps_up") == 1
    control.stop()
    assert value("coshare_node_mps_up") == 0
    without = NodeMetrics(gpu_limit=lambda: gpu_limit_in_force("none", None)[0])
    assert without.registry.get_sample_value("coshare_node_mps_up") is None


def test_an_unknown_gpu_limit_makes_the_line_unusable() -> None:
    line = format_facts(NodeFacts(1_700_000_000.0, gpu_limits="mps"))
    assert parse_facts(line).gpu_limits == "mps"
    with pytest.raises(FactsError, match="gpu_limits 'cuda' is not one of mps, watchdog"):
        parse_facts(line.replace("gpu_limits=mps", "gpu_limits=cuda"))
