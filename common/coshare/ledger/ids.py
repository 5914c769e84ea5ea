"""What a node name, device id or job id may be: the one check every boundary applies
(and :func:`text_problem` for other text taken from input).

Ids are compared as exact strings everywhere behind the boundary, so two ids that differ only
in invisible ways must never both get in: ``" 0"`` and ``"0"`` would be two devices to the
snapshot and one to a person (a running job on ``" 0"`` was counted on ``"0"``).
Rather than guess which one was meant, an id with white space at either end, a control,
format or line-separator character, a lone surrogate, or more than :data:`MAX_ID_CHARS`
characters is refused where it enters (the snapshot parser, the adapters' readers), with
:func:`id_problem` saying why. White space *inside* an id is fine (HTCondor node names may hold
it). Lists of ids (``"0,1"``, ``"0, 1"``) are split by :func:`split_ids`, which strips the
white space around each comma as list syntax.

Pure: no I/O.
"""

from __future__ import annotations

import unicodedata

from coshare.ledger.bounds import BadValue

MAX_ID_CHARS = 256

#: Longest free text (a device model, a program name, a reason) taken from input.
MAX_TEXT_CHARS = 1024

#: Unicode categories an id may not hold: controls, format characters (bidirectional
#: overrides that reorder what an admin reads), surrogates, private use, unassigned, line and
#: paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

#: For messages: what an id may be.
ALLOWED_ID = f"1..{MAX_ID_CHARS} characters, no white space at either end, no control characters"


def text_problem(text: str, max_chars: int) -> str | None:
    """Why ``text`` cannot be shown to a person or written to a scheduler as it is (a control
    or invisible character, or too long); ``None`` when it can."""
    if len(text) > max_chars:
        return f"is longer than {max_chars} characters"
    if text.isascii() and text.isprintable():  # the usual case, without a loop in Python
        return None
    for char in text:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return f"holds the character {char!a}"
    return None


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a node name, device id or job id; ``None`` when it can.

    Example: ``id_problem(" 0")`` is ``"has white space at its start or end"``.
    """
    if not isinstance(value, str):
        return "is not a string"
    if not value:
        return "is empty"
    if value[0].isspace() or value[-1].isspace():
        return "has white space at its start or end"
    return text_problem(value, MAX_ID_CHARS)


def checked_id(field: str, value: object) -> str:
    """``value`` when it can be an id (:func:`id_problem`), for readers of scheduler records.

    Raises:
        BadValue: naming ``field``, the value and why it cannot be an id.
    """
    problem = id_problem(value)
    if problem is not None or not isinstance(value, str):
        raise BadValue(field, value, ALLOWED_ID, problem or "is not a string")
    return value


def split_ids(text: str | None) -> tuple[str, ...]:
    """A comma-separated list of ids (``"0,1"``, ``"0, 1"``); empty or ``None`` -> ``()``.

    The white space around each comma is list syntax and is dropped; the parts are checked
    with :func:`id_problem` by the caller."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())
