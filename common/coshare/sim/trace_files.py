"""Reading trace files (the I/O half; the parsers are pure, in :mod:`coshare.sim.traces`).

The project's traces live in the shared folder next to the project, ``../shared/data``
relative to the project root (``data/README.md`` there describes them); they are read in
place, never copied into the repository. ``COSHARE_TRACE_DIR`` or ``--data`` point elsewhere.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coshare.errors import InputError
from coshare.model import Node
from coshare.sim.traces import (
    SwfTrace,
    TracePod,
    parse_alibaba_nodes,
    parse_alibaba_pods,
    parse_swf,
    parse_swf_machines,
)
from coshare.system.files import MAX_TRACE_CHARS, TooLarge, read_bounded

#: The Alibaba GPU-sharing trace's folder and files, under the data folder.
ALIBABA_DIR = "alibaba-gpu-v2023"
ALIBABA_NODES = "openb_node_list_gpu_node.csv"
ALIBABA_PODS = "openb_pod_list_default.csv"


def data_dir(explicit: Path | None = None) -> Path:
    """Where the traces are: ``explicit``, else ``$COSHARE_TRACE_DIR``, else
    ``../shared/data`` from the project root (this file is
    ``common/coshare/sim/trace_files.py``)."""
    if explicit is not None:
        return explicit
    env = os.environ.get("COSHARE_TRACE_DIR")
    if env:
        return Path(env)
    # Never the current directory: a command must mean the same wherever it is run from.
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def _read(path: Path) -> str:
    return read_records(str(path), "trace")


def read_records(path: str, what: str) -> str:
    """A trace, or a saved scheduler output (``sacct --json``, ``condor_history -json``, the
    nodes' listing) named by option ``what``, whole, up to the trace bound.

    Raises:
        InputError: it cannot be read, is too large or is not UTF-8 text (naming ``what``).
    """
    try:
        return read_bounded(Path(path), MAX_TRACE_CHARS)
    except TooLarge as exc:
        raise InputError(f"{what} {path}: not read: {exc}") from exc
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not UTF-8 text") from exc


@dataclass(frozen=True)
class AlibabaTrace:
    """The Alibaba GPU nodes and pods."""

    nodes: tuple[Node, ...]
    pods: tuple[TracePod, ...]


def read_alibaba(
    folder: Path, nodes_file: str = ALIBABA_NODES, pods_file: str = ALIBABA_PODS
) -> AlibabaTrace:
    """The node and pod lists of an Alibaba ``openb`` trace folder.

    Raises:
        InputError: a file is missing, unreadable or malformed.
    """
    if not folder.is_dir():
        raise InputError(
            f"no Alibaba trace folder at {folder}: pass --data DIR (or set "
            f"COSHARE_TRACE_DIR) to the folder that holds {folder.name}/"
        )
    nodes_path, pods_path = folder / nodes_file, folder / pods_file
    return AlibabaTrace(
        parse_alibaba_nodes(_read(nodes_path), str(nodes_path)),
        parse_alibaba_pods(_read(pods_path), str(pods_path)),
    )


#: The longest line a streamed trace may have (a record of 18 numbers is under 200 bytes):
#: a stream is not bounded in length, so each line is.
MAX_LINE_CHARS = 64 << 10


def stream_lines(path: Path) -> Iterator[str]:
    """The lines of the UTF-8 text file at ``path``, read one at a time: no bound on the
    file's size (memory holds one line), but each line at most :data:`MAX_LINE_CHARS`. A name
    ending in ``.gz`` is gzip-compressed (as the Parallel Workloads Archive publishes its
    logs) and is decompressed as it is read.

    Raises:
        InputError: the file cannot be opened or read, is not UTF-8, is not valid gzip (a
            ``.gz``), or has a longer line.
    """
    try:
        with _open_text(path) as stream:
            for number in itertools.count(1):
                line = stream.readline(MAX_LINE_CHARS + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_CHARS:
                    raise InputError(
                        f"trace {path} line {number}: longer than {MAX_LINE_CHARS} characters"
                    )
                yield line
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"trace {path} is not a whole gzip file: {exc}") from exc
    except OSError as exc:
        raise InputError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"trace {path} is not UTF-8 text") from exc


def _open_text(path: Path) -> io.TextIOWrapper:
    """``path`` opened as UTF-8 text, through gzip when its name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open(encoding="utf-8")


def machines_path(path: Path) -> Path | None:
    """The ``.machines`` file beside SWF file ``path``, if there is one: ``X.swf.machines``
    for ``X.swf``; for a compressed ``X.swf.gz``, ``X.swf.gz.machines`` or else
    ``X.swf.machines``."""
    names = [path.name + ".machines"]
    if path.name.endswith(".gz"):
        names.append(path.name[: -len(".gz")] + ".machines")
    return next((path.with_name(n) for n in names if path.with_name(n).exists()), None)


def read_machines(path: Path) -> tuple[Node, ...] | None:
    """The nodes of the ``.machines`` file beside SWF file ``path``, if there is one
    (:func:`machines_path`)."""
    machines = machines_path(path)
    return parse_swf_machines(_read(machines), str(machines)) if machines is not None else None


def read_swf(path: Path) -> tuple[SwfTrace, tuple[Node, ...] | None]:
    """An SWF file (``.swf`` or ``.swf.gz``) and, when a ``.machines`` file sits beside it,
    its nodes.

    Raises:
        InputError: the file is missing, unreadable or malformed.
    """
    lines = stream_lines(path) if path.name.endswith(".gz") else _read(path).splitlines()
    return parse_swf(lines, str(path)), read_machines(path)
