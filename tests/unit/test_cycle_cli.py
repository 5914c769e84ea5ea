"""The cycle and show commands both adapters share (coshare.cli.scheduler), driven through a
stand-in adapter: options, output, the cycle lock, notes and exit statuses."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.cli.scheduler import scheduler_group
from coshare.errors import EngineUnavailable, InputError
from coshare.model import Device, Job, Node, Plan, Snapshot
from coshare.ports import ApplyReport, JobOutcome, Rejected, SourceResult, Waiting


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


class StandIn:
    """An adapter over a fixed snapshot that records what it was asked to apply."""

    def __init__(self) -> None:
        self.applied: list[tuple[Plan, bool]] = []

    def read(self) -> SourceResult:
        node = Node("n1", 4000, 8192, (Device("0", 8192, 240, model="phi-5110p"),))
        snapshot = Snapshot((node,), pending=(Job("7", 1024, 60),), now_s=0.0)
        return SourceResult(
            snapshot, (Rejected("8", "job 8: bad"),), (Waiting("9", "later"),), ("check node n2",)
        )

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        self.applied.append((plan, dry_run))
        moved = JobOutcome("5", "placed but not started; moved")
        return ApplyReport(
            applied=tuple(a.job for a in plan.assignments), dry_run=dry_run, withdrawn=(moved,)
        )


def group(tmp_path: Path, adapter: StandIn) -> click.Group:
    return scheduler_group(
        "fake",
        "A stand-in scheduler.",
        lambda config: adapter,
        lambda config: str(tmp_path / "cycle.lock"),
    )


def invoke(g: click.Group, *args: str) -> click.testing.Result:
    return CliRunner().invoke(g, list(args))


def test_cycle_plans_writes_and_says_what_it_did(tmp_path: Path) -> None:
    adapter = StandIn()
    result = invoke(group(tmp_path, adapter), "cycle", "--policy", "exclusive", "-v")
    assert result.exit_code == 0, result.output
    assert adapter.applied[0][0].policy == "exclusive" and adapter.applied[0][1] is False
    assert "cycle (exclusive): 1 pending, 1 placed, wrote 1" in result.stdout
    assert "  refused 8: job 8: bad" in result.stdout
    assert "  withdrew 5: placed but not started; moved" in result.stdout
    assert "Plan by policy exclusive" in result.stdout  # -v: the plan per device
    assert result.stderr == "coshare: warning: check node n2\n"


def test_cycle_as_json_for_tools(tmp_path: Path) -> None:
    result = invoke(group(tmp_path, StandIn()), "cycle", "--dry-run", "--output", "json")
    data = json.loads(result.stdout)
    assert data["plan"]["assignments"] == [{"job": "7", "node": "n1", "device": "0"}]
    assert data["apply"]["dry_run"] is True and data["apply"]["applied"] == ["7"]
    assert data["rejected"] == [{"job": "8", "reason": "job 8: bad"}]
    assert data["waiting"] == [{"job": "9", "reason": "later"}]
    assert data["exit_status"] == 0


def test_a_second_cycle_on_the_same_queue_does_nothing(tmp_path: Path) -> None:
    adapter = StandIn()
    fd = os.open(tmp_path / "cycle.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = invoke(group(tmp_path, adapter), "cycle")
    finally:
        os.close(fd)
    assert result.exit_code == 0 and adapter.applied == []
    assert (
        result.stdout == f"coshare: another cycle holds {tmp_path / 'cycle.lock'}; this one "
        "did nothing\n"
    )


def test_show_lists_devices_and_every_waiting_job(tmp_path: Path) -> None:
    result = invoke(group(tmp_path, StandIn()), "show")
    flat = " ".join(result.stdout.split())
    assert (
        "1 nodes, 1 devices; 0 running, 0 planned not started, 1 pending, 1 refused, "
        "1 waiting" in flat
    )
    assert "n1 0 phi-5110p 0/8192 (+1024) 0/240" in flat
    assert "7 placed on n1/0 by the next cycle" in flat and "9 later" in flat
    assert "8 refused: job 8: bad" in flat and "note: check node n2" in flat
    snapshot = json.loads(invoke(group(tmp_path, StandIn()), "show", "--output", "json").stdout)
    assert [j["id"] for j in snapshot["pending"]] == ["7"]


def test_both_schedulers_offer_the_same_options() -> None:
    def options(name: str, command: str) -> list[list[str]]:
        ctx = click.Context(cli)
        sub = cli.get_command(ctx, name)
        assert isinstance(sub, click.Group)
        found = sub.get_command(ctx, command)
        assert found is not None
        return sorted(p.opts for p in found.params)

    for command in ("cycle", "show"):
        assert options("condor", command) == options("slurm", command)
    cycle = {o for opts in options("slurm", "cycle") for o in opts}
    assert {"--policy", "--threads", "--dry-run", "-v", "--output"} <= cycle


def test_explain_reads_the_adapter_and_explains_one_job(tmp_path: Path) -> None:
    adapter = StandIn()
    g = group(tmp_path, adapter)
    result = invoke(g, "explain", "7")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("job 7: placed\n  placed on n1/0 by this cycle")
    assert "coshare: warning: check node n2" in result.stderr and not adapter.applied
    refused = json.loads(invoke(g, "explain", "8", "--output", "json").stdout)
    assert (refused["state"], refused["reason"]) == ("refused", "job 8: bad")
    held = json.loads(invoke(g, "explain", "9", "--output", "json").stdout)
    assert (held["state"], held["reason"]) == ("held_back", "later")
    unknown = invoke(g, "explain", "10")  # the root command turns it into exit status 2
    assert isinstance(unknown.exception, InputError)
    assert "job 10 is not an annotated job" in str(unknown.exception)


def test_cycle_json_lists_the_jobs_whose_wait_reason_was_noted(tmp_path: Path) -> None:
    class Noting(StandIn):
        def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
            return ApplyReport(dry_run=dry_run, noted=("9",))

    result = invoke(group(tmp_path, Noting()), "cycle", "--output", "json")
    assert json.loads(result.stdout)["apply"]["noted"] == ["9"]
    text = invoke(group(tmp_path, Noting()), "cycle", "--dry-run").stdout
    assert "would note the wait reason of 1 jobs whose reason changed" in text


def test_an_unreachable_engine_stops_the_cycle_before_it_writes_naming_the_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "COSHARE_COORDINATION_DSN", f"host=127.0.0.1 port={port} dbname=coshare user=coshare"
    )
    adapter = StandIn()
    result = invoke(group(tmp_path, adapter), "cycle")
    # The command line's error handler prints it and exits with its status (1).
    error = result.exception
    assert isinstance(error, EngineUnavailable) and error.exit_status == 1
    assert adapter.applied == []
    assert f"coordination engine (PostgreSQL) at 127.0.0.1:{port} is unreachable" in str(error)
    assert "this cycle wrote nothing (the next cycle tries again)" in str(error)
    # A dry run writes nothing and needs no lease: it plans as always.
    dry = invoke(group(tmp_path, adapter), "cycle", "--dry-run")
    assert dry.exit_code == 0 and adapter.applied[0][1] is True
