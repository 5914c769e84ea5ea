"""Trial co-runs of the ``membw`` policy: every transition of the state
machine (:mod:`coshare.ledger.trials`), its records, the cycle's driver
(:mod:`coshare.cycle.trials`)
against an in-memory scheduler that keeps the records as the real ones do, and the bad-input
paths (unreadable records, probes that fail, verbs the scheduler refuses)."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from coshare.cycle.trials import (
    FactsProbe,
    InjectedProbe,
    SocketProbe,
    parse_trial_reply,
    read_record_file,
    run_trials,
    write_record_file,
)
from coshare.errors import ConfigError
from coshare.ledger.trials import (
    STATES,
    TrialJob,
    TrialLimits,
    TrialRecord,
    TrialRecordError,
    advance,
    awaiting,
    decide,
    format_trial,
    measured_programs,
    merge_programs,
    parse_trial,
)
from coshare.model import MILLI, Job, Node, RunningJob, Snapshot, TrialResult
from coshare.policies.membw import MembwPolicy
from coshare.ports import ProbeResult
from hypothesis import given, settings
from hypothesis import strategies as st

LIMITS = TrialLimits(max_share=0.9, init_s=60, max_suspend_s=3600)
T0 = 1_700_000_000


def rec(
    state: str = "placed",
    at: int = T0,
    partners: tuple[str, ...] = ("1",),
    share: float | None = None,
    why: str | None = None,
) -> TrialRecord:
    return TrialRecord(state, at, partners, share, why)  # type: ignore[arg-type]


def tjob(
    record: TrialRecord, phase: str = "running", started: float | None = T0, job: str = "2"
) -> TrialJob:
    return TrialJob(job, "n1", "stream", phase, started, record)  # type: ignore[arg-type]


# -- records ---------------------------------------------------------------------------------


def test_a_record_reads_back_as_it_was_written() -> None:
    for record in (
        rec(),
        rec("suspended", share=0.62, partners=("12", "13"), why="over_limit"),
        rec("kept", share=0.0, why="within_limit"),
        rec("kept", share=1.0),
        rec("resumed", partners=("7.0",), why="partners_ended"),
    ):
        text = format_trial(record)
        assert parse_trial("2", text) == record
    assert (
        format_trial(rec("suspended", share=0.62, partners=("12", "13"), why="over_limit"))
        == f"suspended:{T0}:0.62:12+13:over_limit"
    )


@pytest.mark.parametrize(
    ("text", "field_name"),
    [
        ("", "(text)"),
        ("placed", "(text)"),
        (f"frozen:{T0}:-:1:-", "state"),
        (f"kept:{T0}:1.5:1:-", "share"),
        (f"kept:{T0}:nan:1:-", "(text)"),
        (f"kept:{T0}:0.5:1:because", "why"),
        (f"kept:{T0}:0.5:1;x=2:-", "(text)"),
        (f"kept:{T0}:0.5:1++2:-", "partners"),
        ("kept:-5:0.5:1:-", "(text)"),
    ],
)
def test_an_unreadable_record_is_refused_naming_the_job_and_the_part(
    text: str, field_name: str
) -> None:
    with pytest.raises(TrialRecordError) as caught:
        parse_trial("42", text)
    assert caught.value.job == "42" and caught.value.field == field_name
    assert str(caught.value).startswith("job 42: trial record ")


@given(st.text(max_size=60))
@settings(max_examples=50)
def test_any_text_reads_or_is_refused_and_what_reads_writes_back_the_same(text: str) -> None:
    try:
        record = parse_trial("1", text)
    except TrialRecordError as exc:
        assert exc.job == "1" and exc.field in ("(text)", "state", "share", "partners", "why")
        return
    assert parse_trial("1", format_trial(record)) == record


def test_what_cannot_be_written_is_refused_before_it_is() -> None:
    with pytest.raises(ValueError, match="partner job id"):
        format_trial(rec(partners=("1;x",)))
    with pytest.raises(ValueError, match="outside"):
        format_trial(rec(share=1.2))


# -- every transition ------------------------------------------------------------------------


def test_placed_waits_while_pending_and_through_its_initialization() -> None:
    assert advance(tjob(rec(), "pending", None), {"1"}, T0 + 999, LIMITS).action == "wait"
    assert advance(tjob(rec()), {"1"}, T0 + 59, LIMITS).action == "wait"


def test_placed_is_measured_once_past_init_s() -> None:
    step = advance(tjob(rec()), {"1"}, T0 + 60, LIMITS)
    assert step.action == "probe"
    assert step.record == rec("measuring", at=T0 + 60)
    assert "policy.membw.init_s 60" in step.note


def test_a_trial_whose_partners_ended_first_is_kept_unmeasured() -> None:
    for state in ("placed", "measuring"):
        step = advance(tjob(rec(state)), set(), T0 + 10, LIMITS)
        assert step.action == "write"
        assert step.record == rec("kept", at=T0 + 10, why="partners_ended")
        assert "runs alone, unmeasured" in step.note


def test_measuring_found_again_is_probed_again() -> None:
    # A planner killed after writing "measuring": the next cycle probes again, record as is.
    step = advance(tjob(rec("measuring")), {"1"}, T0 + 5, LIMITS)
    assert (step.action, step.record) == ("probe", None)
    assert "did not finish" in step.note


def test_a_job_suspended_before_its_record_said_so_is_recorded() -> None:
    # A planner killed between `scontrol suspend` and the record's write.
    for state in ("placed", "measuring"):
        step = advance(tjob(rec(state), "suspended"), {"1"}, T0 + 5, LIMITS)
        assert step.action == "write"
        assert step.record == rec("suspended", at=T0 + 5, why="over_limit")


def test_within_the_limit_the_pair_is_kept_with_its_measurement() -> None:
    step = decide(tjob(rec("measuring")), 0.4, "", 0.5, T0, LIMITS)
    assert step.action == "write"
    assert step.record == rec("kept", share=0.4, why="within_limit")
    assert "0.90 <= policy.membw.max_share 0.9; kept" in step.note


def test_over_the_limit_the_new_job_is_suspended() -> None:
    step = decide(tjob(rec("measuring")), 0.5, "", 0.5, T0, LIMITS)
    assert step.action == "suspend"
    assert step.record == rec("suspended", share=0.5, why="over_limit")
    assert "1.00 > policy.membw.max_share 0.9; suspended" in step.note


@pytest.mark.parametrize("share", [None, math.nan, math.inf, -0.1, 1.5])
def test_a_failed_or_absurd_probe_leaves_the_job_unmeasured_and_suspended(
    share: float | None,
) -> None:
    step = decide(tjob(rec("measuring")), share, "timed out", 0.0, T0, LIMITS)
    assert step.action == "suspend"
    assert step.record == rec("suspended", why="probe_failed")
    assert "unmeasured, treated as bandwidth-bound" in step.note


def test_suspended_waits_for_its_partners_then_resumes() -> None:
    held = tjob(rec("suspended", share=0.5, why="over_limit"), "suspended")
    assert advance(held, {"1"}, T0 + 100, LIMITS).action == "wait"
    step = advance(held, set(), T0 + 100, LIMITS)
    assert step.action == "resume"
    assert step.record == rec("resumed", at=T0 + 100, share=0.5, why="partners_ended")


def test_suspended_too_long_is_requeued_with_the_reason() -> None:
    held = tjob(rec("suspended", share=0.5, why="over_limit"), "suspended")
    assert advance(held, {"1"}, T0 + 3600, LIMITS).action == "wait"
    step = advance(held, {"1"}, T0 + 3601, LIMITS)
    assert step.action == "requeue"
    assert step.record is not None and step.record.state == "requeued"
    assert "longer than policy.membw.max_suspend_s 3600" in step.reason
    assert "suspended for 3601 s" in step.reason


def test_suspended_but_running_is_recorded_as_resumed() -> None:
    # A planner killed between `scontrol resume` and the write, or an operator's resume.
    step = advance(tjob(rec("suspended", share=0.5)), {"1"}, T0 + 5, LIMITS)
    assert step.action == "write" and step.record is not None
    assert step.record.state == "resumed" and step.record.why == "resumed_by_hand"


def test_final_states_and_ended_jobs_take_no_step() -> None:
    for state in ("kept", "resumed", "requeued"):
        assert advance(tjob(rec(state)), set(), T0 + 1e6, LIMITS).action == "none"
    for state in STATES:
        assert advance(tjob(rec(state), "ended"), set(), T0 + 1e6, LIMITS).action == "none"


@given(
    st.sampled_from(STATES),
    st.sampled_from(["pending", "running", "suspended", "ended"]),
    st.booleans(),
    st.floats(0, 10_000),
)
@settings(max_examples=100)
def test_no_step_ever_leaves_a_job_frozen_or_unaccounted(
    state: str, phase: str, partner: bool, later: float
) -> None:
    step = advance(tjob(rec(state), phase), {"1"} if partner else set(), T0 + later, LIMITS)
    # The only actions are the scheduler's (suspend comes from decide) and writes: nothing
    # here freezes; a probe is always preceded or followed by a decision.
    assert step.action in ("wait", "probe", "resume", "requeue", "write", "none")
    if step.record is not None:
        assert parse_trial(step.job, format_trial(step.record)) == step.record


def test_measured_programs_take_each_programs_latest_share() -> None:
    jobs = [
        tjob(rec("kept", at=T0, share=0.3)),
        tjob(rec("kept", at=T0 + 5, share=0.4)),
        tjob(rec("placed")),
        replace(tjob(rec("kept", share=0.9)), program=None),
    ]
    assert measured_programs(jobs) == {"stream": 0.4}
    assert merge_programs({"stream": 0.2}, {"stream": 0.4, "spin": 0.01}) == {
        "stream": 0.2,
        "spin": 0.01,
    }


# -- the cycle's driver against an in-memory scheduler ---------------------------------------


@dataclass
class Queue:
    """A faithful in-memory scheduler for the TrialControl port: records kept with the jobs,
    suspend only of a running job, resume only of a suspended one, requeue to pending with
    the record dropped; ``refuse`` makes a verb fail once."""

    jobs: dict[str, TrialJob] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)
    log: list[str] = field(default_factory=list)

    def trial_jobs(self) -> Sequence[TrialJob]:
        return list(self.jobs.values())

    def _fail(self, verb: str) -> str | None:
        if verb in self.refuse:
            self.refuse.discard(verb)
            return f"{verb} refused"
        return None

    def write_trial(self, job: str, record: TrialRecord) -> str | None:
        if (error := self._fail("write")) is not None:
            return error
        self.jobs[job] = replace(self.jobs[job], record=record)
        self.log.append(f"write {job} {record.state}")
        return None

    def suspend(self, job: str) -> str | None:
        if (error := self._fail("suspend")) is not None:
            return error
        assert self.jobs[job].phase == "running"
        self.jobs[job] = replace(self.jobs[job], phase="suspended")
        self.log.append(f"suspend {job}")
        return None

    def resume(self, job: str) -> str | None:
        assert self.jobs[job].phase == "suspended"
        self.jobs[job] = replace(self.jobs[job], phase="running")
        self.log.append(f"resume {job}")
        return None

    def requeue(self, job: str, reason: str) -> str | None:
        del self.jobs[job]
        self.log.append(f"requeue {job}: {reason}")
        return None


@dataclass
class Probe:
    shares: list[float | None]
    asked: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        self.asked.append((node, job, tuple(partners)))
        share = self.shares.pop(0)
        if share is None:
            raise TimeoutError("no answer within policy.membw.probe_timeout_s")
        return ProbeResult(share)


def snapshot(*running: str) -> Snapshot:
    n1 = Node("n1", 4 * MILLI, 8192)
    return Snapshot((n1,), tuple(RunningJob(r, "n1", program="spin") for r in running), ())


def test_a_pair_over_the_limit_is_suspended_and_resumed_when_the_partner_ends() -> None:
    queue = Queue({"2": tjob(rec())})
    probe = Probe([0.6])
    programs = {"spin": 0.5}
    # Cycle 1: still initializing.
    assert run_trials(queue, probe, snapshot("1", "2"), programs, LIMITS, T0 + 30).steps == []
    # Cycle 2: measured beside job 1 (0.6 + 0.5 > 0.9): suspended through the scheduler.
    done = run_trials(queue, probe, snapshot("1", "2"), programs, LIMITS, T0 + 61)
    assert queue.log == ["write 2 measuring", "suspend 2", "write 2 suspended"]
    assert probe.asked == [("n1", "2", ("1",))]
    assert done.measured == {"stream": 0.6}
    assert any("1.10 > policy.membw.max_share 0.9" in n for n in done.notes)
    # Cycle 3: job 1 still runs: nothing. Cycle 4: it ended: job 2 resumes.
    assert run_trials(queue, probe, snapshot("1", "2"), programs, LIMITS, T0 + 90).steps == []
    done = run_trials(queue, probe, snapshot("2"), programs, LIMITS, T0 + 120)
    assert queue.log[-2:] == ["resume 2", "write 2 resumed"]
    assert queue.jobs["2"].phase == "running" and queue.jobs["2"].record.state == "resumed"
    assert done.measured == {"stream": 0.6}


def test_a_pair_within_the_limit_is_kept() -> None:
    queue = Queue({"2": tjob(rec())})
    done = run_trials(queue, Probe([0.3]), snapshot("1", "2"), {"spin": 0.5}, LIMITS, T0 + 61)
    assert queue.log == ["write 2 measuring", "write 2 kept"]
    assert queue.jobs["2"].phase == "running" and done.measured == {"stream": 0.3}


def test_a_probe_that_fails_marks_the_job_unmeasured_and_the_cycle_says_so() -> None:
    queue = Queue({"2": tjob(rec())})
    done = run_trials(queue, Probe([None]), snapshot("1", "2"), {"spin": 0.0}, LIMITS, T0 + 61)
    assert queue.log == ["write 2 measuring", "suspend 2", "write 2 suspended"]
    assert queue.jobs["2"].record.why == "probe_failed"
    assert any("TimeoutError" in n and "unmeasured" in n for n in done.notes)
    assert done.measured == {}  # nothing recorded for its program


def test_a_refused_verb_is_said_and_done_by_the_next_cycle() -> None:
    queue = Queue({"2": tjob(rec())}, refuse={"suspend"})
    probe = Probe([0.6, 0.6])
    done = run_trials(queue, probe, snapshot("1", "2"), {"spin": 0.5}, LIMITS, T0 + 61)
    assert any("could not suspend it (suspend refused)" in n for n in done.notes)
    assert queue.jobs["2"].phase == "running" and queue.jobs["2"].record.state == "measuring"
    run_trials(queue, probe, snapshot("1", "2"), {"spin": 0.5}, LIMITS, T0 + 70)
    assert queue.jobs["2"].phase == "suspended"
    assert queue.jobs["2"].record.state == "suspended"


def test_a_record_that_cannot_be_written_stops_that_job_not_the_others() -> None:
    queue = Queue({"2": tjob(rec()), "3": tjob(rec(), job="3")}, refuse={"write"})
    probe = Probe([0.3])
    done = run_trials(queue, probe, snapshot("1", "2", "3"), {"spin": 0.5}, LIMITS, T0 + 61)
    assert any("job 2: its trial record (measuring) was not written" in n for n in done.notes)
    assert probe.asked == [("n1", "3", ("1",))]  # job 2 is not probed without its record
    assert queue.jobs["3"].record.state == "kept"


def test_a_job_suspended_too_long_is_requeued() -> None:
    queue = Queue({"2": tjob(rec("suspended", share=0.6), "suspended")})
    done = run_trials(queue, Probe([]), snapshot("1", "2"), {}, LIMITS, T0 + 3601)
    assert queue.log[0].startswith("requeue 2: suspended for 3601 s")
    assert "2" not in queue.jobs and any("policy.membw.max_suspend_s" in n for n in done.notes)


def test_a_dry_run_probes_suspends_and_writes_nothing() -> None:
    queue = Queue({"2": tjob(rec())})
    probe = Probe([0.6])
    done = run_trials(queue, probe, snapshot("1", "2"), {}, LIMITS, T0 + 61, dry_run=True)
    assert queue.log == [] and probe.asked == []
    assert done.notes and done.notes[0].startswith("(dry run)")


def test_the_next_job_of_a_measured_program_needs_no_trial() -> None:
    n1 = Node("n1", 4 * MILLI, 8192)
    pending = (Job("3", kind="cpu", device_count=0, cpu_milli=MILLI, program="stream"),)
    old = (RunningJob("1", "n1", program="spin"),)
    unmeasured = MembwPolicy(programs={"spin": 0.5}, trials=True).plan(
        Snapshot((n1,), old, pending)
    )
    assert [t.job for t in unmeasured.trials] == ["3"]
    measured = MembwPolicy(
        programs=merge_programs({"spin": 0.5}, {"stream": 0.6}), trials=True
    ).plan(Snapshot((n1,), old, pending))
    assert measured.trials == () and measured.assignments == ()  # 1.1 > 0.9: it waits


# -- measurements per program, the injected probe, the node's answer --------------------------


def test_the_record_file_keeps_measurements_and_refuses_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "membw.json"
    assert read_record_file(str(path)) == {}
    assert write_record_file(str(path), {"stream": 0.6})
    assert not write_record_file(str(path), {"stream": 0.6})  # nothing new: not rewritten
    write_record_file(str(path), {"spin": 0.02})
    assert read_record_file(str(path)) == {"stream": 0.6, "spin": 0.02}
    for bad, words in (
        ({"programs": {"x": 1.5}}, "programs.x = 1.5 is not a share in [0, 1]"),
        ({"programs": {"a b": 0.1}}, "is not a program name"),
        ({"programs": {"x": True}}, "is not a share"),
        ({"other": 1}, 'no "programs" object'),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=r"policy\.membw\.record_file") as caught:
            read_record_file(str(path))
        assert words in str(caught.value)
    path.write_text('{"programs": {"x": NaN}}')
    with pytest.raises(ConfigError, match="not a share"):
        read_record_file(str(path))


def test_injected_measurements_come_through_the_probes_interface(tmp_path: Path) -> None:
    path = tmp_path / "inject.json"
    path.write_text(json.dumps({"jobs": {"7": 0.1, "8": None}, "programs": {"stream": 0.6}}))
    probe = InjectedProbe(str(path))
    assert probe.measure("n1", "7", ["1"], "stream") == ProbeResult(0.1)  # the job's wins
    assert probe.measure("n1", "9", ["1"], "stream") == ProbeResult(0.6)
    assert probe.measure("n1", "8", ["1"], "stream").share is None
    missing = probe.measure("n1", "9", ["1"], "spin")
    assert missing.share is None and "no injected measurement for job 9" in missing.error


def test_the_nodes_answer_to_trial_is_read_or_refused() -> None:
    assert parse_trial_reply(
        "OK job=7 share=0.4300 available=0.5700 gbps=3.1 cpus=0"
    ) == ProbeResult(0.43)
    assert parse_trial_reply("ERR unsupported job 7: no baseline").error.startswith("ERR")
    assert parse_trial_reply("OK job=7 share=nan").share is None
    assert parse_trial_reply("OK job=7 share=2").share is None
    assert parse_trial_reply("OK job=7").share is None
    assert parse_trial_reply("").error == "no answer"


def serve_once(path: Path, reply: bytes | None, got: list[bytes]) -> threading.Thread:
    """A one-request Unix socket server that records the request and answers ``reply``
    (``None``: never answers)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(conn.recv(1024))
            if reply is not None:
                conn.sendall(reply)
            else:
                time.sleep(1.0)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_socket_probe_asks_the_nodes_daemon_by_its_job_ids(tmp_path: Path) -> None:
    got: list[bytes] = []
    thread = serve_once(tmp_path / "n1.sock", b"OK job=x share=0.2500 available=0.75\n", got)
    probe = SocketProbe(str(tmp_path / "{node}.sock"), 5.0, lambda j: f"host_{j}")
    assert probe.measure("n1", "2.0", ["1.0"], "spin") == ProbeResult(0.25)
    thread.join(5)
    assert got == [b"TRIAL job=host_2.0 partners=host_1.0\n"]


