"""``coshare condor``: run a planning cycle on an HTCondor pool, or show what it would do.

::

    coshare condor cycle [--policy NAME] [--threads strict|soft] [--dry-run] [-v]
                         [--output table|json]      read, plan, check, write (cron/systemd)
    coshare condor show  [--policy NAME] [--threads strict|soft] [-v] [--output table|json]
    coshare condor trigger [--policy NAME] [--threads strict|soft] [--log-file PATH]
                           [--log-format text|json] [-v]
                                                    cycles in step with the negotiator, a
                                                    daemon under condor_master (DAEMON_LIST)

``cycle`` and ``show`` are those of every scheduler adapter (:mod:`coshare.cli.scheduler`);
``trigger`` is HTCondor's own (:mod:`condor_addon.trigger`). Registered lazily in
:data:`coshare.cli.main.LAZY_COMMANDS`, so other commands never import the bindings.
Exit statuses: 0 ok; 1 the pool could not be read or written; 2 bad configuration; 3 some
edits failed (those jobs are planned again next cycle).
"""

from __future__ import annotations

import logging
from pathlib import Path

import click
from coshare.cli.extras import load
from coshare.cli.logs import CONDOR_DATE_FORMAT, log_format_option, setup_logging
from coshare.cli.main import AppContext, configured, pass_app, policy_flags
from coshare.cli.scheduler import scheduler_group
from coshare.config import Config
from coshare.errors import CoshareError
from coshare.ports import Adapter

#: How an HTCondor user sets each value ``explain`` may advise to lower (submit file).
NAMES = {
    "device_memory_mib": "CoshareDeviceMemory",
    "device_threads": "CoshareDeviceThreads",
    "device_count": "CoshareDeviceCount",
    "cores": "request_cpus",
    "memory_mib": "request_memory",
    "processes": "CoshareProcesses",
}


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


@condor.command()
@policy_flags
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Log here (rotated at 10 MB into FILE.old, as HTCondor's daemon logs) "
    "instead of standard error; under condor_master: $(LOG)/CoshareTriggerLog.",
)
@log_format_option
@click.option("--verbose", "-v", is_flag=True, help="Also log every negotiation cycle seen.")
@pass_app
def trigger(
    app: AppContext,
    policy_name: str | None,
    threads: str | None,
    seed: int | None,
    log_file: Path | None,
    log_format: str,
    verbose: bool,
) -> None:
    """Run planning cycles in step with the negotiator: each just before a negotiation cycle
    is due, so a job placed now matches in that negotiation. A daemon: condor_master starts
    it (DAEMON_LIST, deploy/condor/config.d/30-coshare-trigger.conf), restarts it when it
    exits, stops it with SIGTERM; SIGHUP reloads the configuration."""
    from condor_addon import trigger as daemon  # the bindings only when it runs

    setup_logging(
        log_format,
        logging.DEBUG if verbose else logging.INFO,
        text_format="%(asctime)s (pid:%(process)d) %(levelname)s %(message)s",
        date_format=CONDOR_DATE_FORMAT,
        file=log_file,
    )

    def load_config() -> Config:  # at start, and again on SIGHUP: the file as it is now
        return configured(AppContext(app.config_path), policy_name, threads, seed)

    try:
        daemon.main(load_config)
    except CoshareError as exc:  # into the daemon's own log too: nobody reads the master's
        logging.getLogger("coshare.condor.trigger").error("cannot run: %s", exc)
        raise
