"""The what-if simulator: the same policies as the live cycle, on modelled or traced workloads.

Pure modules (no I/O, no clock; ``tests/unit/test_purity.py`` checks them): ``engine``,
``device``, ``jobs``, ``metrics``, ``calibrate``, ``experiments``, ``fragmentation``,
``footprint``, ``paper``, ``workloads`` (the paper's job sets), ``applications`` (Table I and
the Xeon Phi models), ``traces`` (trace parsers), ``poncos`` (poncos' Table 1, queues and
bandwidth model), ``picaso`` (the distributed allocation protocol's message-level
simulator).

I/O modules, told apart by name: ``cli`` (``coshare simulate``), ``report`` (tables and JSON),
``plot`` (figures), ``trace_files`` (reading the trace files), ``poncos_report`` (the
poncos workload's tables) and ``picaso_report`` (the picaso workloads' tables).
"""
