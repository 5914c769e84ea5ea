"""The offload gate: a job's offloads never hold more device threads than it declared, and
all jobs together never more than the device has (the paper's COSMIC, section IV-D2).

- :mod:`.protocol` (pure): the line protocol, small enough to speak from C or Fortran.
- :mod:`.state` (pure): per-device thread budgets, grants and the fair queue.
- :mod:`.server`: the asyncio unix-socket server around the state machine.
- :mod:`.client`: the Python client and the ``offload()`` context manager jobs use.
- ``examples/offload.c``: a complete C client.
"""
