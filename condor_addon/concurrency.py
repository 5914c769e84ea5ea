"""HTCondor's concurrency limits, as the negotiator reads them (pure).

A job asks for limits in its ``ConcurrencyLimits`` attribute (submit command
``concurrency_limits``): a comma-separated list of ``name`` or ``name:amount`` (amount 1 when
left out), names compared without regard to case. The pool's configuration gives each limit
its maximum (HTCondor manual, "Concurrency Limits")::

    <NAME>_LIMIT                          the limit called name
    CONCURRENCY_LIMIT_DEFAULT_<PREFIX>    every limit called prefix.something without its own
    CONCURRENCY_LIMIT_DEFAULT             every other limit

and the negotiator matches a job only while, for each of its limits, what the running jobs
hold plus its amount stays within the maximum. What running jobs hold is read from the
claimed slots, whose ads carry their job's ``ConcurrencyLimits`` (the negotiator counts the
same ads). A limit no setting names is HTCondor's built-in default (2308032): no limit in
practice, and left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from coshare.ledger.bounds import BadValue, parse_number, plain

#: The most one job may ask of one limit, and the largest maximum read (HTCondor keeps them
#: as doubles; beyond this a value is a mistake).
MAX_AMOUNT = 10**9

#: HTCondor's own maximum when nothing is configured: no limit in practice.
BUILT_IN_DEFAULT = 2308032

#: A limit's name: what HTCondor accepts in a configuration key (letters, digits, ``_``,
#: ``.``), at most 128 characters.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]{0,127}")

ATTRIBUTE = "ConcurrencyLimits"
ALLOWED = (
    f"a comma-separated list of name or name:amount (names of letters, digits, _ and ., "
    f"amounts 0..{plain(MAX_AMOUNT)})"
)


def parse_request(value: object) -> dict[str, float]:
    """What a job's ``ConcurrencyLimits`` asks for: lower-cased name -> amount (a name listed
    twice adds up, as the negotiator counts each entry). ``None`` or empty: nothing.

    Raises:
        BadValue: not such a list (naming the attribute, the value and the allowed form).
    """
    if value is None:
        return {}
    if not isinstance(value, str):
        raise BadValue(ATTRIBUTE, value, ALLOWED, "is not a string")
    asked: dict[str, float] = {}
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, amount_text = entry.partition(":")
        name = name.strip()
        amount = parse_number(amount_text) if sep else 1.0
        if not _NAME.fullmatch(name):
            raise BadValue(ATTRIBUTE, value, ALLOWED, f"names a limit {name!r} HTCondor cannot")
        if amount is None or not 0 <= amount <= MAX_AMOUNT:
            raise BadValue(ATTRIBUTE, value, ALLOWED, f"asks {amount_text.strip()!r} of {name}")
        key = name.lower()
        asked[key] = asked.get(key, 0.0) + amount
    return asked


def limit_maximum(name: str, config: Mapping[str, str]) -> tuple[str, float] | None:
    """A limit's maximum from the pool's configuration, with the key it came from.

    Args:
        name: the limit, lower-cased (as :func:`parse_request` gives it).
        config: the negotiator's settings, keys upper-cased (:func:`config_keys`).

    Returns:
        ``(key, maximum)``, or ``None`` when no setting names it.

    Raises:
        BadValue: the setting is not a number 0..:data:`MAX_AMOUNT`.
    """
    keys = [f"{name.upper()}_LIMIT"]
    if "." in name:
        keys.append(f"CONCURRENCY_LIMIT_DEFAULT_{name.split('.', 1)[0].upper()}")
    keys.append("CONCURRENCY_LIMIT_DEFAULT")
    for key in keys:
        text = config.get(key)
        if text is None:
            continue
        number = parse_number(text)
        if number is None or not 0 <= number <= MAX_AMOUNT:
            raise BadValue(key, text, f"a number 0..{plain(MAX_AMOUNT)}")
        if key == "CONCURRENCY_LIMIT_DEFAULT" and number == BUILT_IN_DEFAULT:
            return None
        return key, number
    return None


def wanted_setting(key: str) -> bool:
    """Whether a configuration key may give a concurrency limit's maximum."""
    upper = key.upper()
    return upper.endswith("_LIMIT") or upper.startswith("CONCURRENCY_LIMIT_DEFAULT")


def config_keys(settings: Mapping[str, object]) -> dict[str, str]:
    """The negotiator's settings with upper-cased keys (HTCondor's keys ignore case); values
    that are not text are dropped."""
    return {k.upper(): v for k, v in settings.items() if isinstance(v, str)}
