"""The ledger: the scheduler's queue read as placements that hold resources, and the
records it is read from (annotations, node facts, ids, bounds, gangs, MIG, LLC ways, fair
share, trial records). Pure: no I/O."""
