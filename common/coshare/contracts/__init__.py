"""The snapshot and plan JSON contracts as typed definitions (msgspec structs).

- :mod:`coshare.contracts.fields`: the kinds of field every contract is made of (ids, names,
  text, bounded integers and numbers), each with its bound and its description.
- :mod:`coshare.contracts.snapshot_doc`, :mod:`coshare.contracts.plan_doc`: each contract,
  one struct per object, in the JSON's own field names.
- :mod:`coshare.contracts.typed`: decoding and validating a document in one pass in C, and
  turning it into the model (:mod:`coshare.model`).
- :mod:`coshare.contracts.specs`: each field's bounds, for the messages of the field checker.
- :mod:`coshare.contracts.json_schema`: the published JSON Schemas, emitted from the structs.

:mod:`coshare.schema` is the entry point: it decodes through the structs and, where a document
does not pass them, names every problem with the job (or node), the field and what is allowed.
"""
