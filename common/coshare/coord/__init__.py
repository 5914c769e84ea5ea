"""Several planners over shared nodes: the engine they coordinate through.

The allocation protocol (:mod:`coshare.alloc`) is pure; here it meets a real, well-kept
engine instead of a home-made server: PostgreSQL (:mod:`coshare.coord.engine` holds its tables
and isolation rules), started on one machine by ``deploy/postgres/local-postgres``, its
address in ``coordination.dsn``.

- :class:`~coshare.coord.leases.PlannerLease`: one planner's lease (a row with an expiry
  on the engine's clock, a fencing epoch); of two instances of one planner only the holder
  writes (high availability).
- :class:`~coshare.coord.reservations.PostgresReservations`: the
  :class:`~coshare.alloc.store.ReservationStore` port on a table keyed by core or device,
  with the global order and active cancellation (:meth:`claim`); every booking carries its
  planner's lease and is dead once the lease is.
- :class:`~coshare.coord.sequencer.SequencerReservations`: the same port with the sequencer
  instead (tickets from a PostgreSQL ``SEQUENCE``, each unit granted in ticket order, nothing
  cancelled); ``coordination.protocol`` picks one for every planner over an engine.
- :func:`~coshare.coord.cycle.coordination`: what a live cycle does with them (take or renew
  the lease before reading, check it again before writing); absent config, nothing.

psycopg 3 comes with the ``coord`` extra.
"""
