"""Node helpers: enforce on each node what the planner promised (the paper's COSMIC, IV-D2).

The node daemon (``coshare node gate``, root) runs two services, each in its own package, on
top of what they share here:

- :mod:`.gate`: the offload gate that keeps device threads from being oversubscribed.
- :mod:`.control`: job control, through which job wrappers running as the job's user start,
  join and end the job's group; ``coshare-launch``, its user-side client.

Shared by both (and by the root entry points that need no daemon):

- :mod:`.cgroups` (:mod:`.cgroups.v1`, :mod:`.cgroups.v2`): a group per job, its own CPUs,
  a memory limit, freeze/thaw, kill as a whole, cleanup.
- :mod:`.spec`: a job's inputs, checked; CPU lists and core choice (pure).
- :mod:`.jobs`: job records in the state directory; pid -> job through the cgroup.
- :mod:`.lifecycle`: ``job-start`` / ``job-exec`` / ``job-end``, the adapters' entry point.
- :mod:`.process` (pure), :mod:`.procfs`: processes as /proc describes them.
- :mod:`.watchdog`, :mod:`.nvml`: a job over its declared memory is killed, with a reason.
- :mod:`.daemon`: ``coshare node gate`` (both services and the watchdog); :mod:`.cli`: the
  commands.
"""
