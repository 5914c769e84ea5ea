"""Both adapters translate trial co-runs the same way: the record is written
with the placement and read back with the job; suspend, resume and requeue go through the
scheduler's own verbs (Slurm's scontrol with a recording runner; HTCondor's schedd with a
recording client), and a refused verb is an error text, never an exception."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from coshare.config import Config, DeviceKind
from coshare.cycle.run import runs_trials
from coshare.cycle.trials import STEP_SLACK_S, StepProbe, probe_step_of
from coshare.errors import CommandFailed, CoshareError
from coshare.ledger.book import Book
from coshare.ledger.trials import TrialRecord
from coshare.model import Assignment, Job, Plan, Trial
from coshare.ports import ProbeResult
from coshare.system.programs import CommandResult

from condor_addon import adapter as condor_adapter
from condor_addon import attributes as A
from condor_addon.adapter import CondorAdapter
from condor_addon.edits import plan_edits as condor_edits
from condor_addon.errors import EditFailed
from condor_addon.view import QueueJob, current, read_job
from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient
from slurm_addon.jobs import SlurmJob
from slurm_addon.nodes import SlurmNode
from slurm_addon.placement import PlacementError, parse_placement, trial_field, with_trial
from slurm_addon.view import build_view

NOW = 1_800_000_000
PLACED = f"coshare-placement;v=1;node=n1;devices=;at={NOW};mem_mib=0;threads=0"
RECORD = TrialRecord("suspended", NOW, ("1",), 0.6, "over_limit")


# -- Slurm ---------------------------------------------------------------------------------


def test_the_trial_field_rides_in_the_placement_before_a_kill_reason() -> None:
    text = with_trial(PLACED, "placed:1:-:1:-")
    assert text == PLACED + ";trial=placed:1:-:1:-"
    assert trial_field(text) == "placed:1:-:1:-"
    again = with_trial(text + ";killed=over its memory, 2 GiB", "kept:2:0.3:1:within_limit")
    assert again == PLACED + ";trial=kept:2:0.3:1:within_limit;killed=over its memory, 2 GiB"
    assert trial_field(again) == "kept:2:0.3:1:within_limit"
    assert parse_placement(again) == parse_placement(PLACED)  # readers ignore the field
    assert trial_field(PLACED) is None and trial_field("coshare-waiting: x") is None
    with pytest.raises(PlacementError, match="no coshare placement"):
        with_trial("an operator's note", "placed:1:-:1:-")
    with pytest.raises(PlacementError, match="cannot write"):
        with_trial(PLACED, "placed:1:-:1:-;node=n2")


def test_a_slurm_job_placed_for_a_trial_carries_its_record() -> None:
    from slurm_addon.edits import plan_edits

    pending = SlurmJob("2", "pending", "PENDING", held=True, comment="coshare: program=stream")
    nodes = [SlurmNode("n1", "idle", cpus=4, memory_mib=8192)]
    view = build_view(nodes, [pending], device_kinds={}, now_s=NOW)
    plan = Plan("membw", assignments=(Assignment("2", "n1"),), trials=(Trial("2", "n1", ("1",)),))
    (write,) = plan_edits(view, plan, (), {"2": pending}, now_s=NOW).writes
    assert trial_field(write.admin_comment) == f"placed:{NOW}:-:1:-"


class Scontrol:
    """Records every command; answers squeue's AdminComment read and refuses ``refuse``."""

    def __init__(self, admin_comment: str = PLACED, refuse: str = "") -> None:
        self.calls: list[tuple[str, ...]] = []
        self.admin_comment = admin_comment
        self.refuse = refuse

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = True,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        self.calls.append(tuple(argv))
        if argv[0] == "squeue":
            return CommandResult(tuple(argv), 0, self.admin_comment + "\n", "")
        if self.refuse and argv[1] == self.refuse:
            return CommandResult(tuple(argv), 1, "", "Job is not suspended")
        return CommandResult(tuple(argv), 0, "", "")


def slurm(runner: Scontrol, jobs: Sequence[SlurmJob] = ()) -> SlurmAdapter:
    config = Config()
    adapter = SlurmAdapter(
        SlurmClient(config.slurm, runner=runner, environ={}), config, clock=lambda: float(NOW)
    )
    if jobs:
        adapter.view = build_view(
            [SlurmNode("n1", "mixed", cpus=4, memory_mib=8192)],
            jobs,
            device_kinds={"k": DeviceKind(1, 1)},
            now_s=NOW,
        )
    return adapter