def test_a_probe_without_an_answer_or_a_daemon_fails_with_why(tmp_path: Path) -> None:
    got: list[bytes] = []
    thread = serve_once(tmp_path / "n1.sock", None, got)
    slow = SocketProbe(str(tmp_path / "{node}.sock"), 0.2).measure("n1", "2", ["1"], None)
    assert slow.share is None and "timed out after policy.membw.probe_timeout_s 0.2" in slow.error
    thread.join(5)
    missing = SocketProbe(str(tmp_path / "{node}.sock"), 1.0).measure("n9", "2", ["1"], None)
    assert missing.share is None and f"{tmp_path}/n9.sock" in missing.error


# -- probe_via: facts -----------------------------------------------------------------------


def facts_snapshot(*results: TrialResult, running: tuple[str, ...] = ("1", "2")) -> Snapshot:
    """The cycle's snapshot with node n1's facts carrying ``results`` (job ids on the node:
    ``host_<id>``)."""
    n1 = Node("n1", 4 * MILLI, 8192, trial_results=results)
    return Snapshot((n1,), tuple(RunningJob(r, "n1", program="spin") for r in running), ())


def host(job: str) -> str:
    return f"host_{job}"


def test_the_facts_probe_finds_the_answer_to_its_request_only() -> None:
    at = T0 + 61
    answer = FactsProbe(facts_snapshot(TrialResult("host_2", at, 0.3)), host)
    assert answer.measure("n1", "2", ["1"], None, requested_at_s=at) == ProbeResult(0.3)
    none = FactsProbe(facts_snapshot(), host).measure("n1", "2", ["1"], None, requested_at_s=at)
    assert none.pending and none.share is None
    assert f"node n1's facts carry no answer to the request of {at}" in none.error
    # An answer to an earlier request (a trial measured before, then requeued) is stale.
    stale = FactsProbe(facts_snapshot(TrialResult("host_2", at - 600, 0.3)), host)
    old = stale.measure("n1", "2", ["1"], None, requested_at_s=at)
    assert old.pending and f"(only one of {at - 600})" in old.error
    # Another node's answer, or another job's, is not this one's.
    assert (
        FactsProbe(facts_snapshot(TrialResult("host_2", at, 0.3)), host)
        .measure("n2", "2", ["1"], None, requested_at_s=at)
        .pending
    )
    assert (
        FactsProbe(facts_snapshot(TrialResult("host_3", at, 0.3)), host)
        .measure("n1", "2", ["1"], None, requested_at_s=at)
        .pending
    )
    failed = FactsProbe(facts_snapshot(TrialResult("host_2", at, None, "unsupported")), host)
    result = failed.measure("n1", "2", ["1"], None, requested_at_s=at)
    assert not result.pending and result.share is None
    assert "node n1's daemon could not probe it (unsupported" in result.error


