"""The order of the Slurm Editor's writes, against recorded-shape outputs: placements are
released only once a re-read confirms them, and a failed write is reported, not released."""

from __future__ import annotations

import hostlist
import pytest
from coshare.config import Config, DeviceKind, SlurmConfig
from coshare.cycle.run import run_cycle
from coshare.model import Assignment, Plan, Unplaced
from coshare.policies import make_policy
from coshare.ports import capabilities

from slurm_addon import writer
from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient
from slurm_addon.placement import parse_placement

from .slurm_recorder import Recorder, format_output, job_record, ok, recorded, squeue_output

NOW = 1_800_000_000
PING = "Slurmctld(primary) at vm is UP\n"


class FakeQueue:
    """Answers squeue from a dict of job records that the scontrol lines really change."""

    def __init__(self, *records: dict, fail_node: str | None = None) -> None:
        self.jobs = {str(r["job_id"]): r for r in records}
        self.fail_node = fail_node

    def __call__(self, argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        name = argv[0].rsplit("/", 1)[-1]
        if name == "sinfo":
            return ok(argv, recorded("sinfo-drain-down.json"))
        if name == "squeue" and "--json" in argv:
            return ok(argv, squeue_output(*self.jobs.values()))
        if name == "squeue":  # the quick re-read: squeue --jobs=... --Format=...
            return ok(argv, format_output(list(self.jobs.values()), argv))
        if argv[1:] == ["ping"]:
            return ok(argv, PING)
        if stdin is not None:
            errors = []
            for line in stdin.splitlines():
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                if fields["ReqNodeList"] == self.fail_node:
                    errors.append(f"Invalid node name specified for job {fields['JobId']}")
                    continue
                job = self.jobs[fields["JobId"]]
                job["required_nodes"] = fields["ReqNodeList"]
                job["admin_comment"] = fields["AdminComment"]
            return ok(argv, "", "\n".join(errors), code=1 if errors else 0)
        if argv[1] in ("release", "hold"):
            for job_id in argv[2].split(","):
                held = argv[1] == "hold"
                self.jobs[job_id]["priority"] = 0 if held else 1000
                self.jobs[job_id]["state_reason"] = "JobHeldAdmin" if held else "None"
            return ok(argv)
        return ok(argv)


def adapter(queue: FakeQueue, **slurm: object) -> tuple[SlurmAdapter, Recorder]:
    runner = Recorder(queue)
    config = Config(device_kinds={"fakephi": DeviceKind(8192, 240)}, slurm=SlurmConfig(**slurm))  # type: ignore[arg-type]
    client = SlurmClient(config.slurm, runner=runner, sleep=lambda s: None, environ={})
    return SlurmAdapter(client, config, clock=lambda: NOW), runner


def test_cycle_writes_confirms_then_releases() -> None:
    queue = FakeQueue(job_record(1, submit_time=NOW - 5), job_record(2, submit_time=NOW - 4))
    a, runner = adapter(queue, update_batch=1, workers=1)
    report = run_cycle(a, make_policy("knapsack"), a)
    assert sorted(report.apply.applied) == ["1", "2"]
    verbs = runner.verbs()
    # read (sinfo, squeue, the priority settings), re-read, ping, then per batch: write,
    # confirm, release
    assert verbs == [
        "sinfo",
        "squeue",
        "scontrol show",
        "squeue",
        "scontrol ping",
        "scontrol <stdin>",
        "squeue",
        "scontrol release",
        "scontrol <stdin>",
        "squeue",
        "scontrol release",
    ]
    assert all(j["admin_comment"].startswith("coshare-placement") for j in queue.jobs.values())

    # The next cycle sees them as planned: nothing more to write.
    again = run_cycle(a, make_policy("knapsack"), a)
    assert again.plan.pending == 0 and again.apply.applied == ()


def test_failed_write_is_reported_and_never_released() -> None:
    queue = FakeQueue(job_record(1, submit_time=NOW), fail_node="csl-n1")
    a, runner = adapter(queue)
    a.read()
    plan = Plan("knapsack", assignments=(Assignment("1", "csl-n1", ("0",)),))
    report = a.apply(plan, [], dry_run=False)
    assert report.applied == ()
    assert report.failed[0].job == "1" and "Invalid node name" in report.failed[0].detail
    assert "scontrol release" not in runner.verbs()
    assert queue.jobs["1"]["priority"] == 0


def test_dry_run_reads_but_writes_nothing() -> None:
    queue = FakeQueue(
        job_record(1, submit_time=NOW), job_record(2, priority=5, state_reason="None")
    )
    a, runner = adapter(queue)
    a.read()
    plan = Plan(
        "knapsack",
        assignments=(Assignment("1", "csl-n1", ("0",)),),
        unplaced=(Unplaced("2", "no room"),),
    )
    report = a.apply(plan, [], dry_run=True)
    assert report.dry_run and report.applied == ("1",)
    # It would be held: not held and not placed.
    assert [(w.job, w.detail) for w in report.withdrawn] == [
        ("2", "could start without a placement; not placed this cycle")
    ]
    assert set(runner.verbs()) == {"sinfo", "squeue", "scontrol show"}


def test_comment_changed_while_placing_is_not_released() -> None:
    queue = FakeQueue(job_record(1, submit_time=NOW))
    a, runner = adapter(queue)
    a.read()
    plan = Plan("knapsack", assignments=(Assignment("1", "csl-n1", ("0",)),))
    real = queue.__call__

    def owner_edits_during_write(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        result = real(argv, stdin)
        if stdin is not None:
            queue.jobs["1"]["comment"] = "coshare: device-memory=7G device-threads=60"
        return result

    runner.answer = owner_edits_during_write
    report = a.apply(plan, [], dry_run=False)
    assert report.applied == () and "comment changed" in report.skipped[0].detail
    assert queue.jobs["1"]["priority"] == 0  # still held, with its placement: planned again


def test_a_comment_forging_another_jobs_line_does_not_stop_that_job() -> None:
    victim = job_record(2, submit_time=NOW - 4)
    forged = (
        "coshare: device-memory=1G device-threads=60\n"
        "2|PENDING|None|1|csl-n1|coshare-placement;v=1;node=csl-n1;devices=0;at=1;"
        "mem_mib=1;threads=1|x"
    )
    queue = FakeQueue(job_record(1, submit_time=NOW - 5, comment=forged), victim)
    a, _ = adapter(queue)
    report = run_cycle(a, make_policy("knapsack"), a)
    assert report.apply.applied == ("2",) and report.apply.skipped == ()
    assert queue.jobs["2"]["priority"] != 0  # placed and released in this very cycle
    assert [r.job for r in report.rejected] == ["1"]  # its comment is no annotation
    assert queue.jobs["2"]["admin_comment"].startswith("coshare-placement;v=1;")


# -- gangs: one job, one update, all its nodes -----------------------------------------------


class GangQueue(FakeQueue):
    """A FakeQueue whose updates also take a gang's node count and tasks, and which prints
    ReqNodeList as Slurm does (a compressed hostlist: ``csl-n[1-2]``)."""

    def __call__(self, argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        result = super().__call__(argv, stdin)
        if stdin is not None:
            for line in stdin.splitlines():
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                job = self.jobs[fields["JobId"]]
                job["required_nodes"] = hostlist.collect_hostlist(fields["ReqNodeList"].split(","))
                if "NumNodes" in fields:
                    low, high = fields["NumNodes"].split("-")
                    job.update(
                        node_count=int(low),
                        max_nodes=int(high),
                        tasks=int(fields["NumTasks"]),
                        minimum_cpus_per_node=int(fields["MinCPUsNode"]),
                    )
                    if "TasksPerNode" in fields:
                        job["tasks_per_node"] = int(fields["TasksPerNode"])
        return result


def gang_record(job_id: int, **fields: object) -> dict:  # type: ignore[type-arg]
    """sbatch -N 2 --ntasks-per-node=2: as squeue --json shows such a job (the recorded
    -N 2 job, with two tasks per node)."""
    base = dict(node_count=2, max_nodes=2, tasks=4, tasks_per_node=2, cpus=4, submit_time=NOW - 5)
    return job_record(job_id, **(base | fields))


def test_a_gang_is_written_in_one_update_confirmed_and_released_whole() -> None:
    queue = GangQueue(gang_record(1), job_record(2, submit_time=NOW - 4))
    a, runner = adapter(queue, update_batch=10, workers=1)
    report = run_cycle(a, make_policy("knapsack"), a)
    assert sorted(report.apply.applied) == ["1", "2"]
    [script] = [stdin for argv, stdin in runner.calls if stdin is not None]
    [line] = [line for line in script.splitlines() if line.startswith("update JobId=1 ")]
    fields = dict(part.split("=", 1) for part in line.split()[1:])
    assert (
        fields["ReqNodeList"],
        fields["NumNodes"],
        fields["NumTasks"],
        fields["TasksPerNode"],
        fields["MinCPUsNode"],
    ) == ("csl-n1,csl-n2", "2-2", "4", "2", "2")
    placement = parse_placement(fields["AdminComment"])
    assert placement is not None
    assert [(p.node, p.processes, len(p.devices)) for p in placement.parts] == [
        ("csl-n1", 2, 1),
        ("csl-n2", 2, 1),
    ]
    # released once, with the single-node job, after the re-read confirmed both
    assert runner.verbs()[-3:] == ["scontrol <stdin>", "squeue", "scontrol release"]
    assert queue.jobs["1"]["priority"] != 0

    # The next cycle counts it on both nodes with those devices, and writes nothing.
    again = run_cycle(a, make_policy("knapsack"), a)
    assert again.plan.pending == 0 and again.apply.applied == ()
    assert a.view is not None
    holding = {(r.node, r.devices) for r in a.view.snapshot.running if r.id == "1"}
    assert holding == {(p.node, p.devices) for p in placement.parts}


class Killed(BaseException):
    """What SIGKILL does to a cycle, for a test inside one process."""


def test_a_gang_whose_cycle_died_before_release_is_planned_again_whole() -> None:
    queue = GangQueue(gang_record(1))
    a, runner = adapter(queue)
    real = queue.__call__

    def killed_at_release(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        if argv[1:2] == ["release"]:
            raise Killed
        return real(argv, stdin)

    runner.answer = killed_at_release
    with pytest.raises(Killed):
        run_cycle(a, make_policy("knapsack"), a)
    # Written (all its nodes, one update) but never released: it cannot start anywhere.
    assert queue.jobs["1"]["priority"] == 0
    assert queue.jobs["1"]["required_nodes"] == "csl-n[1-2]"

    # The next cycle counts it nowhere (held), plans it again and completes it.
    b, _ = adapter(queue)
    view = b.read()
    assert [j.id for j in view.snapshot.pending] == ["1"]
    assert not [r for r in view.snapshot.running if r.id == "1"]
    report = b.apply(make_policy("knapsack").plan(view.snapshot), view.rejected, dry_run=False)
    assert report.applied == ("1",) and queue.jobs["1"]["priority"] != 0


def test_a_gang_whose_update_failed_in_part_is_not_released() -> None:
    queue = GangQueue(gang_record(1))
    a, runner = adapter(queue)
    real = queue.__call__

    def numnodes_refused(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        result = real(argv, stdin)  # ReqNodeList and AdminComment taken, then an error
        if stdin is not None:
            return ok(argv, "", "Requested node configuration is not available for job 1", code=1)
        return result

    runner.answer = numnodes_refused
    report = run_cycle(a, make_policy("knapsack"), a)
    assert report.apply.applied == ()
    assert "placement not taken" in report.apply.failed[0].detail
    assert "scontrol release" not in runner.verbs() and queue.jobs["1"]["priority"] == 0


def test_borrowers_whose_gpu_job_needs_its_cores_back_are_requeued_first() -> None:
    queue = FakeQueue(job_record(1, submit_time=NOW))
    a, runner = adapter(queue, lend_partition="coshare-lend")
    assert capabilities(a).harvest
    a.read()
    plan = Plan(
        "collocate",
        assignments=(Assignment("1", "csl-n1", ("0",)),),
        requeue=(
            Unplaced("7", "GPU job 5 on csl-n1 needs its cores back"),
            Unplaced("8", "GPU job 5 on csl-n1 needs its cores back"),
        ),
    )
    report = a.apply(plan, [], dry_run=False)
    assert [(o.job, o.detail) for o in report.requeued] == [
        ("7", "GPU job 5 on csl-n1 needs its cores back"),
        ("8", "GPU job 5 on csl-n1 needs its cores back"),
    ]
    verbs = runner.verbs()
    assert verbs.index("scontrol requeuehold") < verbs.index("scontrol <stdin>"), verbs
    assert report.applied == ("1",)
    from coshare.cli.render import cycle_summary, cycle_to_dict
    from coshare.cycle.run import CycleReport

    cycle = CycleReport(plan=plan, apply=report)
    assert cycle_to_dict(cycle)["apply"]["requeued"][0]["job"] == "7"
    assert "requeued 8: GPU job 5 on csl-n1 needs its cores back" in cycle_summary(cycle)
    # Without a lending partition nothing is placed on lent cores, and the cycle says why.
    plain, _ = adapter(FakeQueue())
    assert (
        not capabilities(plain).harvest
        and "slurm.lend_partition is not set" in capabilities(plain).why_not["harvest"]
    )


def test_a_large_batch_is_written_by_several_scontrol_processes_then_confirmed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer, "MIN_LINES_PER_PROCESS", 4)  # the recorded nodes hold few jobs
    small = "coshare: device-memory=64M device-threads=4"
    queue = FakeQueue(
        *(job_record(i, submit_time=NOW - i, comment=small) for i in range(1, 81)),
        fail_node="csl-n2",
    )
    a, runner = adapter(queue, update_batch=250, workers=1)
    report = run_cycle(a, make_policy("knapsack"), a)
    scripts = [stdin for argv, stdin in runner.calls if stdin is not None]
    lines = [line for script in scripts for line in script.splitlines()]
    written = [line.split()[1].removeprefix("JobId=") for line in lines]
    assert len(scripts) > 1 and len(lines) >= 2 * writer.MIN_LINES_PER_PROCESS
    assert sorted(written) == sorted(set(written))  # each job's update once, each line whole
    assert all(line.startswith("update JobId=") and " AdminComment=" in line for line in lines)
    # every share written before the one confirming re-read, and only then the release (the
    # wait reasons of the jobs left out follow)
    verbs = runner.verbs()
    last_write = max(i for i, v in enumerate(verbs) if v == "scontrol <stdin>")
    assert verbs[last_write + 1 : last_write + 3] == ["squeue", "scontrol release"]
    assert verbs.count("scontrol release") == 1 and verbs.count("squeue") == 3
    # the jobs of a share that failed on its node are reported, the rest released
    on_failing = {
        line.split()[1].removeprefix("JobId=") for line in lines if "ReqNodeList=csl-n2 " in line
    }
    assert on_failing and {o.job for o in report.apply.failed} == on_failing
    assert sorted(report.apply.applied) == sorted(set(written) - on_failing)
    assert all(queue.jobs[j]["priority"] != 0 for j in report.apply.applied)
    assert all(queue.jobs[j]["priority"] == 0 for j in on_failing)


@pytest.mark.parametrize("count", [0, 1, 15, 16, 31, 32, 63, 64, 250, 1000])
def test_shares_hold_every_line_once_in_order(count: int) -> None:
    lines = [f"update JobId={i} ReqNodeList=n1 AdminComment=x\n" for i in range(count)]
    parts = writer.shares(lines)
    assert [line for part in parts for line in part] == lines
    assert (1 if lines else 0) <= len(parts) <= writer.PROCESSES_PER_BATCH
    assert len(parts) == 1 or all(len(p) >= writer.MIN_LINES_PER_PROCESS for p in parts)
