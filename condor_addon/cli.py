"""``coshare condor``: run a planning cycle on an HTCondor pool, or show what it would do.

::

    coshare condor cycle [--policy NAME] [--threads strict|soft] [--dry-run] [-v]
                         [--output table|json]      read, plan, check, write (cron/systemd)
    coshare condor show  [--policy NAME] [--threads strict|soft] [-v] [--output table|json]

The commands are those of every scheduler adapter (:mod:`coshare.cycle_cli`). Registered
lazily in :data:`coshare.cli.LAZY_COMMANDS`, so other commands never import the bindings.
Exit statuses: 0 ok; 1 the pool could not be read or written; 2 bad configuration; 3 some
edits failed (those jobs are planned again next cycle).
"""

from __future__ import annotations

from coshare.config import Config
from coshare.cycle_cli import scheduler_group
from coshare.extras import load
from coshare.ports import Adapter

#: How an HTCondor user sets each value ``explain`` may advise to lower (submit file).
NAMES = {
    "device_memory_mib": "CoshareDeviceMemory", "device_threads": "CoshareDeviceThreads",
    "device_count": "CoshareDeviceCount", "cores": "request_cpus",
    "memory_mib": "request_memory", "processes": "CoshareProcesses",
}  # fmt: skip


def open_adapter(config: Config) -> Adapter:
    """The HTCondor adapter, imported only when a command runs: ``--help`` works without the
    bindings, and a missing ``condor`` extra is one message saying how to install it."""
    opener = load("condor_addon.adapter:open_adapter", "coshare condor")
    adapter: Adapter = opener(config)
    return adapter


condor = scheduler_group(
    "condor",
    "The HTCondor add-on: plan annotated idle jobs onto shared devices (needs the 'condor' "
    "extra: pip install 'coshare[condor]').",
    open_adapter,
    lambda config: config.condor.lock_file,
    NAMES,
)