def test_slurm_suspends_resumes_and_requeues_through_scontrol() -> None:
    runner = Scontrol()
    adapter = slurm(runner)
    assert runs_trials(adapter) and adapter.node_job_id("7") == "7"
    assert adapter.suspend("7") is None and adapter.resume("7") is None
    assert adapter.requeue("7", "suspended for 3601 s; requeued") is None
    assert runner.calls == [
        ("scontrol", "suspend", "7"),
        ("scontrol", "resume", "7"),
        ("scontrol", "requeuehold", "7"),
        (
            "scontrol",
            "update",
            "JobId=7",
            "AdminComment=coshare-waiting: trial: suspended for 3601 s; requeued",
        ),
    ]


def test_slurm_writes_the_record_into_the_placement_it_reads_back() -> None:
    runner = Scontrol(PLACED + ";trial=placed:1:-:1:-")
    assert slurm(runner).write_trial("7", RECORD) is None
    assert runner.calls[-1] == (
        "scontrol",
        "update",
        "JobId=7",
        f"AdminComment={PLACED};trial=suspended:{NOW}:0.6:1:over_limit",
    )


def test_slurm_refusals_are_error_texts() -> None:
    assert slurm(Scontrol(refuse="resume")).resume("7") == "Job is not suspended"
    assert "no coshare placement" in (slurm(Scontrol("")).write_trial("7", RECORD) or "")
    runner = Scontrol()
    assert slurm(runner).suspend("7;x") == "job id '7;x'"  # refused before any command
    assert runner.calls == []


def test_slurm_reads_trial_jobs_with_the_schedulers_state() -> None:
    comment = "coshare: program=stream"
    text = PLACED + f";trial=suspended:{NOW}:0.6:1:over_limit"
    jobs = [
        SlurmJob(
            "2",
            "active",
            "SUSPENDED",
            comment=comment,
            admin_comment=text,
            nodes=("n1",),
            start_time_s=NOW - 100,
        ),
        SlurmJob(
            "3",
            "active",
            "RUNNING",
            comment=comment,
            nodes=("n1",),
            admin_comment=PLACED + ";trial=bogus",
        ),
        SlurmJob("4", "active", "RUNNING", comment="", admin_comment=text, nodes=("n1",)),
    ]
    (found,) = slurm(Scontrol(), jobs).trial_jobs()  # 3's record is unreadable, 4 not ours
    assert (found.job, found.node, found.program, found.phase, found.started_s) == (
        "2",
        "n1",
        "stream",
        "suspended",
        NOW - 100,
    )
    assert found.record == RECORD


# -- HTCondor ------------------------------------------------------------------------------


def test_a_condor_job_placed_for_a_trial_gets_its_record_before_the_gate() -> None:
    idle = QueueJob(id="2.0", status=A.IDLE, annotations={"CoshareProgram": "stream"})
    plan = Plan(
        "membw", assignments=(Assignment("2.0", "n1"),), trials=(Trial("2.0", "n1", ("1.0",)),)
    )
    e = condor_edits(
        plan,
        Book(pending=(Job("2.0", 0, 0, kind="cpu", device_count=0),)),
        (),
        {"2.0": current(idle, idle)},
        now_s=NOW,
    )
    assert e.trials == ((f"placed:{NOW}:-:1.0:-", ("2.0",)),)


class Schedd:
    """Stands in for the CondorClient: records edits and actions; the job's JobStatus
    follows Suspend and Continue only after ``lag`` reads (the starter acts later)."""

    def __init__(self, refuse: str = "", lag: int = 0, never: bool = False) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.refuse = refuse
        self.status, self.next_status, self.lag, self.never = A.RUNNING, A.RUNNING, lag, never

    def job_ads(self, constraint: str, projection: Sequence[str]) -> list[dict[str, object]]:
        if self.lag > 0:
            self.lag -= 1
        elif not self.never:
            self.status = self.next_status
        return [{"JobStatus": self.status}]

    def edit_ids(self, ids: Sequence[str], attribute: str, value: str) -> int:
        self.calls.append(("edit", ",".join(ids), attribute, value))
        return 1

    def act_where(self, action: str, constraint: str) -> None:
        if action == self.refuse:
            raise EditFailed(action.lower(), "the jobs of a constraint", "no such job")
        self.calls.append(("act", action, constraint))
        self.next_status = {"Suspend": A.SUSPENDED, "Continue": A.RUNNING}.get(action, A.IDLE)