def test_a_pending_probe_waits_in_measuring_until_facts_wait_s_then_fails() -> None:
    limits = replace(LIMITS, facts_wait_s=300)
    job = tjob(rec("measuring", T0 + 61))
    wait = awaiting(job, "no answer yet", 0.5, T0 + 61 + 300, limits)
    assert (wait.action, wait.record) == ("wait", None)
    assert (
        "its trial's probe is pending (no answer yet; asked 300 s ago, waiting at most "
        "policy.membw.facts_wait_s 300)" in wait.note
    )
    late = awaiting(job, "no answer yet", 0.5, T0 + 61 + 301, limits)
    assert late.action == "suspend" and late.record is not None
    assert (late.record.state, late.record.why, late.record.share) == (
        "suspended",
        "probe_failed",
        None,
    )
    assert "no answer yet 301 s after it, longer than policy.membw.facts_wait_s 300" in late.note


def test_the_cycle_keeps_a_pending_job_measuring_then_decides_by_the_nodes_answer() -> None:
    queue = Queue({"2": tjob(rec())})
    limits = replace(LIMITS, facts_wait_s=300)
    programs = {"spin": 0.5}
    # Cycle 1: past init_s: the record (the request) is written, no answer yet: it waits.
    first = run_trials(
        queue, FactsProbe(facts_snapshot(), host), facts_snapshot(), programs, limits, T0 + 61
    )
    assert queue.log == ["write 2 measuring"] and first.steps == []
    asked = queue.jobs["2"].record
    # The request asks the node to probe it (a planner probing over its socket does not).
    assert (asked.state, asked.at_s, asked.why) == ("measuring", T0 + 61, "node_asked")
    assert format_trial(asked) == f"measuring:{T0 + 61}:-:1:node_asked"
    assert any("probing beside job 1" in n for n in first.notes)
    assert any(
        "its trial's probe is pending (node n1's facts carry no answer to the request "
        f"of {T0 + 61}" in n
        for n in first.notes
    ), first.notes
    # Cycle 2: still none (an answer to an older request does not count): still measuring,
    # not "probing again".
    stale = facts_snapshot(TrialResult("host_2", T0, 0.1))
    second = run_trials(queue, FactsProbe(stale, host), stale, programs, limits, T0 + 120)
    assert queue.log == ["write 2 measuring"] and queue.jobs["2"].record == asked
    assert not any("probing again" in n for n in second.notes), second.notes
    assert any("asked 59 s ago" in n for n in second.notes), second.notes
    # Cycle 3: the node's facts answer the request: 0.3 + 0.5 <= 0.9, kept.
    answered = facts_snapshot(TrialResult("host_2", T0 + 61, 0.3))
    third = run_trials(queue, FactsProbe(answered, host), answered, programs, limits, T0 + 180)
    assert queue.log == ["write 2 measuring", "write 2 kept"]
    assert queue.jobs["2"].record.share == 0.3 and third.measured == {"stream": 0.3}
    assert queue.jobs["2"].record.why == "within_limit"


