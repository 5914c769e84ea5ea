"""The simulator's runs as tasks: cut into stages and put back together they give
what compare() and sweep() give in one process; executors return results in task order,
retry a task whose worker died at most ``retries`` times and name what failed; --sweep grids;
the streamed engine gives the in-memory figures with only the jobs in flight kept."""

from __future__ import annotations

import json
import os
import sys
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.errors import InputError
from coshare.model import MILLI, Job, Node
from coshare.policies import make_policy
from coshare.sim.device import FixedModel
from coshare.sim.engine import SimulationError, simulate
from coshare.sim.executor import LocalExecutor
from coshare.sim.experiments import Setup, compare, sweep
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.metrics import StreamSummary, summarize
from coshare.sim.params import apply, parse_sweeps
from coshare.sim.runs import Task
from coshare.sim.work import CompareSpec, SizesSpec, run_paper

SETUP = Setup()


def test_stages_rebuild_compare_and_sweep_exactly() -> None:
    ref = compare("uniform", 60, 3, ("exclusive", "random", "knapsack"), 4, SETUP, footprint=True)
    sizes = sweep("uniform", [2, 3], ("exclusive", "knapsack"), 4, SETUP, jobs=60)
    got = run_paper(
        [
            CompareSpec(
                "uniform", 60, 3, ("exclusive", "random", "knapsack"), 4, SETUP, footprint=True
            )
        ],
        [SizesSpec("uniform", ((2, 60), (3, 60)), ("exclusive", "knapsack"), 4, SETUP)],
        LocalExecutor(1),
    )
    assert got.failures == []
    assert got.comparisons == [ref]
    assert got.sweeps == [sizes]


def test_table1_reuses_the_calibration_run_as_compare_does() -> None:
    ref = compare("table1", 1000, 8, ("exclusive",), 0, SETUP)
    got = run_paper(
        [CompareSpec("table1", 1000, 8, ("exclusive",), 0, SETUP)], [], LocalExecutor(1)
    )
    assert got.comparisons == [ref]


def _double(x: int) -> int:
    return 2 * x


def _die_once(marker: str, x: int) -> int:
    # The first time: the worker process dies (as a killed worker would); then it works.
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(9)
    return x


def _always_die(x: int) -> int:
    os._exit(9)


def _raise(x: int) -> int:
    raise ValueError(f"bad input {x}")


def test_local_pool_returns_values_in_task_order() -> None:
    tasks = [Task(f"t{i}", _double, (i,)) for i in range(7)]
    seen: list[int] = []
    results = LocalExecutor(2).run(tasks, seen.append)
    assert results.values == [2 * i for i in range(7)]
    assert sorted(seen) == list(range(7))


def test_a_dead_worker_costs_a_retry(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    results = LocalExecutor(2, retries=1).run(
        [Task("dies once", _die_once, (marker, 5)), Task("fine", _double, (3,))]
    )
    assert results.values == [5, 6]
    assert results.failures == []


def test_retries_exhausted_names_the_task_and_keeps_the_others() -> None:
    results = LocalExecutor(2, retries=2).run(
        [Task("doomed run", _always_die, (1,)), Task("bad run", _raise, (2,))]
        + [Task(f"ok {i}", _double, (i,)) for i in range(3)]
    )
    failed = {f.task: f.reason for f in results.failures}
    assert failed["doomed run"] == "its worker died 3 times (retries exhausted)"
    assert "bad input 2" in failed["bad run"]
    assert results.values[2:] == [0, 2, 4]


def test_a_task_error_is_reported_in_one_process_too() -> None:
    results = LocalExecutor(1).run([Task("bad run", _raise, (1,)), Task("ok", _double, (1,))])
    assert [f.task for f in results.failures] == ["bad run"]
    assert results.values[1] == 2


def test_sweep_grid_in_the_order_given() -> None:
    points = parse_sweeps(["jobs=10,20", "threads=strict,soft", "max_thread_cells=8"])
    assert points[0] == (("jobs", 10), ("threads", "strict"), ("max_thread_cells", 8))
    assert len(points) == 4
    setup = apply(points[0], SETUP)
    assert setup.threads == "strict" and setup.policy_params == (("max_thread_cells", 8),)
    assert setup.policy("knapsack", 0).inner.max_thread_cells == 8  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text, says",
    [
        ("colour=1,2", "colour' names no parameter (valid: jobs, nodes, cycle_delay_s"),
        ("jobs=0", "--sweep jobs: '0' is not allowed (allowed: an integer 1..100000)"),
        ("offload_share=nan", "offload_share: 'nan' is not allowed"),
        ("threads", "want KEY=V1,V2"),
    ],
)
def test_bad_sweeps_are_refused(text: str, says: str) -> None:
    with pytest.raises(InputError, match=None) as info:
        parse_sweeps([text])
    assert says in str(info.value)


