"""The kinds of text field the JSON contracts are made of, each with its bound and description.

A field's type is what msgspec checks while it decodes (type, range, length); ``extra`` holds
what only the JSON Schema and the messages need: ``check`` (``id``, ``text``, ``devices``: the
character rules of :mod:`coshare.ledger.ids`, applied after decoding) and ``pattern`` (the JSON
Schema's approximation of that rule). A field narrows one of these with its own description:
``Annotated[Id, Meta(description=...)]``; numbers carry their bounds inline.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from coshare.ledger.ids import MAX_ID_CHARS, MAX_TEXT_CHARS

#: An id (job, device, limit): no white space at either end, no commas (ids are listed
#: joined by commas).
ID_PATTERN = r"^[^\s,](?:[^,]*[^\s,])?$"
#: A node name: no white space at either end.
NAME_PATTERN = r"^\S(?:.*\S)?$"
#: Device ids joined by commas.
DEVICES_PATTERN = r"^[^\s,](?:[^,]*[^\s,])?(?:,[^\s,](?:[^,]*[^\s,])?)*$"

Id = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description=(
            "a name or id: 1-256 characters, no white space at either end, no control "
            "characters, no commas"
        ),
        extra={"check": "id", "pattern": ID_PATTERN},
    ),
]
"""A job, device or limit id."""

Name = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description=(
            "a name or id: 1-256 characters, no white space at either end, no control characters"
        ),
        extra={"check": "id", "pattern": NAME_PATTERN},
    ),
]
"""A node name (the parser refuses commas in it as in every id)."""

Text = Annotated[str, Meta(min_length=1, max_length=MAX_TEXT_CHARS, extra={"check": "text"})]
"""Free text: printable, not only white space."""

Devices = Annotated[str, Meta(extra={"check": "devices", "pattern": DEVICES_PATTERN})]
"""Device ids joined by commas (``"0,1"``)."""

WHOLE = {"json_type": "integer"}
"""The ``extra`` of a number the model keeps as an integer: the schema says integer."""
