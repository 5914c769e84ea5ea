"""Optional parts of coshare and the extra that installs each.

``pip install coshare`` (what ``make demo`` does) installs the core only; the scheduler
adapters and some node and simulator features need an *extra*::

    pip install 'coshare[condor]'    htcondor (the htcondor2 and classad2 bindings)
    pip install 'coshare[slurm]'     python-hostlist
    pip install 'coshare[nvml]'      nvidia-ml-py (pynvml)
    pip install 'coshare[plot]'      matplotlib
    pip install 'coshare[coord]'     psycopg 3 (several planners over shared nodes, PostgreSQL)
    pip install 'coshare[planner]'   numpy: planning (the central manager), the simulator, the
                                     node's memory-bandwidth probe
    pip install 'coshare[bound]'     scipy (and numpy): the simulator's packing bound

Compute nodes need none of them: their commands (``coshare node ...``) and every ``--help``
load no numpy.

Commands are always listed and their ``--help`` always prints; a command that needs an
extra that is missing says which one to install when it is run (:func:`load`), never a
traceback.

Pure: importing modules is all it does.
"""

from __future__ import annotations

import importlib
from typing import Any

from coshare.errors import CoshareError

#: The extra that installs each third-party module some part of coshare imports.
EXTRA_OF_MODULE: dict[str, str] = {
    "htcondor": "condor",
    "htcondor2": "condor",
    "classad": "condor",
    "classad2": "condor",
    "hostlist": "slurm",
    "pynvml": "nvml",
    "matplotlib": "plot",
    "psycopg": "coord",
    "numpy": "planner",
    "scipy": "bound",
}


class MissingExtra(CoshareError):
    """A command needs an optional dependency that is not installed (exit status 1).

    Attributes:
        extra: the extra that installs it (``condor``).
        module: the module that is missing (``classad2``).
    """

    def __init__(self, what: str, extra: str, module: str) -> None:
        self.extra = extra
        self.module = module
        super().__init__(
            f"{what} needs the '{extra}' extra (module {module!r} is not "
            f"installed): pip install 'coshare[{extra}]'"
        )


def missing_extra(exc: ImportError) -> tuple[str, str] | None:
    """``(extra, module)`` when ``exc`` is a missing module that an extra installs."""
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return (extra, top) if extra is not None else None


def load(target: str, what: str) -> Any:
    """``module:attribute``, imported now.

    Args:
        target: ``"condor_addon.adapter:open_adapter"``.
        what: what needs it, for the message (``coshare condor``).

    Raises:
        MissingExtra: the module (or one it imports) belongs to an extra not installed.
    """
    module, _, attribute = target.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise MissingExtra(what, *found) from exc
    return getattr(loaded, attribute) if attribute else loaded
