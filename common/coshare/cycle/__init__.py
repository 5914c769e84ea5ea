"""One planning cycle, the same for every scheduler: read, plan (a job or node that makes the
policy fail left out: :mod:`coshare.cycle.containment`), check (:mod:`coshare.cycle.verify`),
and write through the one protocol (:mod:`coshare.cycle.protocol`) over a scheduler's
:class:`~coshare.cycle.queue_writer.QueueWriter`; the trial co-runs' step and the cycle's
metrics (:mod:`coshare.cycle.run` ties them together)."""
