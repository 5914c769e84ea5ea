"""Harvest placements on real cgroups (root): the real node daemon lends cores
of a running "GPU" job to a CPU-only job over its control socket, and gives them back.

What the kernel says is checked, not what coshare's records say: each group's ``cpuset.cpus``
and each process's ``Cpus_allowed_list`` (``/proc/PID/status``) are disjoint after LEND, the
loan survives a daemon restart, RECLAIM either shrinks the CPU job to its own cores or (when it
has none) says ``requeue=1`` and changes nothing, and the CPU job's end gives the GPU job its
cores back.

The copy bandwidth fact: the real daemon publishes a GPU job's PCIe throughput (TX + RX, from
the NVML bindings stand-in in tests/node/fake_nvml: this machine has no GPU) as
``copy_mbps`` in its facts, and none at all where NVML cannot start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.ledger.facts import parse_facts
from coshare.node import lifecycle
from coshare.node.lifecycle import job_end, job_start, spawn_in_group
from coshare.node.sampler import facts_path
from coshare.node.spec import parse_cpu_list

from tests.node.helpers import (
    COSHARE,
    daemon_log,
    node_env,
    running_daemon,
    stop,
    wait_for,
)
from tests.node.test_control_real import ask

pytestmark = pytest.mark.cgroups
PY = sys.executable
BUSY = [PY, "-c", "while True: pass"]
IDLE = [PY, "-c", "import time; time.sleep(300)"]
FAKE_NVML = str(Path(__file__).parent / "fake_nvml")


def cpuset(config: NodeConfig, job: str) -> tuple[int, ...]:
    """The group's CPUs as the kernel has them."""
    return parse_cpu_list(lifecycle.node_cgroups(config).open(job).cpus_text())


def allowed(pid: int) -> tuple[int, ...]:
    """The CPUs the kernel lets process ``pid`` run on."""
    status = Path(f"/proc/{pid}/status").read_text()
    return parse_cpu_list(status.split("Cpus_allowed_list:")[1].split()[0])


