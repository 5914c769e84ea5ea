"""Opening the executor of ``coshare simulate``: local processes, or a Dask cluster.

``--executor dask`` (or ``sim.executor: dask``) runs every run as a Dask task (the ``dask``
extra: ``pip install 'coshare[dask]'``). Where the workers come from:

- ``--dask-scheduler ADDRESS`` (``sim.dask_scheduler``): a scheduler someone already runs;
- else coshare starts a scheduler in this process and ``sim.workers`` workers of
  ``sim.dask_cluster``: ``local`` (processes on this machine, ``distributed.LocalCluster``),
  ``slurm`` or ``htcondor``: worker *jobs* of the cluster coshare serves, submitted through
  dask-jobqueue's ``SLURMCluster`` (``sbatch``/``scancel``, with the ``slurm`` section's
  ``config_file``, ``bin_dir`` and ``partition``) or ``HTCondorCluster``
  (``condor_submit``/``condor_rm``, with the ``condor`` section's ``config_file``).

An address that does not answer within ``sim.connect_timeout_s``, or a scheduler (given or
started) that no worker joins within ``sim.worker_timeout_s``, is one :class:`ExecutorError`
naming the address (exit status 1), never a hang. Where coshare starts the scheduler, a dead
worker's task is not retried by Dask itself (``allowed-failures`` 0): :class:`DaskExecutor`
retries it ``sim.retries`` times, so one count holds for every executor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from coshare.cli.extras import MissingExtra
from coshare.config import Config, SimConfig
from coshare.errors import ExecutorError, InputError
from coshare.ledger.bounds import shorten, shorten_text
from coshare.sim.executor import DaskExecutor, LocalExecutor
from coshare.sim.runs import Executor

#: Dask's own loggers say much on standard error at INFO; coshare shows their errors only.
DASK_LOGGERS = ("distributed", "dask_jobqueue")


#: A scheduler address Dask's TCP transport takes: ``tcp://`` (or no scheme), a host name,
#: IPv4 or bracketed IPv6 address, and a port. (TLS would need certificates coshare has no
#: settings for; other transports need packages it does not install.)
_ADDRESS = re.compile(
    r"(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,15})://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
    r":(?P<port>[0-9]{1,5})"
)
SCHEMES = ("tcp",)


def check_address(address: str) -> str:
    """``address`` when it is one a Dask client can connect to (checked before a client is
    made: Dask's own errors for a malformed one are a traceback, or a client that cannot
    close at exit).

    Raises:
        InputError: naming the address and what an address looks like.
    """
    allowed = "allowed: tcp://HOST:PORT or HOST:PORT, PORT 1..65535"
    found = _ADDRESS.fullmatch(address)
    what = f"the Dask scheduler address {shorten(address)} (--dask-scheduler, sim.dask_scheduler)"
    if found is None:
        raise InputError(f"{what} is not HOST:PORT ({allowed})")
    scheme = (found["scheme"] or "tcp").lower()
    if scheme not in SCHEMES:
        raise InputError(
            f"{what}: coshare connects over {' or '.join(SCHEMES)}, not {scheme} ({allowed})"
        )
    if not 1 <= int(found["port"]) <= 65535:
        raise InputError(f"{what}: port {found['port']} is out of range ({allowed})")
    return address


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise MissingExtra("--executor dask", "dask", "distributed") from exc
    return distributed


@contextmanager
def open_executor(config: Config) -> Iterator[Executor]:
    """The executor ``config.sim`` names, open for the command, closed (workers stopped,
    worker jobs cancelled) when it ends.

    Raises:
        InputError: Dask is asked for but not installed.
        ExecutorError: the scheduler cannot be reached, or no worker joins in time.
    """
    sim = config.sim
    if sim.executor == "local":
        yield LocalExecutor(sim.workers, sim.retries)
        return
    distributed = _import_distributed()
    import dask

    for name in DASK_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    with ExitStack() as stack:
        # Retries are coshare's (DaskExecutor): a task on a dead worker fails at once.
        stack.enter_context(dask.config.set({"distributed.scheduler.allowed-failures": 0}))
        if sim.dask_scheduler:
            client = _connect(distributed, check_address(sim.dask_scheduler), sim)
            stack.callback(client.close)
            # A scheduler without workers accepts tasks and never runs them: wait for one
            # as for a cluster coshare starts, so the command ends instead of hanging.
            _wait_for_workers(
                client,
                sim,
                shorten_text(sim.dask_scheduler),
                "start its workers with `dask worker ADDRESS`",
            )
        else:
            cluster = _start_cluster(distributed, config)
            stack.callback(_close_quietly, cluster)
            client = _connect(distributed, cluster, sim)
            stack.callback(client.close)
            if sim.dask_cluster != "local":
                cluster.scale(jobs=sim.workers)
            _wait_for_workers(
                client,
                sim,
                str(cluster.scheduler_address),
                f"{sim.dask_cluster} workers; see sim.log_directory for their output",
            )
        yield DaskExecutor(client, sim.retries, sim.worker_timeout_s)


def _connect(distributed: Any, where: Any, sim: SimConfig) -> Any:
    address = where if isinstance(where, str) else where.scheduler_address
    try:
        return distributed.Client(where, timeout=sim.connect_timeout_s, set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, and whatever a transport raises
        raise ExecutorError(
            f"cannot reach the Dask scheduler at {shorten_text(str(address))} "
            f"within {sim.connect_timeout_s:g} s: "
            f"{shorten_text(str(exc) or type(exc).__name__)}"
        ) from exc


def _wait_for_workers(client: Any, sim: SimConfig, address: str, hint: str) -> None:
    try:
        client.wait_for_workers(1, timeout=sim.worker_timeout_s)
    except (TimeoutError, OSError) as exc:
        raise ExecutorError(
            f"no Dask worker joined the scheduler at {address} within "
            f"{sim.worker_timeout_s:g} s (sim.worker_timeout_s; {hint})"
        ) from exc


def _close_quietly(cluster: Any) -> None:
    with contextlib.suppress(Exception):  # closing after an error must not hide that error
        cluster.close()


def _start_cluster(distributed: Any, config: Config) -> Any:
    """A scheduler in this process with ``sim.workers`` workers of ``sim.dask_cluster``."""
    sim = config.sim
    host = sim.scheduler_host
    if sim.dask_cluster == "local":
        return distributed.LocalCluster(
            n_workers=sim.workers,
            threads_per_worker=1,
            processes=True,
            host=host or "127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise MissingExtra(f"sim.dask_cluster {sim.dask_cluster}", "dask", "dask_jobqueue") from exc
    common: dict[str, Any] = {
        "cores": sim.worker_cores,
        "processes": 1,
        "memory": f"{sim.worker_memory_mib}MiB",
        "python": sim.worker_python or sys.executable,
        "job_name": "coshare-dask",
        "job_script_prologue": list(sim.worker_prologue),
        "worker_extra_args": list(sim.worker_extra_args),
        "log_directory": sim.log_directory,
        "scheduler_options": {"dashboard_address": None, **({"host": host} if host else {})},
        # a worker whose scheduler is gone stops by itself, and so does its job
        "death_timeout": max(60, int(sim.connect_timeout_s)),
    }
    if sim.dask_cluster == "slurm":
        if config.slurm.config_file:
            os.environ["SLURM_CONF"] = config.slurm.config_file  # sbatch and scancel read it
        if config.slurm.bin_dir:
            os.environ["PATH"] = f"{config.slurm.bin_dir}{os.pathsep}{os.environ['PATH']}"
        return dask_jobqueue.SLURMCluster(  # type: ignore[attr-defined]
            queue=config.slurm.partition, walltime=sim.worker_walltime, **common
        )
    if config.condor.config_file:
        os.environ["CONDOR_CONFIG"] = config.condor.config_file  # condor_submit reads it
    return dask_jobqueue.HTCondorCluster(disk="1GiB", **common)  # type: ignore[attr-defined]
