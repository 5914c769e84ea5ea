"""Reading an input file (or standard input) whole, but never more than a bound.

A snapshot, a config or a trace is read into memory and then parsed, so its size is the cost
of the command: ``coshare plan /dev/zero`` (or a runaway pipe into ``coshare plan -``) would
read until memory ran out. Each reader stops one character past its limit and says so.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TextIO

#: Bounds of what is read: a snapshot of 100,000 jobs is about 15 MB of JSON.
MAX_SNAPSHOT_CHARS = 256 << 20
MAX_CONFIG_CHARS = 4 << 20
MAX_TRACE_CHARS = 1 << 30


class TooLarge(ValueError):
    """The input holds more than its limit.

    Attributes:
        limit: the limit, in characters.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"larger than {limit >> 20} MiB, the most coshare reads")


def read_stream(stream: TextIO, limit: int) -> str:
    """All of ``stream``, or :class:`TooLarge` past ``limit`` characters."""
    text = stream.read(limit + 1)
    if len(text) > limit:
        raise TooLarge(limit)
    return text


def read_bounded(path: Path, limit: int) -> str:
    """All of the UTF-8 file at ``path``, or :class:`TooLarge` past ``limit`` characters.

    Raises:
        OSError: the file cannot be opened or read.
        UnicodeDecodeError: it is not UTF-8 text.
        TooLarge: it holds more than ``limit`` characters.
    """
    with path.open(encoding="utf-8") as stream:
        return read_stream(stream, limit)


class NotAFile(OSError):
    """A path that names something other than a regular file (a FIFO, a socket, a device), where
    only a file may be: opening a FIFO waits for a writer that may never come."""


def read_regular(path: Path, limit: int) -> str:
    """As :func:`read_bounded`, for a path that must name a regular file: anything else is
    refused before a byte is read (a FIFO is opened without waiting for a writer).

    Raises:
        NotAFile: ``path`` is a FIFO, socket, device or directory (its ``strerror`` says which).
        OSError, UnicodeDecodeError, TooLarge: as :func:`read_bounded`.
    """
    _refuse_unless_regular(os.stat(path).st_mode, path)
    # Opened without waiting, and checked again: it may have been swapped since the stat.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _refuse_unless_regular(os.fstat(fd).st_mode, path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, encoding="utf-8") as stream:
            fd = -1  # the stream closes it
            return read_stream(stream, limit)
    finally:
        if fd >= 0:
            os.close(fd)


def _refuse_unless_regular(mode: int, path: Path) -> None:
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "a device"
        )
        raise NotAFile(errno.EINVAL, f"not a regular file ({kind})", str(path))