def test_unknown_sweep_key_on_the_command_line_lists_valid_ones() -> None:
    out = CliRunner().invoke(cli, ["simulate", "--workload", "uniform", "--sweep", "speed=1"])
    assert out.exit_code == 2
    assert "speed' names no parameter (valid: jobs, nodes" in out.output


def _cpu_jobs(
    count: int,
    gap_s: float = 1.0,
    run_s: float = 3.0,
    spread: int = 11,
) -> Iterator[SimJob]:
    for i in range(count):
        job = Job(
            id=str(i + 1),
            device_count=0,
            kind="cpu",
            cpu_milli=MILLI,
            memory_mib=64,
            submit_time_s=gap_s * i,
        )
        yield host_only(job, run_s + (i * 7) % spread)


NODES = tuple(Node(f"n{i}", 4 * MILLI, 4096) for i in range(2))


def test_a_stream_replays_like_a_sequence() -> None:
    whole = simulate(NODES, list(_cpu_jobs(400)), make_policy("knapsack"), model=FixedModel())
    figures = StreamSummary()
    streamed = simulate(
        NODES, _cpu_jobs(400), make_policy("knapsack"), model=FixedModel(), record=figures.add
    )
    assert streamed.jobs == ()
    a, b = summarize(whole), figures.summary(streamed)
    assert (a.makespan_s, a.cycles, a.jobs, a.not_run) == (
        b.makespan_s,
        b.cycles,
        b.jobs,
        b.not_run,
    )
    assert b.wait_mean_s == pytest.approx(a.wait_mean_s, rel=1e-12)
    assert b.slowdown_p95 == pytest.approx(a.slowdown_p95, rel=1e-3)
    assert b.bounded_slowdown_mean == pytest.approx(a.bounded_slowdown_mean, rel=1e-12)
    assert b.core_utilization == pytest.approx(a.core_utilization, rel=1e-12)
    assert streamed.events == whole.events


def test_a_stream_of_gangs_replays_like_a_sequence() -> None:
    # every third job spans both nodes: the streamed engine keeps a gang's parts
    # per node and the figures match the whole run's
    def jobs() -> Iterator[SimJob]:
        for i, sim in enumerate(_cpu_jobs(300)):
            job = sim.job if i % 3 else replace(sim.job, processes=6, nodes=2, processes_per_node=4)
            yield host_only(job, sim.duration_s)

    whole = simulate(NODES, list(jobs()), make_policy("knapsack"), model=FixedModel())
    figures = StreamSummary()
    streamed = simulate(
        NODES, jobs(), make_policy("knapsack"), model=FixedModel(), record=figures.add
    )
    a, b = summarize(whole), figures.summary(streamed)
    assert a.not_run == b.not_run == 0
    assert sum("," in r.node for r in whole.jobs) == 100  # the gangs ran on both nodes
    assert (a.makespan_s, a.cycles, a.jobs) == (b.makespan_s, b.cycles, b.jobs)
    assert b.bounded_slowdown_mean == pytest.approx(a.bounded_slowdown_mean, rel=1e-12)
    assert b.core_utilization == pytest.approx(a.core_utilization, rel=1e-12)
    assert b.core_utilization > 0