def condor(schedd: Schedd) -> CondorAdapter:
    adapter = CondorAdapter(schedd, Config(), clock=lambda: float(NOW))  # type: ignore[arg-type]
    adapter.sleep = lambda s: None
    return adapter


def test_condor_suspend_is_done_once_the_schedd_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    schedd = Schedd(lag=3)
    assert condor(schedd).suspend("7.0") is None and schedd.status == A.SUSPENDED
    assert condor(schedd).resume("7.0") is None and schedd.status == A.RUNNING
    monkeypatch.setattr(condor_adapter, "CONFIRM_TIMEOUT_S", 0.0)
    assert (
        condor(Schedd(never=True)).suspend("7.0")
        == "asked, but JobStatus is running after 0 s; not suspended yet"
    )


def test_condor_suspends_continues_and_requeues_through_the_schedd() -> None:
    schedd = Schedd()
    adapter = condor(schedd)
    assert runs_trials(adapter)
    assert adapter.suspend("7.0") is None and adapter.resume("7.0") is None
    assert adapter.requeue("7.0", "suspended too long") is None
    assert adapter.write_trial("7.0", RECORD) is None
    clause = "(ClusterId == 7 && ProcId == 0)"
    assert schedd.calls == [
        ("act", "Suspend", clause),
        ("act", "Continue", clause),
        ("edit", "7.0", "CoshareWaitReason", '"trial: suspended too long"'),
        ("edit", "7.0", "CoshareTrial", "undefined"),
        ("edit", "7.0", "CosharePlacedNode", "undefined"),
        ("act", "Continue", clause),
        ("act", "VacateFast", clause),
        ("edit", "7.0", "CoshareTrial", f'"suspended:{NOW}:0.6:1:over_limit"'),
    ]
    assert "no such job" in (condor(Schedd(refuse="Continue")).resume("7.0") or "")


def test_condor_reads_trial_jobs_with_the_schedds_state() -> None:
    ad: dict[str, Any] = {
        "ClusterId": 2,
        "ProcId": 0,
        "JobStatus": A.SUSPENDED,
        "CosharePlacedNode": "n1",
        "CoshareProgram": "stream",
        "CoshareTrial": f"suspended:{NOW}:0.6:1:over_limit",
        "JobCurrentStartDate": NOW - 100,
    }
    adapter = condor(Schedd())
    job = read_job(ad)
    assert job is not None
    bad = replace(job, id="3.0", trial="nonsense")
    adapter.jobs = {"2.0": job, "3.0": bad}
    (found,) = adapter.trial_jobs()
    assert (found.job, found.node, found.program, found.phase, found.started_s) == (
        "2.0",
        "n1",
        "stream",
        "suspended",
        NOW - 100,
    )
    assert found.record == RECORD
    # The node daemon knows it by its GlobalJobId in id characters (the job wrapper's).
    adapter.jobs["2.0"] = replace(job, global_id="submit#2.0#1800000000")
    assert adapter.node_job_id("2.0") == "submit_2.0_1800000000"
    assert adapter.node_job_id("9.0") == "9.0"


def test_both_adapters_offer_the_same_trial_verbs() -> None:
    verbs = ("trial_jobs", "write_trial", "suspend", "resume", "requeue", "node_job_id")
    for adapter in (SlurmAdapter, CondorAdapter):
        assert all(callable(getattr(adapter, v)) for v in verbs)
    assert issubclass(EditFailed, CoshareError)


class Srun(Scontrol):
    """Scontrol's recorder that also answers srun with ``stdout`` (``None``: srun hangs)."""

    def __init__(self, stdout: str | None, stderr: str = "", returncode: int = 0) -> None:
        super().__init__()
        self.stdout, self.stderr, self.returncode = stdout, stderr, returncode

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = True,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        if argv[0] != "srun":
            return super().__call__(argv, timeout_s=timeout_s, check=check, env=env)
        self.calls.append((*argv, f"timeout={timeout_s:g}"))
        if self.stdout is None:
            raise CommandFailed(
                list(argv),
                None,
                "",
                "srun: job step creation temporarily disabled, retrying\n(timed out)",
            )
        return CommandResult(tuple(argv), self.returncode, self.stdout, self.stderr)


