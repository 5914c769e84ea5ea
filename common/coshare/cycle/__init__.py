"""The planning cycle's write side: the port a scheduler's writer implements
(:mod:`coshare.cycle.queue_writer`) and the one protocol that drives it
(:mod:`coshare.cycle.protocol`)."""
