"""Job control: how job wrappers that run as the job's user (HTCondor's job wrapper, Slurm's
TaskProlog) have the root node daemon start, join and end the job's group.

- :mod:`.protocol` (pure): the START / JOIN / END line protocol.
- :mod:`.trust` (pure): who may ask what, from what the kernel says about the caller.
- :mod:`.service`: :class:`~.service.JobControl`, the requests in the daemon; reaping and
  adopting jobs.
- :mod:`.server`: the asyncio unix-socket server of the control socket.
- :mod:`.launcher`: ``coshare-launch``, the user-side client (one file, standard library
  only: it is installed on its own, e.g. into the HTCondor chroot).
"""