def test_a_job_whose_answer_never_comes_is_suspended_as_unmeasured() -> None:
    queue = Queue({"2": tjob(rec("measuring", T0 + 61, why="node_asked"))})
    limits = replace(LIMITS, facts_wait_s=300)
    done = run_trials(
        queue, FactsProbe(facts_snapshot(), host), facts_snapshot(), {}, limits, T0 + 400
    )
    assert queue.log == ["suspend 2", "write 2 suspended"]
    assert queue.jobs["2"].record.why == "probe_failed"
    assert any(
        "failed (node n1's facts carry no answer to the request of "
        f"{T0 + 61} 339 s after it, longer than policy.membw.facts_wait_s 300)" in n
        for n in done.notes
    ), done.notes


def test_a_node_asked_job_found_suspended_is_recorded_over_the_limit() -> None:
    step = advance(
        tjob(rec("measuring", T0, why="node_asked"), phase="suspended"), {"1"}, T0 + 5, LIMITS
    )
    assert step.record is not None and (step.record.state, step.record.why) == (
        "suspended",
        "over_limit",
    )


def test_a_measuring_record_that_asked_no_node_is_made_a_request() -> None:
    # Left by a planner that probed over its socket before probe_via became facts.
    queue = Queue({"2": tjob(rec("measuring", T0 + 61))})
    run_trials(queue, FactsProbe(facts_snapshot(), host), facts_snapshot(), {}, LIMITS, T0 + 90)
    assert queue.log == ["write 2 measuring"]
    assert (queue.jobs["2"].record.at_s, queue.jobs["2"].record.why) == (T0 + 90, "node_asked")
