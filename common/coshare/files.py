"""Reading an input file (or standard input) whole, but never more than a bound.

A snapshot, a config or a trace is read into memory and then parsed, so its size is the cost
of the command: ``coshare plan /dev/zero`` (or a runaway pipe into ``coshare plan -``) would
read until memory ran out. Each reader stops one character past its limit and says so
(issue 11).
"""

from __future__ import annotations

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
