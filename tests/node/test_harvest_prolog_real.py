"""Slurm's Prolog for a CPU-only job placed on a GPU job's idle cores, on real cgroups (root):
the Prolog makes the CPU job's group and has its cores taken out of the
running GPU job's cpuset before any task of it runs; the two cpusets, as the kernel has them
(``cpuset.cpus`` and each process's ``Cpus_allowed_list``), are disjoint. A loan that cannot
be made leaves no group behind and refuses the job with why (its TaskProlog fails it)."""

from __future__ import annotations

import os

import pytest
from coshare.config import NodeConfig
from coshare.errors import CoshareError
from coshare.node import lifecycle
from coshare.node.cgroups import Cgroups, JobGroup
from coshare.node.lifecycle import job_end, job_start, spawn_in_group
from pytest_mock import MockerFixture

from slurm_addon import node_hooks
from slurm_addon.allocation import Allocation
from slurm_addon.placement import Placement
from tests.node.test_harvest_real import IDLE, allowed, cpuset, usable_cpus

pytestmark = pytest.mark.cgroups


def on_loan(lender: str) -> Placement:
    return Placement("n1", (), 5, 0, 0, harvest_from=lender)


def test_the_prolog_takes_the_cpu_jobs_cores_out_of_the_gpu_jobs_cpuset(
    node_config: NodeConfig,
) -> None:
    cpus = usable_cpus(node_config, 2)
    gpu = job_start(node_config, "701", cpus=cpus, devices=("0",))
    proc = spawn_in_group(IDLE, gpu.group(), dict(os.environ))
    try:
        record = node_hooks.on_job_start(node_config, "702", on_loan("701"), Allocation(1, 64), 0)
        assert record.spec.cpus == (cpus[-1],)
        assert cpuset(node_config, "702") == (cpus[-1],)
        assert cpuset(node_config, "701") == cpus[:-1]
        assert set(allowed(proc.pid)) == set(cpus[:-1])  # the GPU job's process moved off it
        assert lifecycle.node_store(node_config).error("702") is None
        # The Prolog again (slurmd retries it): the loan is kept, nothing more is taken.
        again = node_hooks.on_job_start(node_config, "702", on_loan("701"), Allocation(1, 64), 0)
        assert again.spec.cpus == (cpus[-1],) and cpuset(node_config, "702") == (cpus[-1],)
        assert cpuset(node_config, "701") == cpus[:-1]
        job_end(node_config, "702")  # the CPU job's end gives the cores back
        assert cpuset(node_config, "701") == cpus
    finally:
        proc.kill()
        proc.wait()
        job_end(node_config, "701")


def test_a_loan_that_cannot_be_made_refuses_the_job_and_leaves_no_group(
    node_config: NodeConfig,
) -> None:
    cpus = usable_cpus(node_config, 2)
    job_start(node_config, "711", cpus=cpus, devices=("0",))
    try:
        whole = Allocation(len(cpus), 64)  # all of them: the GPU job would keep none
        with pytest.raises(CoshareError, match="would leave it no core"):
            node_hooks.on_job_start(node_config, "712", on_loan("711"), whole, 0)
        store = lifecycle.node_store(node_config)
        assert store.read("712") is None
        assert not lifecycle.node_cgroups(node_config).open("712").exists()
        error = store.error("712")
        assert error is not None and "idle cores of job 711" in error
        assert cpuset(node_config, "711") == cpus
        # A lender that does not run here: refused the same way.
        with pytest.raises(CoshareError, match="job 799 has no group"):
            node_hooks.on_job_start(node_config, "713", on_loan("799"), Allocation(1, 64), 0)
        assert store.read("713") is None
    finally:
        job_end(node_config, "711")


def test_the_cpu_jobs_group_never_holds_a_core_of_the_gpu_job(
    node_config: NodeConfig, mocker: MockerFixture
) -> None:
    # Read both cpusets the moment the CPU job's group exists: its cores left the GPU job
    # already, and it holds nothing but its loan (a group made first without cores would
    # hold a copy of the parent's on cgroup v1 until the loan was written).
    cpus = usable_cpus(node_config, 2)
    job_start(node_config, "721", cpus=cpus, devices=("0",))
    drivers = type(lifecycle.node_cgroups(node_config))
    made = drivers.create
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def create(self: Cgroups, job: str, *args: object, **kwargs: object) -> JobGroup:
        group = made(self, job, *args, **kwargs)
        seen.append((cpuset(node_config, job), cpuset(node_config, "721")))
        return group

    mocker.patch.object(drivers, "create", create)
    try:
        node_hooks.on_job_start(node_config, "722", on_loan("721"), Allocation(1, 64), 0)
        assert seen == [((cpus[-1],), cpus[:-1])]
    finally:
        job_end(node_config, "722")
        job_end(node_config, "721")
