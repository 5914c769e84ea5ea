"""``coshare slurm ...``: the Slurm adapter's commands.

::

    coshare slurm cycle [--policy NAME] [--threads strict|soft] [--dry-run] [-v]
                        [--output table|json]
    coshare slurm show  [--policy NAME] [--threads strict|soft] [-v] [--output table|json]

The commands are those of every scheduler adapter (:mod:`coshare.cli.scheduler`). ``cycle``
exits 0 when every write went through (jobs may still wait), 1 when Slurm could not be read
or written (slurmctld down: the next cycle recovers), 2 for a bad configuration, 3 when some
jobs' writes failed. An overlapping cycle (cron) that finds the lock taken exits 0 at once
and says so.
"""

from __future__ import annotations

from coshare.cli.extras import load
from coshare.cli.scheduler import scheduler_group
from coshare.config import Config
from coshare.ports import Adapter

#: How a Slurm user sets each value ``explain`` may advise to lower (the job's comment and
#: sbatch's own options).
NAMES = {
    "device_memory_mib": "device-memory",
    "device_threads": "device-threads",
    "device_count": "device-count",
    "cores": "--cpus-per-task",
    "memory_mib": "--mem",
    "processes": "processes",
}


def open_adapter(config: Config) -> Adapter:
    """The Slurm adapter, imported only when a command runs: ``--help`` works without
    python-hostlist, and a missing ``slurm`` extra is one message saying how to install it."""
    opener = load("slurm_addon.adapter:open_adapter", "coshare slurm")
    adapter: Adapter = opener(config)
    return adapter


slurm = scheduler_group(
    "slurm",
    "The Slurm add-on: plan annotated Slurm jobs onto shared devices, on the controller "
    "(needs the 'slurm' extra: pip install 'coshare[slurm]').",
    open_adapter,
    lambda config: config.slurm.lock_file,
    NAMES,
)