def test_a_stream_keeps_only_the_jobs_in_flight() -> None:
    def peak(count: int) -> int:
        tracemalloc.start()
        # An arrival every 2 s, 1-5 s each, on 2 exclusive nodes: a job or two in flight and
        # no backlog (a queue that grows would rightly grow the memory too).
        simulate(
            NODES,
            _cpu_jobs(count, gap_s=2.0, run_s=1.0, spread=5),
            make_policy("exclusive"),
            model=FixedModel(),
            record=StreamSummary().add,
        )
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(1_000), peak(10_000)
    assert large < 1.5 * small  # ten times the jobs, not ten times the memory


def test_a_stream_out_of_submit_order_is_refused() -> None:
    jobs = list(_cpu_jobs(3))
    with pytest.raises(SimulationError, match="must come in submit order"):
        simulate(NODES, iter([jobs[1], jobs[0]]), make_policy("exclusive"), model=FixedModel())


def test_streamed_swf_is_not_refused_for_its_size(tmp_path: Path) -> None:
    log = tmp_path / "big.swf"
    # one arrival every 2 s, 5 s each, on 4 nodes: no backlog, a few jobs in flight
    rows = [f"{i} {2 * i} 0 5 1 -1 -1 1 10 1024 1 1 1 1 1 1 -1 -1" for i in range(1, 150_001)]
    log.write_text("; a synthetic log\n" + "\n".join(rows) + "\n")
    (tmp_path / "big.swf.machines").write_text("1 m 4 2 1 4194304\n")
    out = CliRunner().invoke(
        cli,
        ["simulate", "--workload", f"trace:{log}", "--policies", "exclusive", "--output", "json"],
    )
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["runs"][0]["jobs"] == 150_000  # above the 100,000 of an in-memory run
    assert payload["runs"][0]["not_run"] == 0
    assert "events/s" in out.stderr


def test_dask_on_this_machine_prints_what_local_processes_print() -> None:
    pytest.importorskip("distributed")
    args = [
        "simulate",
        "--workload",
        "uniform",
        "--jobs",
        "40",
        "--nodes",
        "2",
        "--seeds",
        "2",
        "--offload-share",
        "0.5",
        "--sweep",
        "jobs=30,40",
        "--policies",
        "exclusive,knapsack",
        "--output",
        "json",
    ]
    local = CliRunner().invoke(cli, args)
    dask = CliRunner().invoke(cli, [*args, "--executor", "dask", "--workers", "2"])
    assert local.exit_code == 0 and dask.exit_code == 0, dask.output
    assert dask.stdout == local.stdout
    assert json.loads(local.stdout)["sweep"]["keys"] == ["jobs"]


def test_an_unreachable_scheduler_is_one_message_and_exit_1() -> None:
    pytest.importorskip("distributed")
    out = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--workload",
            "uniform",
            "--jobs",
            "10",
            "--dask-scheduler",
            "tcp://127.0.0.1:9",
        ],
        env={"COSHARE_SIM_CONNECT_TIMEOUT_S": "1"},
    )
    assert out.exit_code == 1
    assert out.stderr.startswith(
        "coshare: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9 within 1 s"
    )


def test_a_sweep_plot_is_a_png_of_every_point(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    out = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--workload",
            "uniform",
            "--nodes",
            "2",
            "--seeds",
            "2",
            "--offload-share",
            "0.5",
            "--sweep",
            "threads=strict,soft",
            "--sweep",
            "jobs=10,20",
            "--policies",
            "exclusive,knapsack",
            "--plot",
            str(png),
        ],
    )
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith("uniform ")]
    assert len(rows) == 2 * 2 * 2  # every point x policy, over both seeds
    assert all(r[-1] == "2" for r in rows)  # the seeds column


