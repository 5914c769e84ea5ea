"""Deadlock-free allocation of gangs over several scheduling domains (PICASO).

Ramachandran and Mueller, *Distributed Job Allocation for Large-Scale Manycores*
(``shared/papers/distributed-job-allocation-manycores.md``): each domain has its own
allocator (a micro-kernel in the paper; in coshare a planner per schedd, partition or
cluster), and a job whose tasks need more cores than its home domain has gathers them from
the others. Piecewise allocation deadlocks (hold and wait, the paper's Fig. 2); a global
order (submission time stamp + home domain id) with **active cancellation** of lower
requests, or an elected **sequencer** that orders every request, makes it deadlock-free.

Modules, all pure (no I/O, no clock, no randomness; ``tests/unit/test_purity.py``):

- :mod:`~coshare.alloc.layout`: domains, the cores (units) each owns, their mesh of links;
  two domains claiming one node are refused naming both.
- :mod:`~coshare.alloc.propagation`: section 4.4's spanning trees (fixed pattern, adaptive)
  and the message counts of section 7.6's four broadcast schemes.
- :mod:`~coshare.alloc.store`: the reservation store port (a ``Protocol``) and its in-memory
  implementation; :class:`coshare.coord.reservations.PostgresReservations` (active
  cancellation) and :class:`coshare.coord.sequencer.SequencerReservations` (the sequencer)
  back the same port with PostgreSQL.
- :mod:`~coshare.alloc.protocol`: the per-domain manager, a state machine that takes one
  message and returns the messages it sends (both policies), and the message-count formulas.

The message-level simulator that drives it is :mod:`coshare.sim.picaso`.
"""
