"""The largest values coshare accepts, one grammar for numbers written as text, and a bounded
way to echo any input value in a message.

Every number that reaches the planner from a job, a snapshot, a trace or a setting is checked
against a maximum here before it is used. The maxima are far above any real cluster
(a node of a million cores, a device of 1 TiB) yet small enough that sums of them over a whole
cluster stay exact in the policies' 64-bit arrays: a value at its maximum must never crash a
policy, only be refused when nothing can hold it.

=========================  ==============  ==============================================
value                      maximum         why
=========================  ==============  ==============================================
cores (node, or process)   2**20           sums over 10**6 jobs stay < 2**63 in cpu_milli
host memory MiB            2**30 (1 PiB)   likewise in MiB
device memory MiB          2**20 (1 TiB)   the knapsack's grid stays bounded (memory/grid)
device threads             2**24           GPUs: SMs x 2048 (an H100: 270,336)
devices (node, or job)     1024
processes of one job       2**20           cores x processes stays <= 2**50 in cpu_milli
nodes of one job (gang)    2**20           no more nodes than processes
LLC ways                   1024
memory bandwidth GB/s      10**6
copy bandwidth MB/s        10**9
walltime s                 10**9           about 31 years
times (submit, now) s      +-10**12        epoch seconds, with room for any clock
priority                   +-2**53         exact as a float, too
=========================  ==============  ==============================================

Numbers written as text (annotations, trace fields) follow one rule for every key: ASCII
decimal digits with an optional sign, fraction and exponent (``120``, ``1.5``, ``2e3``), at
most :data:`MAX_NUMBER_CHARS` characters. ``inf``, ``nan``, ``1_000``, ``0x10`` and digits of
other scripts (``١٢٠``, which Python's ``float`` accepts) are not numbers here.

Numbers read from a scheduler's own records (a slot's cores, a node's memory, a device's
threads) are checked by :func:`bounded`, which refuses with a :class:`BadValue` naming the
field, the value and the range; the adapters turn that into a note naming the node (the node
is left out) or a refusal naming the job, never a stopped cycle.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
import math
import re
import reprlib

from coshare.model import MAX_DEVICE_MEMORY_MIB as MAX_DEVICE_MEMORY_MIB  # defined with DeviceKind
from coshare.model import MAX_DEVICE_THREADS as MAX_DEVICE_THREADS
from coshare.model import MILLI

MAX_CORES = 2**20
MAX_CPU_MILLI = MAX_CORES * MILLI
MAX_MEMORY_MIB = 2**30
MAX_DEVICES = 1024
MAX_PROCESSES = 2**20
MAX_JOB_NODES = MAX_PROCESSES
MAX_LLC_WAYS = 1024
MAX_MEMBW_GBPS = 10**6
MAX_COPY_BW_MBPS = 10**9
MAX_WALLTIME_S = 10**9
MAX_TIME_S = 10**12
MAX_PRIORITY = 2**53

#: What one ``coshare simulate`` (or ``coshare demo``) may ask for: jobs of one simulated
#: run, nodes of one cluster, seeds, sizes of a sweep, worker processes, and jobs summed over
#: every run of the command. A run holds about :data:`SIM_KIB_PER_JOB` KiB per job (measured:
#: table1 with 2,000 and 8,000 jobs, peak RSS 60 and 100 MB) and its time grows faster than
#: its job count (8 nodes: 2,000 jobs 11 s, 8,000 jobs 146 s), so ``--jobs 1000000`` is
#: refused with the estimate instead of running out of memory hours later.
MAX_SIM_JOBS = 100_000
MAX_SIM_NODES = 10_000
MAX_SIM_SEEDS = 1_000
MAX_SIM_SIZES = 64
MAX_SIM_WORKERS = 64
MAX_SIM_TOTAL_JOBS = 2_000_000
SIM_KIB_PER_JOB = 7

#: Longest number written as text; longer ones are refused before they are converted.
MAX_NUMBER_CHARS = 40

#: How many characters of an input value a message shows.
SHOWN_CHARS = 60

#: The one grammar of a number written as text (a regular expression, ASCII digits only).
NUMBER_PATTERN = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER = re.compile(NUMBER_PATTERN)


def plain(bound: float) -> str:
    """A bound as people write it in a message: ``1048576``, not ``1.04858e+06``."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def parse_number(text: str) -> float | None:
    """A number written as text, by the one rule above; ``None`` when it is not one.

    Too large a number (``1e400``) is returned as an infinity, so the caller's range check
    refuses it as too large rather than as not a number.
    """
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS or not _NUMBER.fullmatch(text):
        return None
    return float(text)


