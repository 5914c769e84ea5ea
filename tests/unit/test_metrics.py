"""The planner's Prometheus metrics (coshare.cycle.metrics): the series of a cycle, of a failed
cycle and of a refused plan, the textfile for the node exporter, a push gateway that does not
answer, and the configuration keys."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from coshare.cli.cycles import run_once
from coshare.config import ConfigError, MetricsConfig, load_config
from coshare.cycle.metrics import WAITING_REASONS, CycleMetrics, CycleTotals, cycle_figures
from coshare.cycle.run import CycleReport
from coshare.errors import PlanInvariantError, SchedulerUnavailable
from coshare.model import Assignment, Device, Job, Node, Plan, Snapshot, Unplaced
from coshare.policies import make_policy
from coshare.ports import ApplyReport, JobOutcome, Rejected, SourceResult, Waiting
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition text, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def report() -> CycleReport:
    plan = Plan(
        "knapsack",
        (Assignment("1", "n1", ("0",)), Assignment("2", "n1", ("0",))),
        (
            Unplaced("3", "too big", "never_fits"),
            Unplaced("4", "later", "no_room"),
            Unplaced("5", "later", "no_room"),
        ),
        seconds=0.02,
    )
    apply = ApplyReport(
        applied=("1",),
        unchanged=("2",),
        failed=(JobOutcome("6", "no"),),
        withdrawn=(JobOutcome("7", "moved"),),
    )
    return CycleReport(
        plan,
        apply,
        rejected=(Rejected("8", "bad"),),
        read_s=0.5,
        apply_s=0.25,
        waiting=(Waiting("9", "begin time"),),
        verify_s=0.01,
    )


def test_the_figures_of_a_cycle_count_every_reason_code() -> None:
    figures = cycle_figures(report())
    assert (figures["pending"], figures["placed"], figures["refused"]) == (5, 2, 1)
    assert set(figures["waiting"]) == set(WAITING_REASONS)
    assert figures["waiting"]["no_room"] == 2 and figures["waiting"]["never_fits"] == 1
    assert figures["waiting"]["scheduler"] == 1 and figures["waiting"]["reserved"] == 0
    assert figures["edits"] == {
        "written": 1,
        "unchanged": 1,
        "skipped": 0,
        "failed": 1,
        "withdrawn": 1,
    }
    assert figures["seconds"] == {"read": 0.5, "plan": 0.02, "verify": 0.01, "apply": 0.25}


def test_a_cycle_is_written_for_the_node_exporter(tmp_path: Path) -> None:
    metrics = CycleMetrics("slurm", MetricsConfig(textfile_dir=str(tmp_path)), clock=lambda: 1e9)
    for phase, seconds in (("read", 0.5), ("plan", 0.02), ("verify", 0.01), ("apply", 0.25)):
        metrics.phase(phase, seconds)
    metrics.finished(report())
    assert metrics.export() == []
    found = samples((tmp_path / "coshare_slurm.prom").read_text())
    s = (("scheduler", "slurm"),)
    assert found[("coshare_cycle_placed_jobs", s)] == 2
    assert found[("coshare_cycle_pending_jobs", s)] == 5
    assert found[("coshare_cycle_refused_jobs", s)] == 1
    assert found[("coshare_cycle_waiting_jobs", (("reason", "no_room"), *s))] == 2
    assert found[("coshare_cycle_waiting_jobs", (("reason", "unsupported"), *s))] == 0
    assert found[("coshare_cycle_edits", (("result", "failed"), *s))] == 1
    assert found[("coshare_cycle_phase_seconds", (("phase", "verify"), *s))] == 0.01
    assert found[("coshare_cycle_exit_status", s)] == 3  # a write failed
    assert found[("coshare_cycle_plan_refused", s)] == 0
    assert found[("coshare_cycle_timestamp_seconds", s)] == 1e9
    assert list(tmp_path.iterdir()) == [tmp_path / "coshare_slurm.prom"]  # no temporary left


def test_a_refused_plan_exports_its_violations_and_no_job_counts(tmp_path: Path) -> None:
    metrics = CycleMetrics("condor", MetricsConfig(textfile_dir=str(tmp_path)))
    metrics.phase("read", 0.1)
    metrics.phase("plan", 0.1)
    metrics.phase("verify", 0.1)
    metrics.failed(PlanInvariantError("knapsack", ["device n1/0 over memory", "job 3 twice"]))
    metrics.export()
    found = samples((tmp_path / "coshare_condor.prom").read_text())
    s = (("scheduler", "condor"),)
    assert found[("coshare_cycle_plan_refused", s)] == 1
    assert found[("coshare_cycle_plan_violations", s)] == 2
    assert found[("coshare_cycle_exit_status", s)] == 1
    assert ("coshare_cycle_phase_seconds", (("phase", "apply"), *s)) not in found
    assert not [name for name, _ in found if name == "coshare_cycle_placed_jobs"]


def test_an_unreachable_push_gateway_is_a_warning_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = CycleMetrics(
        "slurm", MetricsConfig(pushgateway="http://127.0.0.1:9", push_timeout_s=2)
    )
    metrics.finished(report())
    problems = metrics.export()
    assert len(problems) == 1 and problems[0].startswith(
        "cannot push the metrics to http://127.0.0.1:9:"
    )
    assert problems[0] in caplog.text


def test_an_unwritable_textfile_directory_is_a_warning(tmp_path: Path) -> None:
    metrics = CycleMetrics("slurm", MetricsConfig(textfile_dir=str(tmp_path / "absent")))
    metrics.finished(report())
    (problem,) = metrics.export()
    assert problem.startswith(f"cannot write the metrics file {tmp_path}/absent/coshare_slurm")


def test_nothing_is_exported_unless_configured(tmp_path: Path) -> None:
    metrics = CycleMetrics("slurm", MetricsConfig())
    metrics.finished(report())
    assert not metrics.enabled and metrics.export() == []


class Adapter:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def read(self) -> SourceResult:
        if self.fail:
            raise SchedulerUnavailable("cannot query the collector: down")
        node = Node("n1", 4000, 8192, (Device("0", 8192, 240),))
        return SourceResult(Snapshot((node,), pending=(Job("7", 1024, 60),), now_s=0.0))

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        return ApplyReport(applied=tuple(a.job for a in plan.assignments), dry_run=dry_run)


def test_run_once_exports_a_cycle_and_a_failure_but_not_a_dry_run(tmp_path: Path) -> None:
    config = load_config(environ={"COSHARE_METRICS_TEXTFILE_DIR": str(tmp_path)})
    policy = make_policy("knapsack")
    path = tmp_path / "coshare_fake.prom"
    run_once("fake", config, policy, lambda c: Adapter(), None, dry_run=True)
    assert not path.exists()
    run_once("fake", config, policy, lambda c: Adapter(), None)
    s = (("scheduler", "fake"),)
    assert samples(path.read_text())[("coshare_cycle_placed_jobs", s)] == 1
    with pytest.raises(SchedulerUnavailable):
        run_once("fake", config, policy, lambda c: Adapter(fail=True), None)
    found = samples(path.read_text())
    assert found[("coshare_cycle_exit_status", s)] == 1
    assert ("coshare_cycle_placed_jobs", s) not in found  # a failed cycle planned nothing


class TwoJobs(Adapter):
    def read(self) -> SourceResult:
        node = Node("n1", 4000, 8192, (Device("0", 8192, 240),))
        jobs = (Job("7", 1024, 60), Job("8", 1024, 60))
        return SourceResult(Snapshot((node,), pending=jobs, now_s=0.0))


def test_a_contained_policy_failure_is_counted_logged_and_its_input_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from click.testing import CliRunner
    from coshare.cli.main import cli

    from tests.faulty_policies import CrashesOnJob

    config = load_config(
        environ={
            "COSHARE_METRICS_TEXTFILE_DIR": str(tmp_path),
            "COSHARE_CYCLE_FAILURE_DIR": str(tmp_path / "failures"),
        }
    )
    report = run_once(
        "fake", config, CrashesOnJob(make_policy("knapsack"), "8"), lambda c: TwoJobs(), None
    )
    assert report.plan.placed_jobs == {"7"}
    s = (("scheduler", "fake"),)
    found = samples((tmp_path / "coshare_fake.prom").read_text())
    assert found[("coshare_cycle_contained_failures", s)] == 1
    assert found[("coshare_cycle_waiting_jobs", (("reason", "policy_failed"), *s))] == 1
    (record,) = [r for r in caplog.records if getattr(r, "outcome", "") == "policy_failed"]
    assert record.levelname == "ERROR" and record.jobs == ["8"]  # type: ignore[attr-defined]
    message = record.getMessage()
    assert message.startswith(
        "policy knapsack failed on 8 and planned the rest without it: "
        "IndexError: index 0 is out of bounds"
    )
    (saved,) = (tmp_path / "failures").iterdir()
    assert f"reproduce with: coshare plan {saved} --policy knapsack" in message
    # the file is a snapshot coshare plan reads: the job that failed, on the same cluster
    shown = CliRunner().invoke(
        cli, ["plan", str(saved), "--output", "json"], env={"COSHARE_CONFIG": "/dev/null"}
    )
    assert shown.exit_code == 0, shown.output
    assert '"job":"8"' in shown.stdout


def test_an_unwritable_failure_dir_is_said_and_the_cycle_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.faulty_policies import CrashesOnJob

    (tmp_path / "file").write_text("")
    config = load_config(environ={"COSHARE_CYCLE_FAILURE_DIR": str(tmp_path / "file" / "x")})
    report = run_once(
        "fake", config, CrashesOnJob(make_policy("knapsack"), "8"), lambda c: TwoJobs(), None
    )
    assert report.plan.placed_jobs == {"7"}
    (record,) = [r for r in caplog.records if getattr(r, "outcome", "") == "policy_failed"]
    assert "its snapshot could not be written to " in record.getMessage()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("PUSHGATEWAY", "ftp://x", "metrics.pushgateway: 'ftp://x' is not a push gateway URL"),
        ("PUSHGATEWAY", "http://a b", "is not a push gateway URL"),
        ("PUSH_JOB", "a/b", "metrics.push_job: 'a/b' is not a job label"),
        ("PUSH_TIMEOUT_S", "0", "metrics.push_timeout_s: 0 is out of range"),
    ],
)
def test_bad_metrics_settings_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(environ={f"COSHARE_METRICS_{key}": value})


def test_the_node_metrics_address_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"node\.metrics_address: '0\.0\.0\.0' is not an address"):
        load_config(environ={"COSHARE_NODE_METRICS_ADDRESS": "0.0.0.0"})
    config = load_config(environ={"COSHARE_NODE_METRICS_ADDRESS": "127.0.0.1:9810"})
    assert config.node.metrics_address == "127.0.0.1:9810"


def test_a_long_running_process_exports_its_totals_as_counters(tmp_path: Path) -> None:
    totals = CycleTotals()
    config = MetricsConfig(textfile_dir=str(tmp_path))
    for _ in range(2):
        metrics = CycleMetrics("condor", config, totals=totals)
        metrics.finished(report())
    CycleMetrics("condor", config, totals=totals).failed(SchedulerUnavailable("down"))
    refused = CycleMetrics("condor", config, totals=totals)
    refused.failed(PlanInvariantError("knapsack", ["over memory"]))
    refused.export()
    text = (tmp_path / "coshare_condor.prom").read_text()
    found = samples(text)
    s = (("scheduler", "condor"),)
    assert found[("coshare_trigger_cycles_total", s)] == 4
    assert found[("coshare_trigger_cycle_failures_total", s)] == 1
    assert found[("coshare_trigger_plan_refusals_total", s)] == 1
    assert found[("coshare_trigger_placed_jobs_total", s)] == 4
    assert found[("coshare_trigger_refused_jobs_total", s)] == 2
    assert found[("coshare_trigger_edits_total", (("result", "written"), *s))] == 2
    assert "# TYPE coshare_trigger_cycles_total counter" in text and "_created" not in text
    assert found[("coshare_cycle_plan_refused", s)] == 1  # the last cycle's own series too