def coshare(config: NodeConfig, *args: str) -> str:
    """``coshare node ARGS`` as root; its standard output."""
    done = subprocess.run(
        [COSHARE, "node", *args], env=node_env(config), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def usable_cpus(config: NodeConfig, least: int) -> tuple[int, ...]:
    cgroups = lifecycle.node_cgroups(config)
    missing = cgroups.missing(["cpuset"])
    if missing:
        pytest.skip(missing[0])
    cpus = cgroups.allowed_cpus()
    if len(cpus) < least:
        pytest.skip(f"needs {least} cpus in {cgroups.root} (this node gives {len(cpus)})")
    return cpus


def test_lend_makes_disjoint_cpusets_survives_a_restart_and_the_cpu_job_is_reported(
    node_config: NodeConfig,
) -> None:
    config = node_config
    cpus = usable_cpus(config, 2)
    gpu = job_start(config, "gpu", cores=len(cpus))  # ppn = the whole node, as in the paper
    cpu = job_start(config, "cpu")  # placed wholly on harvested cores: none of its own
    env = node_env(config)
    procs = [spawn_in_group(IDLE, gpu.group(), env), spawn_in_group(BUSY, cpu.group(), env)]
    gpu_pid, cpu_pid = procs[0].pid, procs[1].pid
    lent = cpus[-1:]
    text = ",".join(map(str, lent))
    rest = ",".join(map(str, cpus[:-1]))
    try:
        with running_daemon(config):
            assert ask(config, f"LEND job=gpu to=cpu cpus={text}", user=False) == (
                f"OK job=gpu to=cpu cpus={rest} to_cpus={text} lent={text} changed=1"
            )
            assert cpuset(config, "gpu") == cpus[:-1] and cpuset(config, "cpu") == lent
            assert not set(cpuset(config, "gpu")) & set(cpuset(config, "cpu"))
            wait_for(lambda: allowed(cpu_pid) == lent, what="the CPU job on the lent core")
            assert allowed(gpu_pid) == cpus[:-1]
            # Idempotent, and said so (here through the operator's command).
            again = coshare(
                config, "lend", "--job", "gpu", "--to", "cpu", "--cpus", text, "--output", "json"
            )
            assert json.loads(again) == {
                "job": "gpu",
                "to": "cpu",
                "cpus": rest,
                "to_cpus": text,
                "lent": text,
                "changed": False,
            }
            # Refused: not an operator, a core the GPU job does not hold, its last core, and
            # jobs the node does not run.
            assert ask(config, f"LEND job=gpu to=cpu cpus={text}").startswith(
                "ERR not_allowed job gpu: LEND is for operators"
            )
            assert ask(config, "LEND job=gpu to=cpu cpus=1000", user=False).startswith(
                "ERR bad_spec job gpu: job gpu does not hold cpus 1000"
            )
            assert "would leave it no core" in ask(
                config, f"LEND job=gpu to=cpu cpus={rest}", user=False
            )
            assert ask(config, "LEND job=nobody to=cpu cpus=0", user=False) == (
                "ERR unknown_job job nobody has no group on this node"
            )
            assert ask(config, "RECLAIM job=gpu from=nobody", user=False) == (
                "ERR unknown_job job nobody has no group on this node"
            )
        assert cpuset(config, "cpu") == lent  # the loan outlives the daemon...
        with running_daemon(config):  # ...and the next one knows it (the job records)
            # The CPU job has no core of its own: giving back would starve it. Nothing is
            # changed; the reply says the planner must requeue it.
            assert ask(config, "RECLAIM job=gpu from=cpu", user=False) == (
                f"OK job=gpu from=cpu cpus={rest} from_cpus={text} lent={text} changed=0 requeue=1"
            )
            assert cpuset(config, "cpu") == lent and allowed(cpu_pid) == lent
            said = coshare(config, "reclaim", "--job", "gpu", "--from", "cpu")
            assert said.strip() == (
                f"job cpu has no core of its own: giving back cpus {text} "
                "would leave it none; nothing done: requeue job cpu "
                "through the scheduler (its end gives job gpu the cores "
                "back)"
            )
            # The scheduler requeues it: its end gives the GPU job its cores back.
            stop(procs[1])
            assert ask(config, "END job=cpu", user=False).startswith("OK job=cpu started=1")
            assert cpuset(config, "gpu") == cpus
            wait_for(lambda: allowed(gpu_pid) == cpus, what="the GPU job on all its cores")
            record = lifecycle.node_store(config).read("gpu")
            assert record is not None and record.lent_to == {} and record.spec.cpus == cpus
    finally:
        for proc in procs:
            stop(proc)
        job_end(config, "cpu")
        job_end(config, "gpu")


def test_reclaim_shrinks_a_cpu_job_to_its_own_cores(node_config: NodeConfig) -> None:
    config = node_config
    cpus = usable_cpus(config, 3)
    own = cpus[:1]
    gpu = job_start(config, "gpu", cpus=cpus[1:])
    cpu = job_start(config, "cpu", cpus=own)
    env = node_env(config)
    procs = [spawn_in_group(IDLE, gpu.group(), env), spawn_in_group(BUSY, cpu.group(), env)]
    cpu_pid = procs[1].pid
    lent = cpus[-1]
    try:
        with running_daemon(config):
            reply = ask(config, f"LEND job=gpu to=cpu cpus={lent}", user=False)
            assert reply.endswith("changed=1"), reply
            assert cpuset(config, "cpu") == (*own, lent)
            assert not set(cpuset(config, "gpu")) & set(cpuset(config, "cpu"))
            wait_for(lambda: allowed(cpu_pid) == (*own, lent), what="the CPU job to grow")
            reply = ask(config, "RECLAIM job=gpu from=cpu", user=False)
            assert reply.endswith("lent=- changed=1 requeue=0"), reply
            assert cpuset(config, "gpu") == cpus[1:] and cpuset(config, "cpu") == own
            wait_for(lambda: allowed(cpu_pid) == own, what="the CPU job to shrink")
            again = ask(config, "RECLAIM job=gpu from=cpu", user=False)
            assert again.endswith("changed=0 requeue=0"), again
    finally:
        for proc in procs:
            stop(proc)
        job_end(config, "cpu")
        job_end(config, "gpu")


def copies_of(config: NodeConfig) -> dict[str, float] | None:
    try:
        text = facts_path(config).read_text().strip()
    except FileNotFoundError:
        return None
    return {c.job: c.mbps for c in parse_facts(text).copies}


def test_the_daemon_publishes_a_gpu_jobs_pcie_throughput_and_none_without_nvml(
    node_config: NodeConfig,
) -> None:
    config = node_config
    gpu = job_start(config, "gpu", devices=("0",))
    job_start(config, "cpu")
    sampling = {"COSHARE_NODE_SAMPLE_INTERVAL_S": "0.2", "COSHARE_NODE_PROBE_INTERVAL_S": "0"}
    # The NVML bindings stand-in (one GPU; this machine has none): 300000 KB/s sent and 12500
    # received, as nvmlDeviceGetPcieThroughput reports them.
    fake = {**sampling, "PYTHONPATH": FAKE_NVML, "FAKE_NVML_PCIE_KBPS": "300000,12500"}
    try:
        with running_daemon(config, env=fake):
            wait_for(lambda: copies_of(config) is not None, 30, "the facts")
            assert copies_of(config) == {"gpu": 312.5}  # MB/s; the CPU job holds no GPU
            assert ";copy_mbps=gpu:312.500" in facts_path(config).read_text()
        facts_path(config).unlink()
        # Where NVML cannot start the fact is absent, never made up. (NVML bindings that are
        # not installed, whatever this machine has: a module of that name that cannot load.)
        shadow = Path(config.state_dir) / "no-nvml"
        shadow.mkdir()
        (shadow / "pynvml.py").write_text("raise ImportError('no NVML bindings here')\n")
        with running_daemon(config, env={**sampling, "PYTHONPATH": str(shadow)}):
            wait_for(lambda: copies_of(config) is not None, 30, "the facts")
            assert copies_of(config) == {}
            assert "copy_mbps" not in facts_path(config).read_text()
        assert "NVML PCIe throughput unsupported here" in daemon_log(config).read_text()
    finally:
        job_end(config, gpu.job)
        job_end(config, "cpu")


def test_a_borrowers_start_takes_its_cores_out_of_a_lending_job_or_it_does_not_run(
    gate_daemon: NodeConfig,
) -> None:
    """HTCondor's way: the job wrapper, as the job's user, STARTs a job coshare
    placed on a GPU job's idle cores with ``borrow=``; the daemon takes them out of the GPU
    job's cpuset before the job runs, only from a job that started with ``lends=1`` and never
    its last core; the borrower's end gives them back. A refused START leaves no group, and
    the job does not run."""
    from coshare.node.control import launcher

    from tests.node.test_control_real import PYTHON, REPORT, finish, launch

    config = gate_daemon
    cpus = usable_cpus(config, 2)
    env = node_env(config)

    def refused(job: str, *extra: str) -> str:
        status, out, err = finish(launch(config, job, [PYTHON, "-c", "print('ran')"], *extra))
        assert status == launcher.SETUP_FAILED_STATUS and "ran" not in out, (status, out, err)
        assert job not in lifecycle.node_cgroups(config).jobs()
        return err

    mute = job_start(config, "mute", cores=len(cpus))  # started without lends=1
    proc = spawn_in_group(IDLE, mute.group(), env)
    try:
        assert "was not placed as a job whose cores may be lent" in refused(
            "cpu0", "--cores", "1", "--borrow", "mute"
        )
        assert cpuset(config, "mute") == cpus
    finally:
        stop(proc)
        job_end(config, "mute")
    gpu = job_start(config, "gpu", cores=len(cpus), lends=True)
    proc = spawn_in_group(IDLE, gpu.group(), env)
    try:
        borrower = launch(
            config,
            "cpu",
            [PYTHON, "-c", REPORT + "; import time; time.sleep(2)"],
            "--cores",
            "1",
            "--borrow",
            "gpu",
        )
        assert borrower.stdout is not None
        first = borrower.stdout.readline().split()
        if len(first) != 3:
            pytest.fail(f"the borrower did not run: {finish(borrower)}")
        mine, told, _ = first
        assert parse_cpu_list(mine) == cpus[-1:] and told == mine
        assert cpuset(config, "gpu") == cpus[:-1]  # disjoint, while it runs
        wait_for(lambda: allowed(proc.pid) == cpus[:-1], what="the GPU job off the lent core")
        status, _, err = finish(borrower)
        assert status == 0, err
        assert cpuset(config, "gpu") == cpus  # its end gave the core back
        assert "would leave it no core" in refused(
            "cpu1", "--cores", str(len(cpus)), "--borrow", "gpu"
        )
        assert "does not run on this node" in refused("cpu2", "--cores", "1", "--borrow", "nobody")
        assert cpuset(config, "gpu") == cpus
    finally:
        stop(proc)
        job_end(config, "gpu")
