"""The published JSON Schemas (``coshare schema snapshot|plan``, shipped in
``coshare/schemas``), emitted from the typed definitions.

After changing a contract: ``python -m coshare.contracts.json_schema common/coshare/schemas``
(tests/unit/test_contracts.py checks the shipped files are what this writes).

The schema says what a schema can: types, ranges, lengths, the fields of each object. The
parser also applies the character rules of ids and text (a pattern here approximates them)
and what refers across objects (ids given twice, unknown nodes, devices and limits).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
from msgspec import inspect

from coshare.contracts.plan_doc import PlanDoc
from coshare.contracts.snapshot_doc import SnapshotDoc

#: Each contract: its file, its struct and its ``$id``.
CONTRACTS: dict[str, type[msgspec.Struct]] = {"snapshot": SnapshotDoc, "plan": PlanDoc}


def file_name(name: str) -> str:
    """The shipped file of contract ``name``."""
    return f"{name}.schema.json"


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of contract ``name`` (``snapshot`` or ``plan``)."""
    struct = CONTRACTS[name]
    defs: dict[str, Any] = {}
    info = inspect.type_info(struct)
    assert isinstance(info, inspect.StructType)
    top = _object(info, defs)
    top.pop("description", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"coshare:{file_name(name)}",
        "title": f"coshare {name}",
        "description": _prose(struct.__doc__ or ""),
        **top,
        "$defs": defs,
    }


def schema_text(name: str) -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(schema(name), indent=1, ensure_ascii=False) + "\n"


def _prose(doc: str) -> str:
    return re.sub(r"\s+", " ", doc).strip()


def _def_name(cls: type) -> str:
    """``PendingDoc`` -> ``pending``."""
    return cls.__name__.removesuffix("Doc").lower()


def _object(info: inspect.StructType, defs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if info.cls.__doc__ and info.cls.__doc__ != msgspec.Struct.__doc__:
        out["description"] = _prose(info.cls.__doc__)
    always = getattr(info.cls, "WRITTEN_ALWAYS", ())
    out["required"] = [f.encode_name for f in info.fields if f.required or f.name in always]
    out["additionalProperties"] = not info.forbid_unknown_fields
    out["properties"] = {f.encode_name: _field(f.type, defs) for f in info.fields}
    return out


def _field(t: inspect.Type, defs: dict[str, Any]) -> dict[str, Any]:
    if isinstance(t, inspect.UnionType):
        kinds = [k for k in t.types if not isinstance(k, inspect.NoneType)]
        if len(kinds) != 1:
            raise TypeError(f"a union the schema does not write: {t}")
        inner = _field(kinds[0], defs)
        if "$ref" in inner:
            return {"anyOf": [inner, {"type": "null"}]}
        return {**inner, "type": [inner["type"], "null"]}
    extra: dict[str, Any] = {}
    described: dict[str, Any] = {}
    if isinstance(t, inspect.Metadata):
        extra = t.extra or {}
        described = t.extra_json_schema or {}
        t = t.type
    out = _plain(t, defs, extra)
    return {**out, **described}


def _plain(t: inspect.Type, defs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(t, (inspect.IntType, inspect.FloatType)):
        kind = "integer" if isinstance(t, inspect.IntType) else "number"
        out = {"type": extra.get("json_type", kind)}
        if t.ge is not None:
            out["minimum"] = _number(t.ge)
        if t.gt is not None:
            out["exclusiveMinimum"] = _number(t.gt)
        if t.le is not None:
            out["maximum"] = _number(t.le)
        return out
    if isinstance(t, inspect.StrType):
        out = {"type": "string"}
        if t.min_length is not None:
            out["minLength"] = t.min_length
        if t.max_length is not None:
            out["maxLength"] = t.max_length
        if "pattern" in extra:
            out["pattern"] = extra["pattern"]
        return out
    if isinstance(t, inspect.LiteralType):
        return {"type": "string", "enum": list(t.values)}
    if isinstance(t, inspect.ListType):
        out = {"type": "array"}
        if t.max_length is not None:
            out["maxItems"] = t.max_length
        out["items"] = _field(t.item_type, defs)
        return out
    if isinstance(t, inspect.DictType):
        out = {"type": "object"}
        if t.max_length is not None:
            out["maxProperties"] = t.max_length
        keys = _field(t.key_type, defs)
        keys.pop("type", None)
        keys.pop("description", None)
        out["propertyNames"] = keys
        out["additionalProperties"] = _field(t.value_type, defs)
        return out
    if isinstance(t, inspect.StructType):
        name = _def_name(t.cls)
        if name not in defs:
            defs[name] = {}  # a placeholder first: the order of first use
            defs[name] = _object(t, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"a type the schema does not write: {t}")


def _number(value: float) -> int | float:
    """Whole bounds as integers (``1000000``, not ``1000000.0``)."""
    return int(value) if float(value).is_integer() else value


def main(argv: list[str] | None = None) -> int:
    """Write every contract's schema into the folder given (``common/coshare/schemas``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m coshare.contracts.json_schema FOLDER", file=sys.stderr)
        return 2
    folder = Path(args[0])
    for name in CONTRACTS:
        (folder / file_name(name)).write_text(schema_text(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