def step_probe(adapter: SlurmAdapter) -> StepProbe:
    return StepProbe(
        adapter.probe_step,
        "/opt/coshare/bin/coshare",
        "/run/coshare/control.sock",
        20.0,
        adapter.node_job_id,
    )


def test_slurm_probes_a_trial_on_its_node_as_a_step_of_the_trial_job() -> None:
    runner = Srun("srun: some notice\nOK job=8 share=0.2100 available=0.7900 gbps=3.2\n")
    adapter = slurm(runner)
    assert probe_step_of(adapter) is adapter
    assert step_probe(adapter).measure("n1", "8", ["5", "6"], "spin") == ProbeResult(0.21)
    assert runner.calls == [
        (
            "srun",
            "--jobid=8",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            "--nodelist=n1",
            "--quiet",
            "--",
            "/opt/coshare/bin/coshare",
            "node",
            "trial",
            "--socket",
            "/run/coshare/control.sock",
            "--timeout-s",
            "20",
            "--job",
            "8",
            "--partners",
            "5,6",
            f"timeout={20 + STEP_SLACK_S:g}",
        )
    ]


@pytest.mark.parametrize(
    ("runner", "says"),
    [
        (
            Srun(
                "ERR not_allowed job 8: TRIAL is for operators (node.operator_uids), "
                "not uid 1000\n",
                returncode=1,
            ),
            "ERR not_allowed job 8: TRIAL is for operators",
        ),
        (
            Srun(
                "",
                "srun: error: Unable to create step for job 8: Job/step already completing",
                returncode=1,
            ),
            "the probe step of job 8 on n1: srun: error: Unable to create step",
        ),
        (Srun("", "", returncode=0), "the probe step of job 8 on n1: exit status 0, no answer"),
        (Srun(None), "the probe step of job 8 on n1: (timed out)"),
    ],
    ids=["daemon-refused", "srun-failed", "no-answer", "timed-out"],
)
def test_a_probe_step_that_fails_says_why(runner: Srun, says: str) -> None:
    found = step_probe(slurm(runner)).measure("n1", "8", ["5"], None)
    assert found.share is None and found.error.startswith(says), found


def test_a_probe_step_is_never_run_with_ids_that_are_not_slurms() -> None:
    runner = Srun("OK job=8 share=0.1\n")
    found = step_probe(slurm(runner)).measure("n1;x", "8", ["5"], None)
    assert found.share is None and "not a Slurm job id and node name" in found.error
    assert runner.calls == []


def test_htcondor_offers_no_probe_step_and_says_why() -> None:
    assert probe_step_of(CondorAdapter.__new__(CondorAdapter)) is None
    assert "condor_ssh_to_job" in CondorAdapter.probe_step_unsupported_reason


def test_a_cycle_asked_to_probe_through_htcondor_stops_its_trials_with_the_reason() -> None:
    from coshare.cli.cycles import step_trials
    from coshare.config import build
    from coshare.errors import SchedulerError

    config = build(
        Config, {"policy": {"name": "membw", "membw": {"trials": True, "probe_via": "step"}}}
    )
    adapter = CondorAdapter.__new__(CondorAdapter)
    with pytest.raises(
        SchedulerError,
        match=r"probe_via step: this scheduler's adapter runs "
        r"no command on a job's node \(HTCondor runs",
    ):
        step_trials(config, adapter, None, dry_run=False)  # type: ignore[arg-type]


def test_probe_via_facts_is_htcondors_and_slurm_refuses_it_with_the_reason() -> None:
    from coshare.cli.cycles import step_trials
    from coshare.config import build
    from coshare.errors import SchedulerError

    assert CondorAdapter.probes_via_facts and not SlurmAdapter.probes_via_facts
    config = build(
        Config, {"policy": {"name": "membw", "membw": {"trials": True, "probe_via": "facts"}}}
    )
    assert config.policy.membw.probe_via == "facts"
    with pytest.raises(
        SchedulerError,
        match=r"probe_via facts: this scheduler's node daemons "
        r"read no trial requests \(node.trial_requests "
        r"reads HTCondor's schedds only",
    ):
        step_trials(
            config,
            SlurmAdapter.__new__(SlurmAdapter),
            None,  # type: ignore[arg-type]
            dry_run=False,
        )
