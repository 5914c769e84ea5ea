"""How coshare's long-running commands log: one set-up, two formats.

::

    --log-format text   2025-01-31 12:00:00,123 coshare.cycle INFO cycle done [placed=6 ...]
    --log-format json   {"time": "2025-01-31T12:00:00.123Z", "level": "info",
                         "logger": "coshare.cycle", "message": "cycle done", "pid": 4711,
                         "placed": 6, ...}

Every command that runs for long or unattended (``coshare condor|slurm cycle``, ``coshare
condor trigger``, ``coshare node gate``, ``coshare node watch``) takes
:func:`log_format_option` and calls :func:`setup_logging`; nothing else installs handlers.
Structured fields are passed the standard way, ``log.info("...", extra={"job": "12.0",
"phase": "apply"})``: the JSON format writes them as keys of the object (one object per line,
so a log shipper needs no parser), the text format appends them as ``[key=value ...]``.

Why not a library: python-json-logger would add a dependency for one ``format`` method, and
the fields a record carries are exactly those given in ``extra``, which the standard
``LogRecord`` already holds.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import math
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import click

LOG_FORMATS = ("text", "json")

#: Attributes every ``LogRecord`` has (plus those ``Formatter.format`` adds): the rest of a
#: record's ``__dict__`` are the structured fields its caller gave in ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}

#: HTCondor's daemon logs start each line with the date as ``%m/%d/%y %H:%M:%S``; the
#: trigger daemon under condor_master writes its text lines the same way.
CONDOR_DATE_FORMAT = "%m/%d/%y %H:%M:%S"

#: Rotation of a log file, as HTCondor's daemons do it (``MAX_<SUBSYS>_LOG`` is 10 MB and one
#: old file, ``<file>.old``, is kept by default).
MAX_LOG_BYTES = 10 * 1000 * 1000

_HANDLER_NAME = "coshare"


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record: what its caller passed in ``extra``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _plain(value: object) -> object:
    """A field value JSON can hold as it is; anything else as its text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601, milliseconds), ``level``,
    ``logger``, ``message``, ``pid``, the record's structured fields, and ``exception`` (the
    traceback text) when there is one. A field named like one of the first five keeps the
    record's own value (a caller cannot forge the level or the time)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, timezone.utc)
        out: dict[str, object] = {
            "time": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in fields_of(record).items():
            out.setdefault(key, _plain(value))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, separators=(", ", ": "))


class TextFormatter(logging.Formatter):
    """The classic one-line format, with the structured fields appended as
    ``[key=value ...]`` so that nothing of a record is lost in text either."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = fields_of(record)
        if not fields:
            return line
        text = " ".join(f"{k}={_plain(v)}" for k, v in fields.items())
        head, sep, tail = line.partition("\n")  # a traceback stays below the first line
        return f"{head} [{text}]{sep}{tail}"


def make_formatter(fmt: str, text_format: str, date_format: str | None = None) -> logging.Formatter:
    """The formatter of a ``--log-format`` value (``text_format`` is the text layout)."""
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter(text_format, date_format)
    raise ValueError(f"unknown log format {fmt!r} (allowed: {', '.join(LOG_FORMATS)})")


def setup_logging(
    fmt: str,
    level: int,
    *,
    text_format: str = "%(asctime)s %(name)s %(levelname)s %(message)s",
    date_format: str | None = None,
    stream: TextIO | None = None,
    file: Path | None = None,
) -> logging.Handler:
    """Send every coshare log record to one handler, in format ``fmt``.

    Replaces the handler an earlier call installed (a command sets logging up once, in its
    entry point; tests call it again).

    Args:
        fmt: ``text`` or ``json``.
        level: the least level written.
        text_format: the ``logging`` layout of the text format.
        date_format: ``strftime`` layout of the text format's time (default ISO-like).
        stream: where to write (default standard error), unless ``file`` is given.
        file: a log file, rotated at :data:`MAX_LOG_BYTES` into ``<file>.old``.

    Returns:
        the handler installed.
    """
    handler: logging.Handler
    if file is not None:
        rotating = logging.handlers.RotatingFileHandler(
            file, maxBytes=MAX_LOG_BYTES, backupCount=1, encoding="utf-8"
        )
        rotating.namer = _old_name
        handler = rotating
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(make_formatter(fmt, text_format, date_format))
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:  # ours, from an earlier call; others stay
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def _old_name(name: str) -> str:
    """``LOG.1`` -> ``LOG.old``: the one old file HTCondor's daemons keep."""
    return name[:-2] + ".old" if name.endswith(".1") else name


def log_format_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--log-format text|json``: the one definition every long-running command shares."""
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default="text",
        show_default=True,
        help="json: each log record as one JSON object per line (time, level, logger, "
        "message, and fields such as job and phase), for log shippers.",
    )(func)
