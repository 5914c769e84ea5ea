"""What the typed definition of each field allows, as the per-field checker of
:mod:`coshare.schema` needs it for its messages (``an integer 0..1048576``, ``a number > 0
and <= 1``, ...): so the checker's bounds are the definitions' own."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, get_args, get_origin, get_type_hints

from msgspec import Struct, inspect

#: The "no maximum" of a number without one (the checker shows no bound then).
NO_MAXIMUM = 1e18
#: The "no maximum" of an integer without one.
NO_INT_MAXIMUM = 2**53


@dataclass(frozen=True)
class FieldSpec:
    """One field: ``kind`` (``int``, ``float``, ``id``, ``text``, ``devices``, ``choice``,
    ``array``, ``object``, ``struct``), its bounds (``low`` .. ``high``, ``low`` excluded
    with ``exclusive``; for text and arrays ``high`` is the most characters or entries) and
    the choices of a ``choice``."""

    kind: str
    low: float = 0.0
    high: float = NO_MAXIMUM
    exclusive: bool = False
    choices: tuple[str, ...] = ()


@cache
def _specs(doc: type[Struct]) -> dict[str, FieldSpec]:
    info = inspect.type_info(doc)
    assert isinstance(info, inspect.StructType)
    hints = get_type_hints(doc, include_extras=True)
    out = {}
    for f in info.fields:
        spec = _spec(f.type)
        if spec.kind == "choice":  # in the order written (the messages list them so)
            spec = FieldSpec("choice", choices=_literal(hints[f.name]))
        out[f.encode_name] = spec
    return out


def _literal(hint: Any) -> tuple[str, ...]:
    """The values of the ``Literal`` inside ``hint`` (``Annotated``, ``| None`` around it)."""
    if get_origin(hint) is Literal:
        return tuple(get_args(hint))
    for arg in get_args(hint):
        values = _literal(arg)
        if values:
            return values
    return ()


def field_spec(doc: type[Struct], key: str) -> FieldSpec:
    """What field ``key`` of struct ``doc`` allows."""
    return _specs(doc)[key]


def _spec(t: inspect.Type) -> FieldSpec:
    if isinstance(t, inspect.UnionType):
        (t,) = [k for k in t.types if not isinstance(k, inspect.NoneType)]
    extra: dict[str, Any] = {}
    if isinstance(t, inspect.Metadata):
        extra = t.extra or {}
        t = t.type
    if isinstance(t, inspect.IntType):
        return FieldSpec(
            "int",
            low=t.ge if t.ge is not None else 0,
            high=t.le if t.le is not None else NO_INT_MAXIMUM,
        )
    if isinstance(t, inspect.FloatType):
        low = t.gt if t.gt is not None else t.ge
        return FieldSpec(
            "float",
            low=low if low is not None else 0.0,
            high=t.le if t.le is not None else NO_MAXIMUM,
            exclusive=t.gt is not None,
        )
    if isinstance(t, inspect.StrType):
        return FieldSpec(extra.get("check", "text"), high=t.max_length or NO_MAXIMUM)
    if isinstance(t, inspect.LiteralType):
        return FieldSpec("choice", choices=tuple(str(v) for v in t.values))
    if isinstance(t, inspect.ListType):
        return FieldSpec("array", high=t.max_length or NO_MAXIMUM)
    if isinstance(t, inspect.DictType):
        return FieldSpec("object", high=t.max_length or NO_MAXIMUM)
    return FieldSpec("struct")