def as_float(value: object) -> float | None:
    """A JSON or ClassAd number as a float: ``None`` for anything else (``True``, text, NaN);
    an integer too large for a float becomes an infinity of its sign."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return None if math.isnan(value) else value


class _Shortener(reprlib.Repr):
    """``reprlib`` with every dimension bounded, integers too (a 5,000-digit integer cannot
    even be turned into text under Python's int-string limit)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxset = self.maxdict = 4
        self.maxstring = SHOWN_CHARS
        self.maxlong = self.maxother = SHOWN_CHARS

    def repr_int(self, x: int, level: int) -> str:
        digits = int(x.bit_length() * 0.30103) + 1
        if digits > 30:
            return f"<an integer of about {digits} digits>"
        return super().repr_int(x, level)

    def repr_str(self, x: str, level: int) -> str:
        # repr() escapes control characters and lone surrogates, so the message is printable.
        if len(x) <= self.maxstring:
            return repr(x)
        return repr(x[: self.maxstring - 3]) + f"... ({len(x)} characters)"


_SHORTENER = _Shortener()


def shorten_text(text: str) -> str:
    """Text from the input (a key, a name) to show without quotes: at most
    :data:`SHOWN_CHARS` characters, control characters and lone surrogates escaped."""
    cut = text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
    return cut if cut.isprintable() else repr(cut)[1:-1]


def unknown_name(noun: str, value: object, known: list[str]) -> str:
    """``unknown policy 'knapsak' (did you mean knapsack? known: ...)``: a name that is not
    one of ``known``, shown bounded, with the nearest known name when one is close."""
    near = difflib.get_close_matches(str(value)[:200], known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"unknown {noun} {shorten(value)} ({hint}known: {', '.join(known)})"


def shorten(value: object) -> str:
    """A value from the input, as a message may show it: at most about
    :data:`SHOWN_CHARS` characters, however large, deep or self-referencing the value is
    (a YAML "billion laughs" shares one list a billion times: its full repr would never end).
    Strings keep their quotes; control characters and lone surrogates are escaped."""
    try:
        text = _SHORTENER.repr(value)
    except (RecursionError, ValueError):  # an exotic object whose repr fails
        text = f"<a {type(value).__name__}>"
    if len(text) > 4 * SHOWN_CHARS:
        text = text[: 4 * SHOWN_CHARS] + "..."
    return (
        text.encode("ascii", "backslashreplace").decode("ascii") if not text.isprintable() else text
    )


class BadValue(ValueError):
    """A value of a scheduler's record that coshare refuses (a node's cores of ``1e300``, a
    NaN, a device id with a line break): one message naming the field, the value (shortened)
    and what is allowed. A ``ValueError``, so that a reader that skips unreadable records
    skips it too; the adapters say which node or job it belongs to.

    Attributes:
        field: the field as the scheduler names it (``TotalSlotCpus``, ``real_memory``).
        shown: the value, shortened for a message.
        why: what is wrong (``is outside what coshare accepts``).
        allowed: the allowed range or form.
    """

    def __init__(
        self, field: str, value: object, allowed: str, why: str = "is outside what coshare accepts"
    ) -> None:
        self.field = field
        self.shown = shorten(value)
        self.why = why
        self.allowed = allowed
        super().__init__(f"{shorten_text(field)}={self.shown} {why} (allowed: {allowed})")


def bounded(field: str, value: object, maximum: float, *, minimum: float = 0.0) -> float:
    """A number of a scheduler's record (a JSON or ClassAd number) within
    ``minimum..maximum``; ``True``, text, NaN and infinities are refused, as are integers too
    large for a float.

    Raises:
        BadValue: naming ``field``, the value and the range.
    """
    number = as_float(value)
    if number is None or not minimum <= number <= maximum:
        why = (
            "is not a number"
            if number is None
            else "is outside what coshare accepts"
            if math.isfinite(number) or isinstance(value, int)
            else "is not a finite number"
        )
        raise BadValue(field, value, f"a number {plain(minimum)}..{plain(maximum)}", why)
    return number