def test_without_dask_local_runs_work_and_dask_is_asked_for_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("dask", "distributed", "dask_jobqueue"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the dask extra were not installed
    args = [
        "simulate",
        "--workload",
        "uniform",
        "--jobs",
        "10",
        "--nodes",
        "2",
        "--offload-share",
        "0.5",
        "--policies",
        "exclusive",
    ]
    local = CliRunner().invoke(cli, [*args, "--workers", "2"])
    assert local.exit_code == 0, local.output
    dask = CliRunner().invoke(cli, [*args, "--executor", "dask"])
    assert dask.exit_code == 1  # a missing extra, as every command's help says
    assert dask.stderr == (
        "coshare: error: --executor dask needs the 'dask' extra (module "
        "'distributed' is not installed): pip install 'coshare[dask]'\n"
    )


def _slow(x: int) -> tuple[str, int]:
    import time

    time.sleep(1.5)
    return ("slow", x)


def _tagged(x: int) -> tuple[str, int]:
    return ("fast", x)


def test_commands_sharing_a_dask_scheduler_get_their_own_results() -> None:
    # Two commands on one --dask-scheduler: the second's first task must not be taken for
    # the first's (same stage, index and try) and handed its result.
    distributed = pytest.importorskip("distributed")
    import threading

    from coshare.sim.executor import DaskExecutor

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        first = distributed.Client(cluster, set_as_default=False)
        second = distributed.Client(cluster, set_as_default=False)
        try:
            got: dict[str, list[object]] = {}
            running = threading.Thread(
                target=lambda: got.__setitem__(
                    "first", DaskExecutor(first).run([Task("slow", _slow, (1,))]).values
                )
            )
            running.start()
            first.wait_for_workers(1, timeout=30)
            while not first.processing() or not any(first.processing().values()):
                running.join(0.05)  # until the first command's task runs on the worker
            got["second"] = DaskExecutor(second).run([Task("fast", _tagged, (2,))]).values
            running.join(30)
        finally:
            first.close()
            second.close()
    assert got == {"first": [("slow", 1)], "second": [("fast", 2)]}


def test_a_scheduler_no_worker_joins_is_one_message_and_exit_1() -> None:
    # It would take the tasks and never run them: the command must end, not hang.
    distributed = pytest.importorskip("distributed")
    import subprocess

    with distributed.LocalCluster(
        n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "coshare"),
                "simulate",
                "--workload",
                "uniform",
                "--jobs",
                "10",
                "--nodes",
                "2",
                "--offload-share",
                "0.5",
                "--policies",
                "exclusive",
                "--dask-scheduler",
                address,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COSHARE_CONFIG": "/dev/null", "COSHARE_SIM_WORKER_TIMEOUT_S": "1"},
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"coshare: error: no Dask worker joined the scheduler at "
        f"{address} within 1 s (sim.worker_timeout_s; "
    )
    assert done.stdout == ""


def test_a_dask_worker_that_dies_costs_a_retry_then_the_task_is_named(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    import dask
    from coshare.sim.executor import DaskExecutor

    # As open_executor starts a cluster: Dask does not retry by itself, --retries counts.
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        runner = DaskExecutor(client, retries=1)
        marker = str(tmp_path / "marker")
        once = runner.run([Task("dies once", _die_once, (marker, 5)), Task("fine", _double, (3,))])
        assert (once.values, once.failures) == ([5, 6], [])
        client.wait_for_workers(2, timeout=60)  # the nanny restarted the dead one
        # No third, innocent task here: one queued on the worker the doomed run kills is lost
        # with it, and twice exhausts its retry too (a full run saw it fail so); the other
        # results beside a dying worker are the first run's "fine" and the CLI test below.
        doomed = runner.run([Task("doomed run", _always_die, (1,)), Task("bad run", _raise, (2,))])
    failed = {f.task: f.reason for f in doomed.failures}
    assert failed["doomed run"] == "its worker died 2 times (retries exhausted)"
    assert "bad input 2" in failed["bad run"]
    assert doomed.values == [None, None]


def test_failed_runs_are_named_after_the_other_results(monkeypatch: pytest.MonkeyPatch) -> None:
    import coshare.sim.work as work

    real = work.policy_run

    def broken(workload: str, jobs: int, nodes: int, name: str, *rest: object) -> object:
        if name == "knapsack":
            raise ValueError("a broken run")
        return real(workload, jobs, nodes, name, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(work, "policy_run", broken)
    out = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--workload",
            "uniform",
            "--jobs",
            "10",
            "--nodes",
            "2",
            "--offload-share",
            "0.5",
            "--policies",
            "exclusive,knapsack",
            "--sweep",
            "jobs=10,20",
            "--output",
            "json",
        ],
    )
    assert out.exit_code == 1
    runs = json.loads(out.stdout)["sweep"]["runs"]
    assert [(r["policy"], r["params"]) for r in runs] == [
        ("exclusive", {"jobs": 10}),
        ("exclusive", {"jobs": 20}),
    ]
    assert out.stderr == (
        "coshare: error: 2 runs failed (the results above are the others'): uniform seed 0 "
        "knapsack on 2 nodes jobs=10: ValueError: a broken run; uniform seed 0 knapsack on 2 "
        "nodes jobs=20: ValueError: a broken run\n"
    )


