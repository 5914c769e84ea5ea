"""``coshare-slurm-facts``: carry a node's facts into its Slurm record (root, on each node).

coshare's node daemon writes the node's facts (each running job's CPU load, the memory
bandwidth probe, LLC ways) to ``node.state_dir/facts`` every ``node.sample_interval_s``. This
program writes that line into the node's ``Extra`` field::

    scontrol update NodeName=<node> Extra=coshare-facts;v=1;at=...;...

where ``sinfo --json`` returns it (``extra``) to the planner (checked on the local Slurm
22.05 cluster: the field takes 20,000 characters and comes back whole). Only Slurm's
operators may update a node (``SlurmUser``, root, or an ``AdminLevel``): a user's ``scontrol
update NodeName=... Extra=...`` is refused ("Invalid user id"), so no user can forge facts
for a node. On a real cluster root on a compute node is such an operator (munge says uid 0).

::

    coshare-slurm-facts [--node NAME] [--interval-s S]

``--node`` is the node's Slurm name (default ``$SLURMD_NODENAME``, else the short host name);
with ``--interval-s`` it writes every S seconds until SIGTERM (as a service), else once (from
``deploy/slurm/coshare-slurm-facts.timer``). A facts file that is missing, unreadable or not
a facts line is not written: what was written last ages in Slurm and the planner ignores it
once older than ``cycle.node_facts_max_age_s``. The configuration is coshare's
(``$COSHARE_CONFIG`` or ``/etc/coshare/config.yaml``): ``node.state_dir`` and the ``slurm``
section (``config_file``, ``bin_dir``, ``command_timeout_s``).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from coshare.config import load_config
from coshare.errors import CoshareError, FactsError
from coshare.ledger.bounds import parse_number
from coshare.ledger.facts import MAX_FACTS_CHARS, parse_facts

from slurm_addon.client import SlurmClient
from slurm_addon.placement import is_safe_token


def read_facts(path: Path) -> str:
    """The facts line at ``path``, checked (never write what the planner cannot read).

    Raises:
        FactsError: missing, unreadable, too long or not a facts line.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FACTS_CHARS + 2)
    except OSError as exc:
        raise FactsError(
            f"cannot read {path}: {exc.strerror} (is the node daemon running?)"
        ) from exc
    text = data.decode("ascii", errors="replace").strip()
    parse_facts(text)
    return text


#: Longest --interval-s: a day (the planner ignores facts older than
#: cycle.node_facts_max_age_s long before).
MAX_INTERVAL_S = 86400.0


def interval_s(text: str) -> float:
    """``--interval-s``: seconds in 0..:data:`MAX_INTERVAL_S` (NaN and infinities refused:
    ``nan`` made a busy loop, ``inf`` a traceback).

    Raises:
        argparse.ArgumentTypeError: naming the value and the range.
    """
    value = parse_number(text)
    if value is None or not math.isfinite(value) or not 0 <= value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a number of seconds in 0..{MAX_INTERVAL_S:g}"
        )
    return value


def node_name(given: str | None, environ: Mapping[str, str]) -> str:
    """The node's Slurm name: ``given``, else ``SLURMD_NODENAME``, else the short host name.

    Raises:
        FactsError: a name Slurm commands cannot be given safely.
    """
    name = given or environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not is_safe_token(name):
        raise FactsError(f"node name {name[:60]!r} cannot be written (letters, digits, . _ -)")
    return name


def publish(client: SlurmClient, node: str, path: Path, last: str | None = None) -> str | None:
    """Write the node's facts into its ``Extra`` field unless they are what was written last.

    Returns:
        the line now in Slurm (``last`` when nothing new was written).

    Raises:
        FactsError: the facts file cannot be read as facts.
        SchedulerError: scontrol refused, or slurmctld did not answer.
    """
    text = read_facts(path)
    if text == last:
        return last
    error = client.update_node_extra(node, text)
    if error is not None:
        raise FactsError(f"scontrol update NodeName={node} Extra=... failed: {error[:300]}")
    return text


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``coshare-slurm-facts``."""
    parser = argparse.ArgumentParser(
        prog="coshare-slurm-facts",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node", default=None, help="the node's Slurm name")
    parser.add_argument(
        "--interval-s",
        type=interval_s,
        default=0.0,
        help="write every S seconds until SIGTERM (default: once)",
    )
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    try:
        config = load_config(environ=environ)
        node = node_name(args.node, environ)
    except CoshareError as exc:
        print(f"coshare-slurm-facts: {exc}", file=sys.stderr)
        sys.exit(2)
    client = SlurmClient(config.slurm)
    path = Path(config.node.state_dir) / "facts"
    if args.interval_s <= 0:
        try:
            publish(client, node, path)
        except CoshareError as exc:
            print(f"coshare-slurm-facts: {exc}", file=sys.stderr)
            sys.exit(1)
        return
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _s, _f: stop.set())
    last: str | None = None
    while not stop.is_set():
        try:
            last = publish(client, node, path, last)
        except CoshareError as exc:  # the next round may succeed (a daemon restarting)
            print(f"coshare-slurm-facts: {exc}", file=sys.stderr, flush=True)
        stop.wait(args.interval_s)