def test_runs_lost_with_the_dask_scheduler_say_so() -> None:
    # Dask cancels every task in flight when the scheduler goes away; exception() is None.
    distributed = pytest.importorskip("distributed")
    import threading

    from coshare.sim.executor import DaskExecutor

    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        got: list[object] = []
        running = threading.Thread(
            target=lambda: got.append(
                DaskExecutor(client).run(
                    [Task("slow one", _slow, (1,)), Task("slow two", _slow, (2,))]
                )
            )
        )
        running.start()
        while not client.processing() or not any(client.processing().values()):
            running.join(0.05)  # until the runs are on the worker
        cluster.close()
        running.join(60)
        assert not running.is_alive()
    finally:
        client.close()
    (results,) = got
    failed = {f.task: f.reason for f in results.failures}  # type: ignore[attr-defined]
    assert set(failed) == {"slow one", "slow two"}
    # The scheduler's own cancel, or the client's when the connection went first.
    assert set(failed.values()) <= {
        "cancelled by the Dask scheduler (no reason given: was it stopped?)",
        "lost the connection to the Dask scheduler",
    }


def test_runs_with_no_dask_worker_left_fail_named_instead_of_waiting() -> None:
    # Every worker gone (worker jobs cancelled, none replaced): the scheduler keeps the tasks
    # for ever; the command must end, naming them.
    distributed = pytest.importorskip("distributed")
    import threading

    from coshare.sim.executor import DaskExecutor

    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        got: list[object] = []
        running = threading.Thread(
            target=lambda: got.append(
                DaskExecutor(client, worker_timeout_s=1).run(
                    [Task("slow one", _slow, (1,)), Task("slow two", _slow, (2,))]
                )
            ),
            daemon=True,
        )
        running.start()
        while not client.processing() or not any(client.processing().values()):
            running.join(0.05)  # until the runs are on the worker
        cluster.scale(0)
        running.join(60)
        assert not running.is_alive(), "the runs waited for a worker for ever"
    (results,) = got
    reasons = {f.task: f.reason for f in results.failures}  # type: ignore[attr-defined]
    assert reasons == dict.fromkeys(
        ("slow one", "slow two"),
        (
            "no Dask worker left for 1 s (sim.worker_timeout_s): every worker died or its job was "
            "cancelled"
        ),
    )


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("foo", "'foo' (--dask-scheduler, sim.dask_scheduler) is not HOST:PORT"),
        ("tcp://[::1", "is not HOST:PORT"),
        ("ucx://10.0.0.1:8786", "coshare connects over tcp, not ucx"),
        ("tls://10.0.0.1:8786", "coshare connects over tcp, not tls"),
        ("tcp://10.0.0.1:99999", "port 99999 is out of range"),
    ],
)
def test_a_malformed_scheduler_address_is_one_message_and_exit_2(address: str, says: str) -> None:
    # Checked before Dask sees it: Dask's answers were a traceback (ucx) or a message
    # followed by one when its half-made client was collected at exit.
    pytest.importorskip("distributed")
    import subprocess

    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "coshare"),
            "simulate",
            "--workload",
            "uniform",
            "--jobs",
            "10",
            "--dask-scheduler",
            address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COSHARE_CONFIG": "/dev/null", "COSHARE_SIM_CONNECT_TIMEOUT_S": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("coshare: error: the Dask scheduler address ")
    assert says in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "(allowed: tcp://HOST:PORT or HOST:PORT, PORT 1..65535)" in done.stderr
